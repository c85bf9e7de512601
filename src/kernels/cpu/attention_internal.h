// Private to the attention kernels: one (sequence, query, KV head) work item and the
// per-ISA implementations of it.
#pragma once

#include <algorithm>
#include <span>
#include <vector>

#include "core/aligned.h"
#include "kernels/cpu/attention.h"

namespace gemmaserve::cpu::detail {

constexpr int kAttentionKeyChunk = 32;  // keys scored before one softmax rescale
// Keys are summed in segments that start at multiples of this position, each with its own
// online softmax, then folded in order: a fixed split that prefill and decode share, so a
// long decode row can be spread over threads without changing its bits.
constexpr int32_t kAttentionKeySegment = 128;

// Query heads an item holds at most: consecutive queries of one KV head share an item (each
// K/V row is then read once for all of them) while their heads fit in this many.
constexpr int kAttentionItemHeads = 8;

// The query heads of one KV-head group for one or more consecutive query tokens, over one key
// segment.
struct AttentionGroupTask {
  const float* q = nullptr;  // `group` heads of head_dim floats, consecutive
  KeyRange range;
  int32_t prefetch_end = 0;  // keys [range.end, prefetch_end) are read next: worth requesting
  std::span<const int32_t> block_table;
  int kv_head = 0;
  int group = 0;
  // Several queries (all with range.begin as their first key): head g belongs to query
  // g / heads_per_query, whose keys end at query_ends[g / heads_per_query]; later keys of a
  // chunk are masked exactly like a single query's short last chunk. Null for one query.
  const int32_t* query_ends = nullptr;
  int heads_per_query = 0;
  // Keys of chunk [c0, c0 + n) that head g sees.
  int keys_for_head(int g, int32_t c0, int n) const {
    if (query_ends == nullptr) return n;
    return std::clamp(query_ends[g / heads_per_query] - c0, 0, n);
  }
};

// Online-softmax state of a group's heads over some keys: unnormalised sums of value rows, the
// running maximum score and the sum of exp(score - max).
struct SoftmaxState {
  float* acc = nullptr;  // [group, head_dim]
  float* max = nullptr;  // [group]
  float* sum = nullptr;  // [group]
};

// Per-thread buffers, sized by prepare().
struct AttentionScratch {
  // Line-aligned where the kernels load whole vectors.
  AlignedVector<float> scores;   // [group, kAttentionKeyChunk]
  AlignedVector<float> weights;  // scores times per-row V scale (fp8)
  AlignedVector<float> acc;      // [group, head_dim]: the segment the kernel is summing
  std::vector<float> max, sum;
  AlignedVector<float> rows;  // decoded K or V rows, portable path: [kAttentionKeyChunk, head_dim]
  AlignedVector<float> total_acc;
  std::vector<float> total_max, total_sum;  // an item's segments folded so far (with total_acc)
  AlignedVector<float> queries;             // the item's queries' heads, consecutive
  void prepare(int group, int head_dim) {
    scores.resize(static_cast<size_t>(group) * kAttentionKeyChunk);
    weights.resize(scores.size());
    acc.resize(static_cast<size_t>(group) * head_dim);
    max.resize(static_cast<size_t>(group));
    sum.resize(static_cast<size_t>(group));
    rows.resize(static_cast<size_t>(kAttentionKeyChunk) * head_dim);
    total_acc.resize(acc.size());
    total_max.resize(max.size());
    total_sum.resize(sum.size());
    queries.resize(acc.size());
  }
  SoftmaxState state() { return {acc.data(), max.data(), sum.data()}; }
  SoftmaxState total() { return {total_acc.data(), total_max.data(), total_sum.data()}; }
};

// Each kernel leaves the state of task.range (non-empty, inside one segment) in ws.state().
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
