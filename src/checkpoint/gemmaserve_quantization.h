// gemmaserve's quantized checkpoints (gemmaserve quantize, make-test-model --dtype q*): which
// tensors are quantized and to what type, the quantization_config that lists them, and the
// bytes of a quantized tensor. Format: docs/QUANTIZATION.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/dtype.h"

namespace gemmaserve {

// Value of config.json's quantization_config.quant_method for gemmaserve checkpoints.
inline constexpr const char* kQuantMethod = "gemmaserve";

// Whether a checkpoint tensor (name without the text prefix, e.g. "layers.0.mlp.up_proj.weight")
// is one that quantization applies to: linear projections, experts, embeddings, the per-layer
// projections. Norms, scalars and the MoE router stay float.
bool is_quantizable_tensor(const std::string& key);
// Whether a checkpoint tensor (full name) is one of the vision tower's linear weights that
// quantization applies to (model/weights.h VisionWeights::linear_matrices): the patch embedding,
// the encoder's projections (".linear.weight") and embed_vision's projection; the unified
// model's patch_dense and embed_audio projection (UnifiedEmbedderWeights::linear_matrices); not
// position tables, norms or clipping bounds.
bool is_quantizable_vision_tensor(const std::string& name);

// The type a tensor gets when the model is quantized to `type`: the tied embedding / LM head
// (embed_tokens.weight, lm_head.weight) stays at Q8_0 under the 4-bit types, as llama.cpp keeps
// its output matrix at higher precision: every logit comes straight from it.
DType tensor_quant_type(DType type, const std::string& name);

// The type rows of `cols` elements get when `wanted` is asked for: `wanted` when they are whole
// blocks of it; Q4_0 for Q4_K rows that are not whole 256-element super-blocks (26B-A4B's
// 704-wide expert down projections), as llama.cpp falls back to a 32-element type there;
// nullopt when they are not whole blocks of that either (the tensor stays float).
std::optional<DType> block_fit_type(DType wanted, int64_t cols);

// The log line for a tensor whose rows are not whole blocks of `wanted`: the type it is stored
// as instead, or that it stays `float_dtype`.
std::string block_fit_note(const std::string& name, DType wanted, int64_t cols, DType float_dtype);

// The stored quantization of a checkpoint from its config.json (raw JSON): tensor name -> dtype,
// and the overall type; nullopt when not a gemmaserve-quantized checkpoint (GPTQ, AWQ and
// compressed-tensors ones included: packed_checkpoint.h reads those). InputError on a malformed
// quantization_config or another quant_method.
struct StoredQuantization {
  DType type = DType::kQ8_0;
  std::map<std::string, DType> tensors;  // full checkpoint names
};
std::optional<StoredQuantization> stored_quantization(const nlohmann::json& config,
                                                      const std::string& source);
// quantization_config to put into config.json.
nlohmann::json quantization_config_json(DType type, const std::map<std::string, DType>& tensors);

// Bytes [first, first + count) of the quantized form of a [rows, cols] matrix whose row r is
// produced (as f32) by row_values(r, out). Rows are quantized whole, so any split of the byte
// range gives the same bytes.
void fill_quantized_bytes(DType type, int64_t cols, int64_t first, int64_t count, std::byte* dst,
                          const std::function<void(int64_t, float*)>& row_values);

}  // namespace gemmaserve
