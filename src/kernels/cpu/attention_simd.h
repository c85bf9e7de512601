// The attention work item over vector traits V (see simd_vec_x86.h), for head_dim % 16 == 0.
// Included by the per-ISA translation units after their `#pragma GCC target`.
//
// Per chunk of 32 keys: each key row is widened from the cache dtype once and dotted with all
// heads of the group (a few keys at a time, up to 16 accumulators in registers); the
// online-softmax statistics are updated per head; then each value row is widened once per 8
// heads and accumulated. A head's arithmetic never depends on how many heads (or queries)
// share the item, nor on other work items.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kernels/cpu/attention_internal.h"
#include "kernels/cpu/simd_math.h"

// Internal linkage: each ISA's translation unit gets its own copies, never merged by the linker.
namespace gemmaserve::cpu::simd {
namespace {

constexpr int kChunk = detail::kAttentionKeyChunk;
constexpr int kHeadBlock = detail::kAttentionItemHeads;  // heads sharing each widened K/V vector

// Elements [d, d + width) of one cache row as f32 (fp8 still to be multiplied by its row
// scale, q8_0 already scaled). `q8_values` is the offset of q8_0's int8 values in the row.
template <class V, KvDtype D>
inline typename V::F load_kv(const uint8_t* row, int d, int q8_values) {
  if constexpr (D == KvDtype::kF32) {
    return V::load(reinterpret_cast<const float*>(row) + d);
  } else if constexpr (D == KvDtype::kBF16) {
    return V::load_bf16(row + 2 * d);
  } else if constexpr (D == KvDtype::kF16) {
    return V::load_f16(row + 2 * d);
  } else if constexpr (D == KvDtype::kFp8E4M3) {
    return V::mul(V::load_e4m3_scaled(row + d), V::set1(0x1p120f));
  } else {
    uint16_t h;
    std::memcpy(&h, row + 2 * (d / kKvQ8BlockElems), 2);
    return V::mul(V::load_i8(row + q8_values + d), V::set1(_cvtsh_ss(h)));
  }
}

// fp8's per-row scale (1 for the other dtypes, whose rows carry none or fold it in).
template <KvDtype D>
inline float row_scale(const uint8_t* row, int head_dim) {
  if constexpr (D == KvDtype::kFp8E4M3) {
    float s;
    std::memcpy(&s, row + head_dim, sizeof(float));
    return s;
  } else {
    return 1.0f;
  }
}

// Keys scored together: G x kKeyBlock accumulators (independent FMA chains, at most 16) share
// each q vector load and each widened K vector, so loads no longer outnumber the FMAs.
template <int G>
constexpr int kKeyBlock = G == 1 ? 8 : std::max(1, 16 / G);

// Cache rows to request while a loop over head-dimension steps runs: step i of row j asks for
// the bytes at rows[j] + i * stride, so a whole row arrives spread over the loop (a burst of
// hundreds of requests stalls the core instead: decode attention streams its K/V from memory).
struct RowPrefetch {
  const uint8_t* const* rows = nullptr;
  int n = 0;  // rows[0, n) are requested
  int64_t row_bytes = 0;
  // Bytes per step of a loop over hd in pieces of `piece` floats, then of `width`.
  int64_t stride(int hd, int piece, int width) const {
    const int steps = hd / piece + (hd % piece) / width;
    return (row_bytes + steps - 1) / steps;
  }
  // always_inline: out of line, GCC judges this prefetch-only member free of side effects
  // and deletes its calls (cddce), so no row was ever requested.
  __attribute__((always_inline)) void at(int j, int step, int64_t stride) const {
    if (j < n) __builtin_prefetch(rows[j] + step * stride, 0, 3);
  }
};

// scores[g * kChunk + j] = (q_g . k_j) * scale for G heads starting at q; requests `pf`. Each
// dot product is one chain along the head dimension, reduced in the same lane order whichever
// block its key falls in (a short last block repeats its last key and drops the copies).
template <class V, KvDtype D, int G>
void score_keys(const float* q, int hd, const uint8_t* const* krows, int n, float scale,
                int q8_values, float* scores, const RowPrefetch& pf) {
  using F = typename V::F;
  constexpr int KB = kKeyBlock<G>;
  constexpr int W = V::kWidth;
  const int64_t stride = pf.stride(hd, W, W);
  for (int j0 = 0; j0 < n; j0 += KB) {
    const uint8_t* rows[KB];
    for (int b = 0; b < KB; ++b) rows[b] = krows[std::min(j0 + b, n - 1)];
    F acc[KB][G];
    for (int b = 0; b < KB; ++b) {
      for (int g = 0; g < G; ++g) acc[b][g] = V::zero();
    }
    for (int d = 0, step = 0; d < hd; d += W, ++step) {
      F k[KB];
      for (int b = 0; b < KB; ++b) {
        pf.at(j0 + b, step, stride);
        k[b] = load_kv<V, D>(rows[b], d, q8_values);
      }
      for (int g = 0; g < G; ++g) {
        const F qv = V::load(q + g * hd + d);
        for (int b = 0; b < KB; ++b) acc[b][g] = V::fmadd(qv, k[b], acc[b][g]);
      }
    }
    float sums[KB * G];
    if constexpr (KB * G == 16 && requires { V::reduce_add16(&acc[0][0], sums); }) {
      V::reduce_add16(&acc[0][0], sums);
    } else {
      for (int i = 0; i < KB * G; ++i) sums[i] = V::reduce_add(acc[i / G][i % G]);
    }
    for (int b = 0; b < KB && j0 + b < n; ++b) {
      const float rs = row_scale<D>(rows[b], hd) * scale;
      for (int g = 0; g < G; ++g) scores[g * kChunk + j0 + b] = sums[b * G + g] * rs;
    }
  }
}

// acc_g += sum_j weights[g * kChunk + j] * v_j for G heads; every element sums the keys in
// order. Keys go in blocks of kValueRows, each swept along the head dimension, so V streams
// as a few sequential runs (a sweep over all 32 rows per step reads memory in 512-byte
// strides and left decode at a fraction of the bandwidth). Requests `pf`.
constexpr int kValueRows = 4;

template <class V, KvDtype D, int G, int R>
inline void accumulate_rows(const float* weights, const uint8_t* const* vrows, int j0, int hd,
                            int q8_values, float* acc, const RowPrefetch& pf, int64_t stride) {
  using F = typename V::F;
  constexpr int W = V::kWidth;
  F w[R][G];
  for (int r = 0; r < R; ++r) {
    for (int g = 0; g < G; ++g) w[r][g] = V::set1(weights[g * kChunk + j0 + r]);
  }
  for (int d = 0, step = 0; d < hd; d += W, ++step) {
    for (int r = 0; r < R; ++r) pf.at(j0 + r, step, stride);
    F a[G];
    for (int g = 0; g < G; ++g) a[g] = V::load(acc + g * hd + d);
    for (int r = 0; r < R; ++r) {
      const F v = load_kv<V, D>(vrows[j0 + r], d, q8_values);
      for (int g = 0; g < G; ++g) a[g] = V::fmadd(w[r][g], v, a[g]);
    }
    for (int g = 0; g < G; ++g) V::store(acc + g * hd + d, a[g]);
  }
}

template <class V, KvDtype D, int G>
void accumulate_values(const float* weights, const uint8_t* const* vrows, int n, int hd,
                       int q8_values, float* acc, const RowPrefetch& pf) {
  constexpr int W = V::kWidth;
  const int64_t stride = pf.stride(hd, W, W);
  int j = 0;
  for (; j + kValueRows <= n; j += kValueRows) {
    accumulate_rows<V, D, G, kValueRows>(weights, vrows, j, hd, q8_values, acc, pf, stride);
  }
  for (; j < n; ++j) {
    accumulate_rows<V, D, G, 1>(weights, vrows, j, hd, q8_values, acc, pf, stride);
  }
  // Rows [n, pf.n) of the next chunk (n is short only in a range's last chunk).
  for (int k = n; k < pf.n; ++k) {
    for (int step = 0; step < hd / W; ++step) pf.at(k, step, stride);
  }
}

template <class V, KvDtype D>
void score_block(int heads, const float* q, int hd, const uint8_t* const* krows, int n, float scale,
                 int q8_values, float* scores, const RowPrefetch& pf) {
  switch (heads) {
    case 1:
      return score_keys<V, D, 1>(q, hd, krows, n, scale, q8_values, scores, pf);
    case 2:
      return score_keys<V, D, 2>(q, hd, krows, n, scale, q8_values, scores, pf);
    case 3:
      return score_keys<V, D, 3>(q, hd, krows, n, scale, q8_values, scores, pf);
    case 4:
      return score_keys<V, D, 4>(q, hd, krows, n, scale, q8_values, scores, pf);
    case 5:
      return score_keys<V, D, 5>(q, hd, krows, n, scale, q8_values, scores, pf);
    case 6:
      return score_keys<V, D, 6>(q, hd, krows, n, scale, q8_values, scores, pf);
    case 7:
      return score_keys<V, D, 7>(q, hd, krows, n, scale, q8_values, scores, pf);
    default:
      return score_keys<V, D, 8>(q, hd, krows, n, scale, q8_values, scores, pf);
  }
}

template <class V, KvDtype D>
void accumulate_block(int heads, const float* weights, const uint8_t* const* vrows, int n, int hd,
                      int q8_values, float* acc, const RowPrefetch& pf) {
  switch (heads) {
    case 1:
      return accumulate_values<V, D, 1>(weights, vrows, n, hd, q8_values, acc, pf);
    case 2:
      return accumulate_values<V, D, 2>(weights, vrows, n, hd, q8_values, acc, pf);
    case 3:
      return accumulate_values<V, D, 3>(weights, vrows, n, hd, q8_values, acc, pf);
    case 4:
      return accumulate_values<V, D, 4>(weights, vrows, n, hd, q8_values, acc, pf);
    case 5:
      return accumulate_values<V, D, 5>(weights, vrows, n, hd, q8_values, acc, pf);
    case 6:
      return accumulate_values<V, D, 6>(weights, vrows, n, hd, q8_values, acc, pf);
    case 7:
      return accumulate_values<V, D, 7>(weights, vrows, n, hd, q8_values, acc, pf);
    default:
      return accumulate_values<V, D, 8>(weights, vrows, n, hd, q8_values, acc, pf);
  }
}

// Row addresses of keys [c0, c0 + n) of the task's KV head.
inline void chunk_rows(const PagedKv& kv, const detail::AttentionGroupTask& task, int32_t c0, int n,
                       int64_t head_offset, const uint8_t** krows, const uint8_t** vrows) {
  const auto* kbase = static_cast<const uint8_t*>(kv.k);
  const auto* vbase = static_cast<const uint8_t*>(kv.v);
  size_t logical = static_cast<size_t>(c0 / kv.block_size);
  int offset = c0 % kv.block_size;
  for (int j = 0; j < n; ++j) {
    const int64_t slot = int64_t{task.block_table[logical]} * kv.block_size + offset;
    krows[j] = kbase + slot * kv.slot_bytes + head_offset;
    vrows[j] = vbase + slot * kv.slot_bytes + head_offset;
    if (++offset == kv.block_size) {
      offset = 0;
      ++logical;
    }
  }
}

template <class V, KvDtype D>
void attend_group(const PagedKv& kv, const AttentionShape& shape,
                  const detail::AttentionGroupTask& task, detail::AttentionScratch& ws) {
  using F = typename V::F;
  static_assert(kChunk % V::kWidth == 0);
  const int hd = shape.head_dim;
  const int group = task.group;
  const int64_t row_bytes = static_cast<int64_t>(kv_row_bytes(D, hd));
  const int64_t head_offset = task.kv_head * row_bytes;
  const int q8_values = 2 * ((hd + kKvQ8BlockElems - 1) / kKvQ8BlockElems);
  float* acc = ws.acc.data();
  std::fill(acc, acc + static_cast<size_t>(group) * hd, 0.0f);
  std::fill(ws.max.begin(), ws.max.begin() + group, -std::numeric_limits<float>::infinity());
  std::fill(ws.sum.begin(), ws.sum.begin() + group, 0.0f);
  const uint8_t* rows[2][2][kChunk];  // [chunk parity][K, V][key]
  int parity = 0;
  if (task.range.begin < task.range.end) {
    chunk_rows(kv, task, task.range.begin,
               std::min<int32_t>(kChunk, task.range.end - task.range.begin), head_offset,
               rows[0][0], rows[0][1]);
  }

  // Requests a chunk ahead (past the range up to task.prefetch_end: the next segment's first
  // keys), spread over the loops: the next chunk's K while this one's keys are scored, its V
  // while this one's values are summed (all at the chunk's start stalled the core on both CPUs).
  for (int32_t c0 = task.range.begin; c0 < task.range.end; c0 += kChunk, parity ^= 1) {
    const int n = std::min<int32_t>(kChunk, task.range.end - c0);
    const uint8_t* const* krows = rows[parity][0];
    const uint8_t* const* vrows = rows[parity][1];
    const int32_t next = std::min(c0 + kChunk, task.range.end);
    const int32_t next_end = next < task.range.end ? task.range.end : task.prefetch_end;
    const int next_n = std::clamp<int32_t>(next_end - next, 0, kChunk);
    chunk_rows(kv, task, next, next_n, head_offset, rows[parity ^ 1][0], rows[parity ^ 1][1]);
    for (int g0 = 0; g0 < group; g0 += kHeadBlock) {
      const RowPrefetch pf =
          g0 == 0 ? RowPrefetch{rows[parity ^ 1][0], next_n, row_bytes} : RowPrefetch{};
      score_block<V, D>(std::min(kHeadBlock, group - g0), task.q + static_cast<size_t>(g0) * hd, hd,
                        krows, n, shape.scale, q8_values, &ws.scores[g0 * kChunk], pf);
    }
    for (int g = 0; g < group; ++g) {
      float* s = &ws.scores[g * kChunk];
      std::fill(s + task.keys_for_head(g, c0, n), s + kChunk,
                -std::numeric_limits<float>::infinity());
      F vmax = V::load(s);
      for (int j = V::kWidth; j < kChunk; j += V::kWidth) vmax = V::max(vmax, V::load(s + j));
      const float cmax = std::max(ws.max[g], V::reduce_max(vmax));
      if (cmax > ws.max[g]) {
        // exp(-inf) = 0 on the first chunk, so the empty accumulators stay zero.
        const F corr = V::set1(std::exp(ws.max[g] - cmax));
        float* a = acc + static_cast<size_t>(g) * hd;
        for (int d = 0; d < hd; d += V::kWidth) V::store(a + d, V::mul(V::load(a + d), corr));
        ws.sum[g] *= std::exp(ws.max[g] - cmax);
        ws.max[g] = cmax;
      }
      // The chunk's weights are summed as vectors (the padding's exp(-inf) adds zeros), then
      // added to the running sum: one order for a chunk wherever it is computed.
      const F m = V::set1(cmax);
      F vsum = V::zero();
      for (int j = 0; j < kChunk; j += V::kWidth) {
        const F e = vexp<V>(V::sub(V::load(s + j), m));
        V::store(s + j, e);
        vsum = V::add(vsum, e);
      }
      ws.sum[g] += V::reduce_add(vsum);
      if constexpr (D == KvDtype::kFp8E4M3) {
        float* w = &ws.weights[g * kChunk];
        for (int j = 0; j < n; ++j) w[j] = s[j] * row_scale<D>(vrows[j], hd);
      }
    }
    const float* weights = D == KvDtype::kFp8E4M3 ? ws.weights.data() : ws.scores.data();
    for (int g0 = 0; g0 < group; g0 += kHeadBlock) {
      const RowPrefetch pf =
          g0 == 0 ? RowPrefetch{rows[parity ^ 1][1], next_n, row_bytes} : RowPrefetch{};
      accumulate_block<V, D>(std::min(kHeadBlock, group - g0), weights + g0 * kChunk, vrows, n, hd,
                             q8_values, acc + static_cast<size_t>(g0) * hd, pf);
    }
  }
}

template <class V>
void attend_group_any(const PagedKv& kv, const AttentionShape& shape,
                      const detail::AttentionGroupTask& task, detail::AttentionScratch& ws) {
  switch (kv.dtype) {
    case KvDtype::kF32:
      return attend_group<V, KvDtype::kF32>(kv, shape, task, ws);
    case KvDtype::kBF16:
      return attend_group<V, KvDtype::kBF16>(kv, shape, task, ws);
    case KvDtype::kF16:
      return attend_group<V, KvDtype::kF16>(kv, shape, task, ws);
    case KvDtype::kFp8E4M3:
      return attend_group<V, KvDtype::kFp8E4M3>(kv, shape, task, ws);
    case KvDtype::kQ8_0:
      return attend_group<V, KvDtype::kQ8_0>(kv, shape, task, ws);
  }
}

}  // namespace
}  // namespace gemmaserve::cpu::simd
