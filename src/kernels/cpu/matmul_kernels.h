// Per-ISA entry points of the matmul kernels (internal to kernels/cpu). Each computes output
// columns [n_begin, n_end) of Y for every row of X on the calling thread, using
// matmul_tiling.h's tiles, so every level reduces each output element in the same order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/function_ref.h"
#include "kernels/cpu/matmul.h"

namespace gemmaserve::cpu::detail {

// Splits the concatenated rows of `parts` statically over `pool` (whole 16-row tiles; serial for
// small products) and calls fn(part, begin, end) with each part's own row range.
void parallel_over_parts(std::span<const MatmulArgs> parts, ThreadPool* pool,
                         FunctionRef<void(size_t, int64_t, int64_t)> fn);

void matmul_range_portable(const MatmulArgs& a, int64_t n_begin, int64_t n_end);
float dot_f32_portable(const float* a, const float* b, int64_t n);

// Interleaved F32 / BF16 weights (interleave.h) with f32 X; n_begin and n_end multiples of 16.
void matmul_range_interleaved_portable(const MatmulArgs& a, int64_t n_begin, int64_t n_end);

#if defined(__x86_64__)
void matmul_range_avx512_interleaved(const MatmulArgs& a, int64_t n_begin, int64_t n_end);
// The same with bf16 activations (MatmulPrecision::kBF16), x_bf16 as for matmul_range_avx512_bf16.
void matmul_range_avx512_bf16_interleaved(const MatmulArgs& a, const uint16_t* x_bf16,
                                          size_t ldx_bf16, int64_t n_begin, int64_t n_end);
void matmul_range_avx2(const MatmulArgs& a, int64_t n_begin, int64_t n_end);
float dot_f32_avx2(const float* a, const float* b, int64_t n);
void matmul_range_avx512(const MatmulArgs& a, int64_t n_begin, int64_t n_end);
float dot_f32_avx512(const float* a, const float* b, int64_t n);
// MatmulPrecision::kBF16 with bf16 W: x_bf16 is X rounded to bf16 (row stride ldx_bf16).
void matmul_range_avx512_bf16(const MatmulArgs& a, const uint16_t* x_bf16, size_t ldx_bf16,
                              int64_t n_begin, int64_t n_end);
#endif

}  // namespace gemmaserve::cpu::detail
