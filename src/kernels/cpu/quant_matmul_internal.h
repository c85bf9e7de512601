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
  int64_t k = 0;
  int64_t blocks() const { return k / 32; }
};

// Computes Y columns [n_begin, n_end) for every X row.
using RangeKernel = void (*)(const MatmulArgs& args, const QuantActs& acts, int64_t n_begin,
                             int64_t n_end);

RangeKernel portable_kernel(DType dtype);
RangeKernel avx2_kernel(DType dtype);
RangeKernel avx512_kernel(DType dtype);

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
