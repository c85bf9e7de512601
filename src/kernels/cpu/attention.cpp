#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/attention_internal.h"

namespace gemmaserve::cpu {
namespace detail {
namespace {

constexpr int kTile = 16;  // accumulator floats kept in registers while summing a chunk

// q·k with 16 partial sums: enough independent add chains to hide latency.
inline float dot16(const float* __restrict a, const float* __restrict b, int n) {
  float acc[16] = {};
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int j = 0; j < 16; ++j) acc[j] += a[i + j] * b[i + j];
  }
  for (int j = 0; j < 8; ++j) acc[j] += acc[j + 8];
  float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

}  // namespace

// Reads each chunk's K rows, then its V rows, decoded to f32 in ws.rows.
void attend_group_portable(const PagedKv& kv, const AttentionShape& shape,
                           const AttentionGroupTask& task, AttentionScratch& ws) {
  constexpr int kChunk = kAttentionKeyChunk;
  const int group = task.group;
  const int hd = shape.head_dim;
  const int64_t row_bytes = static_cast<int64_t>(kv_row_bytes(kv.dtype, hd));
  const int64_t head_offset = task.kv_head * row_bytes;
  const auto* kbase = static_cast<const uint8_t*>(kv.k);
  const auto* vbase = static_cast<const uint8_t*>(kv.v);
  int64_t slots[kChunk];

  std::fill(ws.acc.begin(), ws.acc.begin() + static_cast<size_t>(group) * hd, 0.0f);
  std::fill(ws.max.begin(), ws.max.begin() + group, -std::numeric_limits<float>::infinity());
  std::fill(ws.sum.begin(), ws.sum.begin() + group, 0.0f);

  for (int32_t c0 = task.range.begin; c0 < task.range.end; c0 += kChunk) {
    const int n = std::min<int32_t>(kChunk, task.range.end - c0);
    for (int j = 0; j < n; ++j) {
      const int32_t pos = c0 + j;
      const int64_t block = task.block_table[static_cast<size_t>(pos / kv.block_size)];
      slots[j] = (block * kv.block_size + pos % kv.block_size) * kv.slot_bytes + head_offset;
      decode_kv_row(kv.dtype, kbase + slots[j], hd, &ws.rows[static_cast<size_t>(j) * hd]);
    }
    for (int j = 0; j < n; ++j) {
      const float* key = &ws.rows[static_cast<size_t>(j) * hd];
      for (int g = 0; g < group; ++g) {
        ws.scores[g * kChunk + j] = dot16(task.q + g * hd, key, hd) * shape.scale;
      }
    }
    for (int g = 0; g < group; ++g) {
      float* s = &ws.scores[g * kChunk];
      float cmax = ws.max[g];
      for (int j = 0; j < n; ++j) cmax = std::max(cmax, s[j]);
      float* acc = &ws.acc[static_cast<size_t>(g) * hd];
      if (cmax > ws.max[g]) {
        // exp(-inf) = 0 on the first chunk, so the empty accumulators stay zero.
        const float corr = std::exp(ws.max[g] - cmax);
        for (int d = 0; d < hd; ++d) acc[d] *= corr;
        ws.sum[g] *= corr;
        ws.max[g] = cmax;
      }
      for (int j = 0; j < n; ++j) {
        s[j] = std::exp(s[j] - cmax);
        ws.sum[g] += s[j];
      }
    }
    for (int j = 0; j < n; ++j) {
      decode_kv_row(kv.dtype, vbase + slots[j], hd, &ws.rows[static_cast<size_t>(j) * hd]);
    }
    for (int g = 0; g < group; ++g) {
      const float* p = &ws.scores[g * kChunk];
      float* acc = &ws.acc[static_cast<size_t>(g) * hd];
      // Register tiles of the accumulator; each element still sums keys in order.
      int d0 = 0;
      for (; d0 + kTile <= hd; d0 += kTile) {
        float t[kTile];
        for (int d = 0; d < kTile; ++d) t[d] = acc[d0 + d];
        for (int j = 0; j < n; ++j) {
          const float* v = &ws.rows[static_cast<size_t>(j) * hd + d0];
          for (int d = 0; d < kTile; ++d) t[d] += p[j] * v[d];
        }
        for (int d = 0; d < kTile; ++d) acc[d0 + d] = t[d];
      }
      for (int j = 0; j < n; ++j) {
        const float* v = &ws.rows[static_cast<size_t>(j) * hd];
        for (int d = d0; d < hd; ++d) acc[d] += p[j] * v[d];
      }
    }
  }
  for (int g = 0; g < group; ++g) {
    const float l = ws.sum[g];
    const float* acc = &ws.acc[static_cast<size_t>(g) * hd];
    float* o = task.out + static_cast<size_t>(g) * hd;
    if (l > 0.0f) {
      for (int d = 0; d < hd; ++d) o[d] = acc[d] / l;
    } else {
      std::fill(o, o + hd, 0.0f);
    }
  }
}

}  // namespace detail

