#include "engine/speculative/speculative_decoding.h"

#include "core/error.h"
#include "core/logging.h"
#include "engine/speculative/mtp_proposer.h"
#include "engine/speculative/ngram_proposer.h"
#include "gemmaserve/llm.h"
#include "io/json_file.h"
#include "kernels/cpu/quant.h"
#include "model/config.h"
#include "model/gemma4_assistant_config.h"

namespace gemmaserve {
namespace {

// A checkpoint folder's config.json (InputError naming it when absent or malformed).
nlohmann::json load_json_config(const std::string& dir) {
  const std::filesystem::path path = std::filesystem::path(dir) / "config.json";
  if (!std::filesystem::exists(path)) {
    throw InputError("--speculative-config: " + path.string() + " is missing");
  }
  return read_json_file(path);
}

}  // namespace

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
  // {"model": DIR} alone names a draft model; an assistant checkpoint there means MTP.
  if (config->method == "draft_model" && !config->model.empty() &&
      is_assistant_config(load_json_config(config->model))) {
    config->method = "mtp";
  }
  std::unique_ptr<DraftProposer> proposer;
  if (config->method == "ngram") {
    proposer =
        std::make_unique<NgramProposer>(config->prompt_lookup_min, config->prompt_lookup_max);
    GS_LOG_INFO << "speculative decoding: ngram prompt lookup, " << config->num_speculative_tokens
                << " tokens, n-grams of " << config->prompt_lookup_min << ".."
                << config->prompt_lookup_max;
  } else if (config->method == "mtp") {
    if (config->model.empty()) {
      throw InputError(
          "--speculative-config: method 'mtp' needs 'model' (a gemma4_assistant checkpoint "
          "folder: Gemma 4 targets have no MTP layers of their own)");
    }
    if (!is_assistant_config(load_json_config(config->model))) {
      throw InputError("--speculative-config: method 'mtp' needs a gemma4_assistant checkpoint; " +
                       config->model + " is not one");
    }
    std::optional<DType> quantization;
    if (!config->quantization.empty()) {
      quantization =
          cpu::parse_quantization_type(config->quantization, "--speculative-config 'quantization'");
    }
    proposer = std::make_unique<MtpProposer>(config->model, target, quantization);
    GS_LOG_INFO << "speculative decoding: Gemma 4 MTP assistant " << config->model << ", "
                << config->num_speculative_tokens << " tokens";
  } else {
    throw InputError("--speculative-config: method 'draft_model' is not yet supported");
  }
  return std::make_unique<SpeculativeDecoding>(std::move(*config), std::move(proposer));
}

}  // namespace gemmaserve
