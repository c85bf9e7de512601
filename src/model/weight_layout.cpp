#include "model/weight_layout.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <new>
#include <utility>
#include <vector>

#include "core/huge_pages.h"
#include "core/logging.h"
#include "io/mapped_file.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/interleave.h"

namespace gemmaserve {

void interleave_weights(ModelWeights& w, ThreadPool* pool) {
  const auto start = std::chrono::steady_clock::now();
  const bool tied = w.lm_head.data == w.embed_tokens.data;
  // (matrix, rows of one independently addressed slice: an expert's rows for 3-D experts).
  std::vector<std::pair<WeightMatrix*, int64_t>> todo = {
      {&w.lm_head, w.lm_head.rows},
      {&w.per_layer_model_projection, w.per_layer_model_projection.rows}};
  const int64_t experts = std::max(1, w.config.text.num_experts);
  for (LayerWeights& l : w.layers) {
    for (WeightMatrix* m : {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.gate_proj, &l.up_proj,
                            &l.down_proj, &l.per_layer_input_gate, &l.per_layer_projection}) {
      todo.emplace_back(m, m->rows);
    }
    todo.emplace_back(&l.experts_gate_up, l.experts_gate_up.rows / experts);
    todo.emplace_back(&l.experts_down, l.experts_down.rows / experts);
  }
  for (WeightMatrix* m : w.vision.linear_matrices()) todo.emplace_back(m, m->rows);
  for (WeightMatrix* m : w.unified.linear_matrices()) todo.emplace_back(m, m->rows);
  for (WeightMatrix* m : w.audio.linear_matrices()) todo.emplace_back(m, m->rows);
  std::erase_if(todo, [](const auto& item) {
    const auto& [m, slice_rows] = item;
    return !*m || m->layout != WeightLayout::kRows || !cpu::interleave_preferred(m->dtype) ||
           !cpu::interleave_supported(m->dtype, slice_rows, m->cols) || m->rows % slice_rows != 0;
  });
  if (todo.empty()) return;
  // One buffer on huge pages for all of them (64-byte aligned each, so every weight line the
  // kernels load is one cache line); each source is freed once copied, so memory grows by one
  // matrix at most.
  const auto aligned_size = [](const WeightMatrix& m) {
    return (static_cast<size_t>(m.rows) * dtype_row_bytes(m.dtype, m.cols) + 63) / 64 * 64;
  };
  size_t bytes = 0;
  for (const auto& item : todo) bytes += aligned_size(*item.first);
  const double gib = static_cast<double>(bytes) / (1 << 30);
  GS_LOG_INFO << "regrouping " << todo.size() << " weight matrices (" << gib
              << " GiB) 16 rows at a time for the " << cpu::cpu_isa_name(cpu::cpu_isa())
              << " kernels";
  std::shared_ptr<std::byte> arena = allocate_huge_page_buffer(bytes);
  size_t offset = 0;
  for (const auto& item : todo) {
    WeightMatrix* m = item.first;
    std::byte* dst = arena.get() + offset;
    offset += aligned_size(*m);
    cpu::interleave_rows(m->dtype, m->data, dst, m->rows, m->cols, pool);
    const void* old = m->data;
    m->data = dst;
    m->layout = WeightLayout::kInterleaved16;
    // A source in the checkpoint's mapping would otherwise stay resident beside its copy.
    if (std::erase_if(w.owned_buffers, [&](const auto& b) { return b.get() == old; }) == 0) {
      release_mapped_pages(old, static_cast<size_t>(m->rows) * dtype_row_bytes(m->dtype, m->cols));
    }
  }
  w.owned_buffers.push_back(std::move(arena));
  if (tied) w.embed_tokens = w.lm_head;
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  GS_LOG_INFO << "regrouped " << gib << " GiB in " << secs << " s";
}

}  // namespace gemmaserve
