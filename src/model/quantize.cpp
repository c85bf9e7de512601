#include "model/quantize.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include "checkpoint/gemmaserve_quantization.h"
#include "core/logging.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/quant.h"

namespace gemmaserve {
namespace {

// Quantizes rows [begin, end) of m into dst (row-major, quantized row bytes).
void quantize_rows(const WeightMatrix& m, DType type, int64_t begin, int64_t end, std::byte* dst) {
  const size_t src_row = dtype_row_bytes(m.dtype, m.cols), dst_row = dtype_row_bytes(type, m.cols);
  std::vector<float> scratch(static_cast<size_t>(m.cols));
  const auto* src = static_cast<const std::byte*>(m.data);
  for (int64_t r = begin; r < end; ++r) {
    cpu::quantize_row_from(type, m.dtype, src + static_cast<size_t>(r) * src_row,
                           dst + static_cast<size_t>(r) * dst_row, m.cols, scratch.data());
  }
}

}  // namespace

void quantize_weight_matrices(std::span<const QuantizeTarget> todo, DType type, ThreadPool* pool,
                              std::vector<std::shared_ptr<const void>>* owned,
                              const std::function<void(size_t, size_t)>& progress) {
  size_t total = 0;
  std::vector<std::pair<WeightMatrix*, DType>> kept;
  int skipped = 0;
  for (const QuantizeTarget& q : todo) {
    WeightMatrix* m = q.matrix;
    if (!m || !*m || dtype_is_quantized(m->dtype)) continue;
    const DType wanted = tensor_quant_type(type, q.embedding ? "embed_tokens.weight" : m->name);
    const std::optional<DType> mt = block_fit_type(wanted, m->cols);
    if (mt != wanted) {
      GS_LOG_INFO << block_fit_note(m->name, wanted, m->cols, m->dtype);
    }
    if (!mt) {
      ++skipped;
      continue;
    }
    kept.emplace_back(m, *mt);
    total += static_cast<size_t>(m->rows) * dtype_row_bytes(m->dtype, m->cols);
  }
  size_t done = 0;
  for (const auto& entry : kept) {
    // Named variables, not a structured binding: clang 14 cannot capture one in a lambda.
    WeightMatrix* const m = entry.first;
    const DType mt = entry.second;
    const size_t dst_row = dtype_row_bytes(mt, m->cols);
    const size_t src_row = dtype_row_bytes(m->dtype, m->cols);
    std::shared_ptr<std::byte[]> buf =
        std::make_unique_for_overwrite<std::byte[]>(dst_row * static_cast<size_t>(m->rows));
    // Row chunks of about 64 MiB of source, so progress moves on the largest matrices too.
    const int64_t chunk = std::max<int64_t>(1, static_cast<int64_t>((64u << 20) / src_row));
    for (int64_t r0 = 0; r0 < m->rows; r0 += chunk) {
      const int64_t r1 = std::min(m->rows, r0 + chunk);
      if (pool && r1 - r0 > 1) {
        pool->parallel_for(static_cast<size_t>(r1 - r0), [&](size_t b, size_t e) {
          quantize_rows(*m, mt, r0 + static_cast<int64_t>(b), r0 + static_cast<int64_t>(e),
                        buf.get());
        });
      } else {
        quantize_rows(*m, mt, r0, r1, buf.get());
      }
      done += static_cast<size_t>(r1 - r0) * src_row;
      if (progress) progress(done, total);
    }
    m->data = buf.get();
    m->dtype = mt;
    owned->push_back(std::move(buf));
  }
  if (progress) progress(total, total);
  GS_LOG_INFO << "quantized " << kept.size() << " weight matrices to "
              << cpu::quantization_type_name(type)
              << (skipped ? " (" + std::to_string(skipped) + " kept in float)" : std::string());
}

std::optional<DType> checkpoint_tensor_quant_type(const CheckpointTensor& tensor,
                                                  const std::string& text_prefix, DType type,
                                                  bool* kept_float) {
  const std::string& name = tensor.name;
  const bool text = name.rfind(text_prefix, 0) == 0 || name == "lm_head.weight";
  const std::string key = name.rfind(text_prefix, 0) == 0 ? name.substr(text_prefix.size()) : name;
  const bool is_float =
      tensor.dtype == DType::kF32 || tensor.dtype == DType::kF16 || tensor.dtype == DType::kBF16;
  const bool vision =
      name.rfind("model.vision_tower.", 0) == 0 || name.rfind("model.embed_vision.", 0) == 0 ||
      name.rfind("model.vision_embedder.", 0) == 0 || name.rfind("model.embed_audio.", 0) == 0;
  const bool weight =
      vision ? is_quantizable_vision_tensor(name) : text && is_quantizable_tensor(key);
  if (tensor.shape.size() < 2 || !is_float || !weight) return std::nullopt;
  const DType wanted = tensor_quant_type(type, key);
  const std::optional<DType> fit = block_fit_type(wanted, tensor.shape.back());
  if (fit != wanted) {
    GS_LOG_INFO << block_fit_note(name, wanted, tensor.shape.back(), tensor.dtype);
  }
  if (!fit && kept_float) *kept_float = true;
  return fit;
}

void quantize_model_weights(ModelWeights& w, DType type, ThreadPool* pool,
                            const std::function<void(size_t, size_t)>& progress) {
  const bool tied = w.lm_head.data == w.embed_tokens.data;
  std::vector<QuantizeTarget> todo = {{&w.embed_tokens, true},
                                      {&w.embed_tokens_per_layer, false},
                                      {&w.per_layer_model_projection, false}};
  if (!tied) todo.push_back({&w.lm_head, true});
  for (LayerWeights& l : w.layers) {
    for (WeightMatrix* m :
         {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.gate_proj, &l.up_proj, &l.down_proj,
          &l.per_layer_input_gate, &l.per_layer_projection, &l.experts_gate_up, &l.experts_down}) {
      todo.push_back({m, false});
    }
  }
  for (WeightMatrix* m : w.vision.linear_matrices()) todo.push_back({m, false});
  for (WeightMatrix* m : w.unified.linear_matrices()) todo.push_back({m, false});
  for (WeightMatrix* m : w.audio.linear_matrices()) todo.push_back({m, false});
  quantize_weight_matrices(todo, type, pool, &w.owned_buffers, progress);
  if (tied) w.lm_head = w.embed_tokens;
}

}  // namespace gemmaserve
