// Configuration of a Gemma 4 MTP "assistant" drafter checkpoint (HF Gemma4AssistantConfig,
// model_type gemma4_assistant): a small Gemma 4 text decoder whose layers attend over the
// target's KV cache, bridged to the target's width by pre/post projections. See
// docs/MTP_DRAFTER.md for the layout and the public sources it was taken from.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/config.h"

namespace gemmaserve {

struct AssistantConfig {
  std::string architecture = "Gemma4AssistantForCausalLM";
  std::string model_type = "gemma4_assistant";
  // Width of the target this drafter was trained with: its input is
  // [target embedding(token) * sqrt(B), target hidden] (2B wide), its recurrent output B wide.
  int backbone_hidden_size = 1536;
  // The centroid ("masked") LM head: score num_centroids token clusters, keep the top
  // centroid_intermediate_top_k, compute logits only for their tokens.
  bool use_ordered_embeddings = false;
  int num_centroids = 2048;
  int centroid_intermediate_top_k = 32;
  bool tie_word_embeddings = true;
  // The drafter's own decoder. Every layer is Q-only (HF forces num_kv_shared_layers to
  // num_hidden_layers); its `layers` specs are derived as if no layer were shared, so each
  // spec holds the head geometry its queries need.
  TextConfig text;
  std::vector<int> eos_token_ids;
  nlohmann::json raw;  // the whole config.json

  int vocab_size_per_centroid() const { return text.vocab_size / num_centroids; }
};

// True when a parsed config.json describes an assistant drafter (model_type gemma4_assistant
// or architecture Gemma4AssistantForCausalLM).
bool is_assistant_config(const nlohmann::json& config);

// Parses an assistant's config.json with HF's defaults and HF's validate_architecture() rules
// (hidden_size_per_layer_input 0, vocab_size_per_layer_input 0, no MoE, no double-wide MLP,
// every layer KV-shared). Throws InputError naming `source` and the field.
AssistantConfig parse_assistant_config(const nlohmann::json& config, const std::string& source);
AssistantConfig load_assistant_config(const std::filesystem::path& dir);

}  // namespace gemmaserve
