#include "engine/speculative/speculative_decoding.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/logging.h"
#include "engine/speculative/draft_model_proposer.h"
#include "engine/speculative/mtp_proposer.h"
#include "engine/speculative/ngram_proposer.h"
#include "gemmaserve/llm.h"
#include "kernels/cpu/quant.h"
#include "model/config.h"
#include "model/weights.h"

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

namespace {

// The draft checkpoint's model_type (top level, as HF's config.json has it); "" when absent.
std::string checkpoint_model_type(const std::filesystem::path& dir) {
  std::ifstream in(dir / "config.json");
  if (!in)
    throw InputError("--speculative-config: no config.json in draft model '" + dir.string() + "'");
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded()) {
    throw InputError("--speculative-config: draft model '" + dir.string() +
                     "' has a config.json that is not valid JSON");
  }
  return j.is_object() && j.contains("model_type") && j["model_type"].is_string()
             ? j["model_type"].get<std::string>()
             : "";
}

std::unique_ptr<DraftProposer> load_draft_model(const EngineArgs& args,
                                                const SpeculativeConfig& config,
                                                const SpeculativeTarget& target) {
  WeightLoadOptions load;
  const std::string quantization =
      config.quantization.empty() ? args.quantization : config.quantization;
  if (!quantization.empty()) {
    apply_quantization_flag(quantization, "--speculative-config", &load);
    // --quantization gptq names the target's own method, not the draft's.
    if (config.quantization.empty()) load.checkpoint_quantization.clear();
    load.pool = target.pool.get();
  }
  ModelWeights weights = load_model_weights(config.model, nullptr, load);
  if (weights.config.text.vocab_size != target.vocab_size) {
    throw InputError("--speculative-config: the draft model '" + config.model + "' has " +
                     std::to_string(weights.config.text.vocab_size) +
                     " tokens in its vocabulary, the target " + std::to_string(target.vocab_size) +
                     "; a draft must share the target's tokenizer");
  }
  Gemma4ModelOptions options;
  options.matmul_precision =
      parse_matmul_precision(args.cpu_matmul_precision, "--cpu-matmul-precision");
  auto model = std::make_unique<Gemma4Model>(std::move(weights), target.pool, options, nullptr);
  return std::make_unique<DraftModelProposer>(std::move(model), args.block_size, target.kv_dtype,
                                              target.max_model_len, target.kv_tokens,
                                              args.max_num_batched_tokens);
}

std::unique_ptr<DraftProposer> load_mtp_drafter(const EngineArgs& args,
                                                const SpeculativeConfig& config,
                                                const SpeculativeTarget& target) {
  if (config.model.empty()) {
    throw InputError(
        "--speculative-config: method 'mtp' needs 'model' (the Gemma 4 assistant drafter's "
        "checkpoint folder)");
  }
  if (args.tensor_parallel_size > 1) {
    throw InputError("--speculative-config: the MTP drafter does not run with tensor parallelism");
  }
  AssistantWeights weights = load_assistant_weights(config.model);
  const std::string quantization =
      config.quantization.empty() ? args.quantization : config.quantization;
  if (!quantization.empty() && checkpoint_method_of_flag(quantization).empty()) {
    quantize_assistant_weights(weights,
                               cpu::parse_quantization_type(quantization, "--speculative-config"),
                               target.pool.get());
  }
  auto drafter =
      std::make_unique<Gemma4Assistant>(std::move(weights), *target.weights, target.pool);
  return std::make_unique<MtpProposer>(std::move(drafter), *target.cache, target.max_model_len);
}

}  // namespace

std::unique_ptr<SpeculativeDecoding> make_speculative_decoding(const EngineArgs& args,
                                                               const SpeculativeTarget& target) {
  std::optional<SpeculativeConfig> config = parse_speculative_config(args.speculative_config);
  if (!config) return nullptr;
  if (config->method == "draft_model" &&
      checkpoint_model_type(config->model) == "gemma4_assistant") {
    config->method = "mtp";  // the drafter's checkpoint given as `model`
  }
  std::unique_ptr<DraftProposer> proposer;
  if (config->method == "ngram") {
    proposer =
        std::make_unique<NgramProposer>(config->prompt_lookup_min, config->prompt_lookup_max);
    GS_LOG_INFO << "speculative decoding: ngram prompt lookup, " << config->num_speculative_tokens
                << " tokens, n-grams of " << config->prompt_lookup_min << ".."
                << config->prompt_lookup_max;
  } else if (config->method == "mtp") {
    proposer = load_mtp_drafter(args, *config, target);
    GS_LOG_INFO << "speculative decoding: MTP assistant drafter " << config->model << ", "
                << config->num_speculative_tokens << " tokens";
  } else {
    proposer = load_draft_model(args, *config, target);
    GS_LOG_INFO << "speculative decoding: draft model " << config->model << ", "
                << config->num_speculative_tokens << " tokens";
  }
  return std::make_unique<SpeculativeDecoding>(std::move(*config), std::move(proposer));
}

}  // namespace gemmaserve
