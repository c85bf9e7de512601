// The Gemma 4 MTP assistant drafter (model/gemma4_assistant.h) as a proposer: per sequence it
// takes the newest token, the target's final-normed hidden row of the position before it and
// the target's block tables, and drafts k tokens greedily over the target's own KV cache (it
// has none of its own, so nothing to roll back).
#pragma once

#include <memory>

#include "engine/speculative/draft_proposer.h"
#include "model/gemma4_assistant.h"

namespace gemmaserve {

class MtpProposer final : public DraftProposer {
 public:
  // `target_cache` must outlive the proposer; the engine writes it only inside its forward,
  // never while propose() runs (both on the engine thread).
  MtpProposer(std::unique_ptr<Gemma4Assistant> drafter, const KvCache& target_cache,
              int max_model_len);
  std::vector<std::vector<int32_t>> propose(std::span<const DraftRequest> requests) override;
  bool wants_hidden_states() const override { return true; }

 private:
  std::unique_ptr<Gemma4Assistant> drafter_;
  const KvCache& cache_;
  int max_model_len_;
};

}  // namespace gemmaserve
