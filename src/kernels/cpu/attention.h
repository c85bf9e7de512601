// Attention of new query tokens over a paged K/V store (causal, optionally sliding-window).
// Every (query token, head) is computed independently in a fixed key order with an online
// softmax, so a sequence's result never depends on what else is in the batch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "core/thread_pool.h"
#include "kernels/cpu/kv_format.h"
#include "kernels/cpu/simd_isa.h"

namespace gemmaserve::cpu {

// One layer's paged K/V: the slot of (block, offset) starts at byte
// (block * block_size + offset) * slot_bytes of k / v and holds num_kv_heads rows of
// kv_row_bytes(dtype, head_dim) bytes each (see kv_format.h for the row layouts).
struct PagedKv {
  const void* k = nullptr;
  const void* v = nullptr;
  int block_size = 0;
  int64_t slot_bytes = 0;
  int64_t num_blocks = 0;
  KvDtype dtype = KvDtype::kF32;
};

struct AttentionShape {
  int num_heads = 0;
  int num_kv_heads = 0;  // query head h reads KV head h / (num_heads / num_kv_heads)
  int head_dim = 0;
  int window = 0;  // > 0: a query at p sees keys in (p - window, p]; 0: all keys <= p
  float scale = 1.0f;
};

// Key positions [begin, end) a query may see; used instead of the causal/sliding rule where a
// per-token mask is needed (e.g. bidirectional image blocks).
struct KeyRange {
  int32_t begin = 0;
  int32_t end = 0;
};

struct AttentionSeq {
  int64_t q_row = 0;        // row of this sequence's first query in q / out
  int32_t num_queries = 0;  // consecutive query rows
  int32_t first_pos = 0;    // absolute position of the first query (query i is at first_pos + i)
  std::span<const int32_t> block_table;  // logical block -> physical block
  std::span<const KeyRange> key_ranges;  // empty, or one per query overriding the default rule
};

// Buffers that one caller's paged_attention calls reuse (work items, per-thread scratch). Not
// for two calls at once.
class AttentionWorkspace {
 public:
  AttentionWorkspace();
  ~AttentionWorkspace();
  AttentionWorkspace(AttentionWorkspace&&) noexcept;
  AttentionWorkspace& operator=(AttentionWorkspace&&) noexcept;

  struct Buffers;
  Buffers& buffers() { return *buffers_; }

 private:
  std::unique_ptr<Buffers> buffers_;
};

// Key range the kernel reads for query i of `seq`.
KeyRange attention_key_range(const AttentionSeq& seq, const AttentionShape& shape, int32_t i);

// True when every block-table entry the kernel will read is in [0, kv.num_blocks); entries
// outside the read ranges (e.g. blocks freed outside a sliding window) are never inspected.
bool attention_blocks_valid(const PagedKv& kv, const AttentionShape& shape,
                            std::span<const AttentionSeq> seqs);

// q: rows of [num_heads, head_dim] with row stride ldq; out: same layout with stride ldo.
// Callers check attention_blocks_valid first (workers cannot report errors).
// Work items are (sequence, KV head, query): the query heads sharing a KV head are computed
// together so each K/V row is loaded once per group, keys in ascending position, 32 per
// softmax rescale, in segments of 128 positions folded in order. Items are split statically
// by key count over the pool; when there are too few to share out (decode of one sequence with
// one KV head), their segments are. Uses the widest supported SIMD level; head dims that are
// not a multiple of 16 take the portable path.
// With a workspace its buffers are reused, so once they have grown to a batch's size a call
// allocates nothing; without one the call allocates its own.
void paged_attention(const float* q, size_t ldq, const PagedKv& kv, const AttentionShape& shape,
                     std::span<const AttentionSeq> seqs, float* out, size_t ldo, ThreadPool* pool,
                     AttentionWorkspace* workspace = nullptr);
// The same at a given SIMD level (which must be supported), for tests and benchmarks.
void paged_attention(const float* q, size_t ldq, const PagedKv& kv, const AttentionShape& shape,
                     std::span<const AttentionSeq> seqs, float* out, size_t ldo, ThreadPool* pool,
                     SimdIsa isa, AttentionWorkspace* workspace = nullptr);

}  // namespace gemmaserve::cpu
