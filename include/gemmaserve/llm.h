// Offline inference API: load a checkpoint once, generate for many prompts.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gemmaserve/request_output.h"
#include "gemmaserve/sampling_params.h"

namespace gemmaserve {

class Tokenizer;

struct EngineArgs {
  std::string model;      // Hugging Face checkpoint folder
  std::string tokenizer;  // tokenizer.json / GGUF / folder; empty = the model folder's, if any
  int threads = 0;        // 0 = all cores
  int max_model_len = 0;  // 0 = the config's max_position_embeddings
  int block_size = 16;
  bool show_progress = true;  // progress bar on stderr for large checkpoints
};

// A prompt is text or token ids.
struct Prompt {
  std::optional<std::string> text;
  std::vector<int32_t> token_ids;
  static Prompt from_text(std::string t) { return Prompt{std::move(t), {}}; }
  static Prompt from_ids(std::vector<int32_t> ids) { return Prompt{std::nullopt, std::move(ids)}; }
};

class LLM {
 public:
  explicit LLM(const EngineArgs& args);
  ~LLM();
  LLM(const LLM&) = delete;
  LLM& operator=(const LLM&) = delete;

  // Runs every prompt to completion, all together in batched steps; outputs keep prompt order.
  std::vector<RequestOutput> generate(const std::vector<Prompt>& prompts,
                                      const SamplingParams& params);

  // nullptr when the checkpoint has no tokenizer and none was given.
  const Tokenizer* tokenizer() const;
  // Ids that end generation unless ignore_eos: generation_config's, config.json's and the
  // tokenizer's eos, never hard-coded.
  const std::vector<int32_t>& eos_token_ids() const;
  int vocab_size() const;
  // SamplingParams with the checkpoint's generation_config.json defaults applied (temperature,
  // top_k, top_p, min_p), as vLLM's get_default_sampling_params().
  SamplingParams default_sampling_params() const;
  // Engine steps run so far (one forward call each).
  uint64_t num_steps() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gemmaserve
