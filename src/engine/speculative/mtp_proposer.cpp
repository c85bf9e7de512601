#include "engine/speculative/mtp_proposer.h"

#include <algorithm>

namespace gemmaserve {

MtpProposer::MtpProposer(std::unique_ptr<Gemma4Assistant> drafter, const KvCache& target_cache,
                         int max_model_len)
    : drafter_(std::move(drafter)), cache_(target_cache), max_model_len_(max_model_len) {}

std::vector<std::vector<int32_t>> MtpProposer::propose(std::span<const DraftRequest> requests) {
  std::vector<std::vector<int32_t>> drafts(requests.size());
  // One draft_greedy call per draft length (usually one: every sequence asks for k).
  std::vector<size_t> order;
  for (size_t i = 0; i < requests.size(); ++i) {
    const DraftRequest& r = requests[i];
    const int len = static_cast<int>(r.tokens.size());
    if (len >= 2 && !r.target_hidden.empty() &&
        std::min(r.max_drafts, max_model_len_ - len - 1) > 0) {
      order.push_back(i);
    }
  }
  const auto k_of = [&](size_t i) {
    return std::min(requests[i].max_drafts,
                    max_model_len_ - static_cast<int>(requests[i].tokens.size()) - 1);
  };
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return k_of(a) < k_of(b); });
  for (size_t begin = 0; begin < order.size();) {
    const int k = k_of(order[begin]);
    size_t end = begin;
    std::vector<DraftInput> batch;
    while (end < order.size() && k_of(order[end]) == k) {
      const DraftRequest& r = requests[order[end]];
      DraftInput in;
      in.token = r.tokens.back();
      in.position = static_cast<int32_t>(r.tokens.size()) - 1;
      in.hidden = r.target_hidden.data();
      in.block_tables = r.target_block_tables;
      batch.push_back(in);
      ++end;
    }
    std::vector<int32_t> tokens;
    drafter_->draft_greedy(batch, k, cache_, &tokens);
    for (size_t j = 0; j < batch.size(); ++j) {
      drafts[order[begin + j]].assign(tokens.begin() + static_cast<std::ptrdiff_t>(j * k),
                                      tokens.begin() + static_cast<std::ptrdiff_t>((j + 1) * k));
    }
    begin = end;
  }
  return drafts;
}

}  // namespace gemmaserve
