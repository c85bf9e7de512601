// vLLM's n-gram prompt-lookup proposer: the longest suffix of the sequence (between
// prompt_lookup_min and prompt_lookup_max tokens) that occurred earlier in it, earliest
// occurrence first; the drafts are the tokens that followed that occurrence.
#pragma once

#include "engine/speculative/draft_proposer.h"

namespace gemmaserve {

// The draft for one token history (at most k tokens; empty when no n-gram matches).
std::vector<int32_t> ngram_lookup(std::span<const int32_t> tokens, int min_n, int max_n, int k);

class NgramProposer final : public DraftProposer {
 public:
  NgramProposer(int min_n, int max_n) : min_n_(min_n), max_n_(max_n) {}
  std::vector<std::vector<int32_t>> propose(std::span<const DraftRequest> requests) override;

 private:
  int min_n_;
  int max_n_;
};

}  // namespace gemmaserve
