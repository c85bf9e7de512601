// Weights regrouped 16 rows at a time (WeightLayout::kInterleaved16), the layout of the AVX-512
// kernels: one vector instruction multiplies a few elements of 16 weight rows by broadcast
// activations, so no horizontal sums are needed, and a thread reads its rows as one sequential
// stream. A group of 16 rows takes the bytes of its 16 rows.
//
// BF16: line p (elements 2p, 2p + 1) at 64p, row r at 4r. F32: line i (element i) at 64i, row
//   r at 4r. Canonical order with f32 activations, per output (x row, w row), for both (so a
//   bf16 checkpoint and its f32 copy give the same bits): even = odd = 0; per p in order
//   even = fma(x[2p], w[2p], even), odd = fma(x[2p + 1], w[2p + 1], odd); the result is
//   even + odd. BF16 with bf16 activations (MatmulPrecision::kBF16): one vdpbf16ps accumulator
//   per output over the lines in order.
//
// Q8_0 / Q4_0, for the AVX-512 VNNI kernels (one vpdpbusd multiplies 4 elements of 16 rows by
// 4 broadcast activations, so a 32-element block of 16 rows is 8 vpdpbusd and one scale step),
// with K = 32 * nb:
//   [nb x 32 B]  block b: the 16 rows' f16 scales d (row r at 2r)
//   Q8_0 [nb x 512 B]  block b, quad j (elements 4j..4j+3) at 64j: row r at 4r, 4 bytes q + 128
//   Q4_0 [nb x 256 B]  block b, line m (0..3) at 64m: row r at 4r, the row's qs[4m..4m+3]
//        (low nibbles: elements 4m..4m+3, high nibbles: elements 16+4m..16+4m+3, offset 8)
// Canonical order, per output (x row, w row): acc = 0; per block b in order,
// acc = fma(d_w[b] * d_x[b], float(P_b), acc) with P_b the exact integer dot product of the
// block. Every ISA path reproduces it bit for bit (independent of T, tiling and threads).
//
// Q4_K (K = 256 * ns), per super-block S a 2304-byte unit (16 rows x 144 B):
//   [256 B] header: the 16 rows' f16 d (row r at 2r), f16 dmin (at 32 + 2r), and their 12 packed
//           scale bytes, byte j of row r at 64 + 16j + r (16 rows side by side: one vector load
//           widens byte j of every row)
//   [2048 B] values: sub-block pair c (0..3), line m (0..7) at 512c + 64m: row r at 4r, the row's
//           qs[32c + 4m .. 32c + 4m + 3] (low nibbles: sub-block 2c elements 4m..4m+3, high
//           nibbles: sub-block 2c + 1, the same elements; unsigned 0..15, no offset)
// Canonical order, per output: acc = 0; per 32-element sub-block b in order (s = b mod 8 of
// its super-block), with dsc = d * float(sc_s) and dmm = dmin * float(m_s) (both exact),
// P_b the block's integer dot product and xs_b = d_x[b] * float(sum of the block's x q):
// acc = fma(dsc * d_x[b], float(P_b), acc), then acc = fma(-dmm, xs_b, acc).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "core/thread_pool.h"

namespace gemmaserve::cpu {

constexpr int64_t kInterleaveRows = 16;

// Whether a [rows, cols] matrix of `dtype` can take the interleaved layout: F32, BF16, Q8_0 or
// Q4_0 with cols a multiple of 32, or Q4_K with cols a multiple of 256; rows a multiple of 16.
bool interleave_supported(DType dtype, int64_t rows, int64_t cols);

// Whether the matmul this process uses runs faster on interleaved `dtype` weights: every SIMD
// path (AVX2, AVX-VNNI, AVX-512 VNNI) for Q8_0 / Q4_0 / Q4_K, the AVX-512 level for F32 and BF16.
bool interleave_preferred(DType dtype);

// Regroups a row-major [rows, cols] matrix into the interleaved layout; dst must not overlap
// src. InputError if !interleave_supported. Runs on `pool` when given.
void interleave_rows(DType dtype, const void* src, void* dst, int64_t rows, int64_t cols,
                     ThreadPool* pool);

// Row `row` of an interleaved [*, cols] matrix, dequantized (same values as dequantize_row on
// the row-major original).
void interleaved_row_to_f32(DType dtype, const void* w, int64_t row, int64_t cols, float* out);

}  // namespace gemmaserve::cpu
