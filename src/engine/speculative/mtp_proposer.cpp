#include "engine/speculative/mtp_proposer.h"

#include <algorithm>
#include <stdexcept>

#include "core/logging.h"
#include "model/gemma4_model.h"

namespace gemmaserve {

MtpProposer::MtpProposer(const std::string& dir, const ModelConfig& target,
                         std::optional<DType> quantization)
    : quantization_(quantization), weights_(load_assistant_weights(dir)) {
  assistant_target_kv_layers(weights_.config, target.text);
}

MtpProposer::~MtpProposer() = default;

void MtpProposer::bind_target(const Gemma4Model& target, const KvCache& cache,
                              std::shared_ptr<ThreadPool> pool) {
  if (quantization_) quantize_assistant_weights(weights_, *quantization_, pool.get());
  drafter_ =
      std::make_unique<Gemma4Assistant>(std::move(weights_), target.weights(), std::move(pool));
  cache_ = &cache;
  const auto& src = drafter_->target_kv_layers();
  GS_LOG_INFO << "MTP assistant: " << drafter_->config().text.num_hidden_layers
              << " layers, hidden " << drafter_->config().text.hidden_size << ", "
              << (drafter_->config().use_ordered_embeddings ? "centroid" : "dense")
              << " head; reads the target's layers " << src[0] << " (sliding) and " << src[1]
              << " (full)";
}

std::vector<std::vector<int32_t>> MtpProposer::propose(std::span<const DraftRequest> requests) {
  if (!drafter_) throw std::logic_error("MtpProposer::propose before bind_target");
  std::vector<std::vector<int32_t>> drafts(requests.size());
  const auto width = static_cast<size_t>(drafter_->config().backbone_hidden_size);
  // One batch for every sequence that can be drafted for; all draft the longest k.
  std::vector<DraftInput> batch;
  std::vector<size_t> who;
  int k = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const DraftRequest& r = requests[i];
    if (r.max_drafts <= 0 || r.tokens.size() < 2 || r.target_hidden.size() < width) continue;
    DraftInput in;
    in.token = r.tokens.back();
    in.position = static_cast<int32_t>(r.tokens.size() - 1);
    // The last row is the target's state at the position before the newest token.
    in.hidden = r.target_hidden.data() + (r.target_hidden.size() - width);
    in.block_tables = r.block_tables;
    batch.push_back(in);
    who.push_back(i);
    k = std::max(k, r.max_drafts);
  }
  if (batch.empty()) return drafts;
  std::vector<int32_t> tokens;
  drafter_->draft_greedy(batch, k, *cache_, &tokens);
  for (size_t b = 0; b < who.size(); ++b) {
    const auto first = tokens.begin() + static_cast<std::ptrdiff_t>(b * static_cast<size_t>(k));
    drafts[who[b]].assign(first, first + requests[who[b]].max_drafts);
  }
  return drafts;
}

}  // namespace gemmaserve
