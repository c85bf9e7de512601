#include "engine/speculative/speculative_decoding.h"

#include "core/error.h"
#include "core/logging.h"
#include "engine/speculative/ngram_proposer.h"
#include "gemmaserve/llm.h"
#include "model/config.h"

namespace gemmaserve {

SpeculativeDecoding::SpeculativeDecoding(SpeculativeConfig config,
                                         std::unique_ptr<DraftProposer> proposer)
    : config_(std::move(config)), proposer_(std::move(proposer)) {
  stats_.accepted_per_position.assign(static_cast<size_t>(config_.num_speculative_tokens), 0);
}

void SpeculativeDecoding::record(int num_drafts, int num_accepted) {
  if (num_drafts <= 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  ++stats_.num_drafts;
  stats_.num_draft_tokens += static_cast<uint64_t>(num_drafts);
  stats_.num_accepted_tokens += static_cast<uint64_t>(num_accepted);
  for (int i = 0; i < num_accepted && i < static_cast<int>(stats_.accepted_per_position.size());
       ++i) {
    ++stats_.accepted_per_position[static_cast<size_t>(i)];
  }
}

SpeculativeStats SpeculativeDecoding::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

std::unique_ptr<SpeculativeDecoding> make_speculative_decoding(const EngineArgs& args,
                                                               const ModelConfig& target,
                                                               int vocab_size) {
  (void)target;
  (void)vocab_size;
  std::optional<SpeculativeConfig> config = parse_speculative_config(args.speculative_config);
  if (!config) return nullptr;
  std::unique_ptr<DraftProposer> proposer;
  if (config->method == "ngram") {
    proposer =
        std::make_unique<NgramProposer>(config->prompt_lookup_min, config->prompt_lookup_max);
    GS_LOG_INFO << "speculative decoding: ngram prompt lookup, " << config->num_speculative_tokens
                << " tokens, n-grams of " << config->prompt_lookup_min << ".."
                << config->prompt_lookup_max;
  } else if (config->method == "mtp") {
    throw InputError(
        "--speculative-config: method 'mtp' (the Gemma 4 assistant drafter) is not yet "
        "supported");
  } else {
    throw InputError("--speculative-config: method 'draft_model' is not yet supported");
  }
  return std::make_unique<SpeculativeDecoding>(std::move(*config), std::move(proposer));
}

}  // namespace gemmaserve