namespace {

// One work item: every query head of one KV-head group for one query token.
struct Item {
  int32_t seq;
  int32_t query;
  int32_t kv_head;
};

detail::AttendGroupFn attend_fn(SimdIsa isa, int head_dim) {
  if (head_dim % 16 != 0) return detail::attend_group_portable;
#if defined(__x86_64__)
  if (isa == SimdIsa::kAvx512) return detail::attend_group_avx512;
  if (isa == SimdIsa::kAvx2) return detail::attend_group_avx2;
#else
  (void)isa;
#endif
  return detail::attend_group_portable;
}

}  // namespace

KeyRange attention_key_range(const AttentionSeq& seq, const AttentionShape& shape, int32_t i) {
  if (!seq.key_ranges.empty()) return seq.key_ranges[static_cast<size_t>(i)];
  const int32_t pos = seq.first_pos + i;
  const int32_t begin = shape.window > 0 ? std::max(0, pos - shape.window + 1) : 0;
  return {begin, pos + 1};
}

bool attention_blocks_valid(const PagedKv& kv, const AttentionShape& shape,
                            std::span<const AttentionSeq> seqs) {
  if (kv.block_size <= 0) return false;
  for (const AttentionSeq& seq : seqs) {
    int32_t checked_lo = 0, checked_hi = -1;  // logical blocks already known valid
    for (int32_t i = 0; i < seq.num_queries; ++i) {
      const KeyRange r = attention_key_range(seq, shape, i);
      if (r.begin < 0 || r.end < r.begin) return false;
      if (r.end == r.begin) continue;
      const int32_t lo = r.begin / kv.block_size, hi = (r.end - 1) / kv.block_size;
      if (lo >= checked_lo && hi <= checked_hi) continue;
      for (int32_t b = lo; b <= hi; ++b) {
        if (static_cast<size_t>(b) >= seq.block_table.size()) return false;
        const int32_t phys = seq.block_table[static_cast<size_t>(b)];
        if (phys < 0 || phys >= kv.num_blocks) return false;
      }
      checked_lo = lo;
      checked_hi = hi;
    }
  }
  return true;
}

void paged_attention(const float* q, size_t ldq, const PagedKv& kv, const AttentionShape& shape,
                     std::span<const AttentionSeq> seqs, float* out, size_t ldo, ThreadPool* pool) {
  paged_attention(q, ldq, kv, shape, seqs, out, ldo, pool, best_simd_isa());
}

void paged_attention(const float* q, size_t ldq, const PagedKv& kv, const AttentionShape& shape,
                     std::span<const AttentionSeq> seqs, float* out, size_t ldo, ThreadPool* pool,
                     SimdIsa isa) {
  const int group = shape.num_heads / shape.num_kv_heads;
  const int hd = shape.head_dim;
  const detail::AttendGroupFn attend = attend_fn(isa, hd);
  // Items ordered sequence -> KV head -> query, so neighbouring items reuse cached keys.
  std::vector<Item> items;
  std::vector<int64_t> cost_prefix{0};
  for (size_t s = 0; s < seqs.size(); ++s) {
    for (int32_t h = 0; h < shape.num_kv_heads; ++h) {
      for (int32_t i = 0; i < seqs[s].num_queries; ++i) {
        items.push_back({static_cast<int32_t>(s), i, h});
        const KeyRange r = attention_key_range(seqs[s], shape, i);
        cost_prefix.push_back(cost_prefix.back() + 1 + (r.end - r.begin));
      }
    }
  }
  if (items.empty()) return;
  auto run_range = [&](size_t begin, size_t end) {
    detail::AttentionScratch ws;
    ws.prepare(group, hd);
    for (size_t i = begin; i < end; ++i) {
      const Item& item = items[i];
      const AttentionSeq& seq = seqs[static_cast<size_t>(item.seq)];
      const size_t row = static_cast<size_t>(seq.q_row + item.query);
      const size_t first_head = static_cast<size_t>(item.kv_head) * group;
      detail::AttentionGroupTask task;
      task.q = q + row * ldq + first_head * hd;
      task.out = out + row * ldo + first_head * hd;
      task.range = attention_key_range(seq, shape, item.query);
      task.block_table = seq.block_table;
      task.kv_head = item.kv_head;
      task.group = group;
      attend(kv, shape, task, ws);
    }
  };
  const size_t parts = pool == nullptr ? 1 : pool->size();
  if (parts == 1 || items.size() == 1) {
    run_range(0, items.size());
    return;
  }
  // Split by key count, not item count: causal rows differ widely in cost.
  std::vector<size_t> bounds(parts + 1, items.size());
  bounds[0] = 0;
  const int64_t total = cost_prefix.back();
  for (size_t p = 1; p < parts; ++p) {
    const int64_t target = total * static_cast<int64_t>(p) / static_cast<int64_t>(parts);
    bounds[p] = static_cast<size_t>(
        std::lower_bound(cost_prefix.begin(), cost_prefix.end(), target) - cost_prefix.begin());
    bounds[p] = std::clamp(bounds[p], bounds[p - 1], items.size());
  }
  pool->parallel_for(parts, [&](size_t b, size_t e) {
    for (size_t p = b; p < e; ++p) run_range(bounds[p], bounds[p + 1]);
  });
}

}  // namespace gemmaserve::cpu
