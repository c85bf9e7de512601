// Per-ISA entry points of the matmul kernels (internal to kernels/cpu). Each computes output
// columns [n_begin, n_end) of Y for every row of X on the calling thread, using
// matmul_tiling.h's tiles, so every level reduces each output element in the same order.
#pragma once

#include <cstdint>

#include "kernels/cpu/matmul.h"

namespace gemmaserve::cpu::detail {

void matmul_range_portable(const MatmulArgs& a, int64_t n_begin, int64_t n_end);
float dot_f32_portable(const float* a, const float* b, int64_t n);

#if defined(__x86_64__)
void matmul_range_avx2(const MatmulArgs& a, int64_t n_begin, int64_t n_end);
float dot_f32_avx2(const float* a, const float* b, int64_t n);
void matmul_range_avx512(const MatmulArgs& a, int64_t n_begin, int64_t n_end);
float dot_f32_avx512(const float* a, const float* b, int64_t n);
#endif

}  // namespace gemmaserve::cpu::detail
