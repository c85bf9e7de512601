// Weight quantization of a loaded model (--quantization); the quantized checkpoint format is
// checkpoint/gemmaserve_quantization.h.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "core/dtype.h"
#include "core/thread_pool.h"
#include "model/weights.h"

namespace gemmaserve {

// Quantizes the model's float weight matrices in place (new buffers in w.owned_buffers);
// matrices whose row length is not a multiple of the block size keep their dtype (logged).
// progress(bytes of source done, total).
void quantize_model_weights(ModelWeights& w, DType type, ThreadPool* pool,
                            const std::function<void(size_t, size_t)>& progress);

// One matrix for quantize_weight_matrices; `embedding` ones get the embedding / LM head's type.
struct QuantizeTarget {
  WeightMatrix* matrix = nullptr;
  bool embedding = false;
};
// The given float matrices quantized in place (absent and already quantized ones skipped, rows
// that are not whole blocks kept in float, logged), the new buffers kept in `owned`.
void quantize_weight_matrices(std::span<const QuantizeTarget> todo, DType type, ThreadPool* pool,
                              std::vector<std::shared_ptr<const void>>* owned,
                              const std::function<void(size_t, size_t)>& progress);

// The type `gemmaserve quantize` stores a checkpoint tensor as when quantizing to `type`: the one
// load-time quantization gives the matrix it binds to. That is the float weight matrices of the
// text decoder (names below `text_prefix`, and lm_head.weight: projections, experts, embeddings)
// and the vision tower's linear weights; nullopt for what stays as stored (norms, scalars, the
// router, the position table, and rows that are not whole blocks, logged as at load; then
// `*kept_float` is set when given).
std::optional<DType> checkpoint_tensor_quant_type(const CheckpointTensor& tensor,
                                                  const std::string& text_prefix, DType type,
                                                  bool* kept_float = nullptr);

}  // namespace gemmaserve
