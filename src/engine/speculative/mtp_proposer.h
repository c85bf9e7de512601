// Gemma 4's MTP assistant (model/gemma4_assistant.h) as a draft proposer: per sequence, k greedy
// drafts from the newest token and the target's final hidden state at the position before it,
// attending over the target's own KV cache. It keeps no per-sequence state.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "engine/speculative/draft_proposer.h"
#include "model/gemma4_assistant.h"

namespace gemmaserve {

class MtpProposer final : public DraftProposer {
 public:
  // Loads the drafter from `dir` (quantized at load to `quantization` when set) and checks it
  // against the target's config: InputError before the target is bound.
  MtpProposer(const std::string& dir, const ModelConfig& target, std::optional<DType> quantization);
  ~MtpProposer() override;

  void bind_target(const Gemma4Model& target, const KvCache& cache,
                   std::shared_ptr<ThreadPool> pool) override;
  bool wants_hidden_states() const override { return true; }
  // Requests without a hidden row (none was computed for them) get no drafts.
  std::vector<std::vector<int32_t>> propose(std::span<const DraftRequest> requests) override;

 private:
  std::optional<DType> quantization_;
  AssistantWeights weights_;  // moved into drafter_ by bind_target
  std::unique_ptr<Gemma4Assistant> drafter_;
  const KvCache* cache_ = nullptr;
};

}  // namespace gemmaserve
