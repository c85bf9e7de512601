// Dense matrix product against checkpoint-layout weights: Y[T, N] = X[T, K] · W[N, K]ᵀ.
// W may be f32, bf16 or f16; accumulation is f32. Every output element is reduced in a fixed
// order that depends only on K (see matmul_tiling.h), so results are independent of T, of the
// thread count and of which other rows share the call (batch invariance).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/cpu/cpu_features.h"

namespace gemmaserve::cpu {

// kF32 (default): X stays f32, golden-accurate. kBF16: X is rounded to bf16 and multiplied with
// AVX512_BF16 dot products (about twice the f32 rate, for prefill); applies to bf16 weights on
// CPUs with avx512_bf16 at the avx512 level, elsewhere it is kF32. Reduction order is still
// fixed by K alone.
enum class MatmulPrecision { kF32, kBF16 };

struct MatmulArgs {
  const float* x = nullptr;  // [T, K] with row stride ldx
  size_t ldx = 0;
  const void* w = nullptr;  // [N, K] row-major, contiguous rows, dtype w_dtype
  DType w_dtype = DType::kF32;
  float* y = nullptr;  // [T, N] with row stride ldy
  size_t ldy = 0;
  int64_t t = 0;  // rows of X
  int64_t k = 0;  // reduction length
  int64_t n = 0;  // rows of W = output columns
  MatmulPrecision precision = MatmulPrecision::kF32;
  WeightLayout w_layout = WeightLayout::kRows;  // kInterleaved16: Q8_0 / Q4_0, N % 16 == 0
  // Optional, block-quantized W only: column j of W multiplies x[perm[j]] (K entries). Act-order
  // GPTQ modules have their columns sorted by group once at load; X is gathered to match.
  const int32_t* x_perm = nullptr;
  // Optional: the bytes the next product will read. In decode of one row each thread, once
  // its work is done, requests the start of its share of them, which then arrives while the
  // threads wait between the two sections (and the step thread does its serial work).
  const void* next_w = nullptr;
  size_t next_bytes = 0;
  // One-row products of interleaved Q8_0 / Q4_0 on AVX-512 VNNI: how far ahead each thread
  // requests its weight lines. -1: the CPU's choice (once_prefetch_distance()); 0: the whole
  // next 16-row group; > 0: that many bytes past the current group's start (bench tuning).
  int64_t prefetch_ahead = -1;
};

// Runs on `pool` (nullptr = calling thread only), split statically over N, with the kernels of
// cpu_isa() (kernels/cpu/cpu_features.h).
void matmul(const MatmulArgs& args, ThreadPool* pool);

// Several products that share X (same x, ldx, t, k, w_dtype, w_layout and precision; each has its
// own w, n, y and ldy) in one parallel section: the workers wake once and X is prepared once
// (decode runs q/k/v and gate/up this way). Each element is computed exactly as matmul() would.
void matmul_group(std::span<const MatmulArgs> parts, ThreadPool* pool);

// Grows the calling thread's buffers for a product's X (rounded to bf16, or quantized to int8)
// to `rows` rows of length k, so that later products no larger allocate nothing on this thread
// whichever thread a dynamic work split gives them to.
void reserve_thread_scratch(int64_t rows, int64_t k);

// The same with the kernels of a given level (tests, benchmarks); InputError if the CPU lacks it.
void matmul_with_isa(const MatmulArgs& args, ThreadPool* pool, CpuIsa isa);

// The f32 dot product every kernel here uses (fixed lane-wise reduction order): bitwise equal
// to matmul's output element for the same X row and W row.
float dot_f32(const float* a, const float* b, int64_t n);

}  // namespace gemmaserve::cpu
