// Rewrites a Gemma 4 checkpoint folder into another of the forms found in the wild (sharded,
// f32/f16, per_layer_config, Gemma4ForCausalLM text-only), so tests can check that every form
// loads to the same model.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/dtype.h"
#include "core/thread_pool.h"

namespace gemmaserve {

struct CheckpointForm {
  // Convert every F32/F16/BF16 tensor to this dtype (F32, F16 or BF16); nullopt keeps each
  // tensor's dtype. Other dtypes are copied unchanged.
  std::optional<DType> dtype;
  // 0: one model.safetensors; N >= 1: N shards (fewer when there are fewer tensors) named
  // model-0000i-of-0000N.safetensors plus model.safetensors.index.json.
  int num_shards = 0;
  // Replace global_head_dim / num_global_key_value_heads by per_layer_config, as newer HF
  // transformers serialize it.
  bool per_layer_config = false;
  // Gemma4ForCausalLM: flat gemma4_text config, text tensors renamed model.language_model.* ->
  // model.*, vision/audio towers dropped.
  bool causal_lm = false;
};

// Writes the converted checkpoint into dst (created if needed; it must hold no safetensors
// yet). Other files of src (generation_config.json, tokenizer files, ...) are copied.
// Throws InputError for unreadable input or an unusable dst.
void convert_checkpoint(const std::filesystem::path& src, const std::filesystem::path& dst,
                        const CheckpointForm& form, ThreadPool* pool = nullptr);

// config.json in the per_layer_config form HF transformers (>= 5.15) writes: full-attention
// layers get {"head_dim": global_head_dim} plus "num_key_value_heads": num_global_key_value_heads
// when attention_k_eq_v; an attribute equal on every layer becomes global instead; keys are
// layer indices zero-padded to a common width ("04", "34"). Works on nested and flat configs;
// a config that already has per_layer_config is returned unchanged.
nlohmann::json to_per_layer_config_form(const nlohmann::json& config);

// config.json of the Gemma4ForCausalLM form: the text_config with architectures
// ["Gemma4ForCausalLM"] (["Gemma4UnifiedForCausalLM"] for gemma4_unified; what HF's text-only
// conversion writes). Flat configs pass unchanged.
nlohmann::json to_causal_lm_config(const nlohmann::json& config);

}  // namespace gemmaserve
