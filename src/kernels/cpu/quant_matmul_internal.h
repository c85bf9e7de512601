// Shared pieces of the quantized matmul paths: the int8 activation rows and the canonical
// accumulation order.
//
// Canonical order, per output (x row, w row): 16 float lanes acc[h * 8 + j], h = block parity,
// j = group of 4 consecutive elements in a 32-element block. Block b adds
// acc[(b & 1) * 8 + j] = fma(dw_b * dx_b, float(p_bj), acc[...]) where p_bj is the exact integer
// dot product of those 4 elements; an odd last block pairs with a zero block (fma(0, 0, acc)).
// The result is reduce16(acc): halves added, then quarters, then pairs. Q4_K additionally keeps
// 8 min lanes macc[s] += (dmin * m_s) * xs_b (one fma per sub-block) and subtracts their
// reduce8. Any path that follows this gets bitwise-equal results.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/matmul.h"

namespace gemmaserve::cpu::quant_detail {

// Int8 activations of X, row t at q + t * k (blocks of 32 with scale d).
struct QuantActs {
  const int8_t* q = nullptr;     // [T, K]
  const float* d = nullptr;      // [T, K/32] block scales
  const int32_t* off = nullptr;  // [T, K/32 * 8] Q4_0: -8 * sum of each group of 4 q
  const float* xs = nullptr;     // [T, K/32] Q4_K: d * sum of the block's q
  // [T, K/32] interleaved layout: -128 (Q8_0) or -8 (Q4_0) times the sum of the block's q, the
  // start of each block's vpdpbusd sum (weights are stored unsigned: q + 128 or q + 8).
  const int32_t* corr = nullptr;
  int64_t k = 0;
  int64_t blocks() const { return k / 32; }
};

// Computes Y columns [n_begin, n_end) for every X row.
using RangeKernel = void (*)(const MatmulArgs& args, const QuantActs& acts, int64_t n_begin,
                             int64_t n_end);

// Quantizes one activation row (blocks of 32, d = max|x| / 127, round to nearest even) and the
// per-block extras that are not null: off (Q4_0 rows: -8 * each group of 4's sum), xs (Q4_K:
// d * block sum), corr (interleaved: corr_mult * block sum). The AVX-512 and AVX2 versions give
// the same bytes.
void quantize_act_row(const float* x, int64_t k, int8_t* q, float* d, int32_t* off, float* xs,
                      int32_t* corr, int32_t corr_mult);
void quantize_act_row_avx512(const float* x, int64_t k, int8_t* q, float* d, int32_t* off,
                             float* xs, int32_t* corr, int32_t corr_mult);
void quantize_act_row_avx2(const float* x, int64_t k, int8_t* q, float* d, int32_t* off, float* xs,
                           int32_t* corr, int32_t corr_mult);

// quantize_act_row's per-block extras of block b from its values qb, scale and sum of values.
inline void act_block_extras(const int8_t* qb, float scale, int32_t total, int64_t b, int32_t* off,
                             float* xs, int32_t* corr, int32_t corr_mult) {
  if (off) {
    for (int j = 0; j < 8; ++j) {
      off[b * 8 + j] = -8 * (qb[4 * j] + qb[4 * j + 1] + qb[4 * j + 2] + qb[4 * j + 3]);
    }
  }
  if (xs) xs[b] = scale * static_cast<float>(total);
  if (corr) corr[b] = corr_mult * total;
}

RangeKernel portable_kernel(DType dtype);
RangeKernel avx2_kernel(DType dtype);
RangeKernel avx512_kernel(DType dtype);
// Kernels over interleaved weights (interleave.h); n_begin and n_end multiples of 16.
RangeKernel portable_interleaved_kernel(DType dtype);
RangeKernel avx512_interleaved_kernel(DType dtype);
RangeKernel avx2_interleaved_kernel(DType dtype);     // quant_interleaved_ymm.h, vpmaddubsw
RangeKernel avxvnni_interleaved_kernel(DType dtype);  // the same with VEX vpdpbusd
RangeKernel avx512_interleaved_q4k_kernel();

inline float reduce8(const float* a) {
  float r4[4], r2[2];
  for (int j = 0; j < 4; ++j) r4[j] = a[j] + a[j + 4];
  for (int j = 0; j < 2; ++j) r2[j] = r4[j] + r4[j + 2];
  return r2[0] + r2[1];
}

inline float reduce16(const float* a) {
  float r8[8];
  for (int j = 0; j < 8; ++j) r8[j] = a[j] + a[j + 8];
  return reduce8(r8);
}

}  // namespace gemmaserve::cpu::quant_detail
