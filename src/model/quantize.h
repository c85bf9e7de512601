// Weight quantization of a loaded model (--quantization); the quantized checkpoint format is
// checkpoint/gemmaserve_quantization.h.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <vector>

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

}  // namespace gemmaserve
