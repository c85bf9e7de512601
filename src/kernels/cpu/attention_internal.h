// Private to the attention kernels: one (sequence, query, KV head) work item and the
// per-ISA implementations of it.
#pragma once

#include <span>
#include <vector>

#include "kernels/cpu/attention.h"

namespace gemmaserve::cpu::detail {

constexpr int kAttentionKeyChunk = 32;  // keys scored before one softmax rescale

// The query heads of one KV-head group for one query token.
struct AttentionGroupTask {
  const float* q = nullptr;  // `group` heads of head_dim floats, consecutive
  float* out = nullptr;      // same layout
  KeyRange range;
  std::span<const int32_t> block_table;
  int kv_head = 0;
  int group = 0;
};

// Per-thread buffers, sized by prepare().
struct AttentionScratch {
  std::vector<float> scores;   // [group, kAttentionKeyChunk]
  std::vector<float> weights;  // scores times per-row V scale (fp8)
  std::vector<float> acc;      // [group, head_dim]
  std::vector<float> max, sum;
  std::vector<float> rows;  // decoded K or V rows, portable path: [kAttentionKeyChunk, head_dim]
  void prepare(int group, int head_dim) {
    scores.resize(static_cast<size_t>(group) * kAttentionKeyChunk);
    weights.resize(scores.size());
    acc.resize(static_cast<size_t>(group) * head_dim);
    max.resize(static_cast<size_t>(group));
    sum.resize(static_cast<size_t>(group));
    rows.resize(static_cast<size_t>(kAttentionKeyChunk) * head_dim);
  }
};

using AttendGroupFn = void (*)(const PagedKv&, const AttentionShape&, const AttentionGroupTask&,
                               AttentionScratch&);

void attend_group_portable(const PagedKv& kv, const AttentionShape& shape,
                           const AttentionGroupTask& task, AttentionScratch& ws);
#if defined(__x86_64__)
// Need head_dim % 16 == 0.
void attend_group_avx2(const PagedKv& kv, const AttentionShape& shape,
                       const AttentionGroupTask& task, AttentionScratch& ws);
void attend_group_avx512(const PagedKv& kv, const AttentionShape& shape,
                         const AttentionGroupTask& task, AttentionScratch& ws);
#endif

}  // namespace gemmaserve::cpu::detail
