#include "engine/speculative/ngram_proposer.h"

#include <algorithm>

namespace gemmaserve {

std::vector<int32_t> ngram_lookup(std::span<const int32_t> tokens, int min_n, int max_n, int k) {
  const int total = static_cast<int>(tokens.size());
  if (k <= 0 || total < min_n) return {};
  for (int n = std::min(max_n, total - 1); n >= min_n; --n) {
    const std::span<const int32_t> suffix = tokens.last(static_cast<size_t>(n));
    // Occurrences other than the suffix itself; the earliest wins (vLLM's rule).
    for (int start = 0; start + n < total; ++start) {
      if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + start)) continue;
      const int from = start + n;
      const int count = std::min(k, total - from);
      return std::vector<int32_t>(tokens.begin() + from, tokens.begin() + from + count);
    }
  }
  return {};
}

std::vector<std::vector<int32_t>> NgramProposer::propose(std::span<const DraftRequest> requests) {
  std::vector<std::vector<int32_t>> out;
  out.reserve(requests.size());
  for (const DraftRequest& r : requests) {
    out.push_back(ngram_lookup(r.tokens, min_n_, max_n_, r.max_drafts));
  }
  return out;
}

}  // namespace gemmaserve
