// Optional bf16-activation matmul (MatmulPrecision::kBF16) for bf16 weights on CPUs with
// AVX512_BF16: X rounded to bf16, `vdpbf16ps` multiplies 32 pairs per instruction into 16 f32
// lanes (twice the f32 FMA rate). Its own fixed order: lane l sums the pairs k = 2l, 2l+1
// (mod 32) in increasing k, tail zero-padded, then matmul_tiling.h's tree; still batch-invariant.
#include <cstddef>
#include <cstdint>

#include "kernels/cpu/matmul_kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>

#if !defined(__clang__)
// GCC 12's avx512fintrin.h "undefined" vectors (__Y = __Y) trip -Wuninitialized when inlined.
#pragma GCC diagnostic ignored "-Wuninitialized"
#ifndef __clang__  // a GCC-only warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#endif

#if defined(__clang__)
#pragma clang attribute push(                                                      \
    __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512bf16"))), \
    apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512bf16")
#endif

namespace gemmaserve::cpu::detail {
namespace {

constexpr int kPairs = 32;  // bf16 elements per instruction
constexpr int kRowsX = 4, kRowsW = 4;
constexpr size_t kXBlockBytes = size_t{384} << 10;
constexpr size_t kWPanelBytes = size_t{192} << 10;

inline float reduce(__m512 v) {
  const __m256 lo = _mm512_castps512_ps256(v);
  const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
  const __m256 s8 = _mm256_add_ps(lo, hi);
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}

inline __m512bh load_bf16(const uint16_t* p) {
  return reinterpret_cast<__m512bh>(_mm512_loadu_si512(p));
}

inline __m512bh load_bf16_tail(const uint16_t* p, int rem) {
  const __mmask32 mask = static_cast<__mmask32>((uint64_t{1} << rem) - 1);
  return reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi16(mask, p));
}

template <int RX, int RW>
void tile(const uint16_t* x, size_t ldx, const uint16_t* w, size_t ldw, int64_t k, float* y,
          size_t ldy) {
  __m512 acc[RX][RW];
#pragma GCC unroll 8
  for (int t = 0; t < RX; ++t)
#pragma GCC unroll 8
    for (int r = 0; r < RW; ++r) acc[t][r] = _mm512_setzero_ps();
  // The next W tile (RW rows further, contiguous) as one sequential run of prefetched lines.
  const auto* next = reinterpret_cast<const char*>(w + RW * ldw);
  const char* const next_end = next + RW * ldw * 2;
  const size_t steps = static_cast<size_t>(k / kPairs) + 1;
  const size_t lines_per_step = (RW * ldw * 2 / 64 + steps) / steps;
  int64_t i = 0;
  for (; i + kPairs <= k; i += kPairs) {
    for (size_t l = 0; l < lines_per_step && next < next_end; ++l, next += 64) {
      __builtin_prefetch(next);
    }
    __m512bh wv[RW];
#pragma GCC unroll 8
    for (int r = 0; r < RW; ++r) wv[r] = load_bf16(w + r * ldw + i);
#pragma GCC unroll 8
    for (int t = 0; t < RX; ++t) {
      const __m512bh xv = load_bf16(x + t * ldx + i);
#pragma GCC unroll 8
      for (int r = 0; r < RW; ++r) acc[t][r] = _mm512_dpbf16_ps(acc[t][r], xv, wv[r]);
    }
  }
  if (i < k) {
    const int rem = static_cast<int>(k - i);
    __m512bh wv[RW];
#pragma GCC unroll 8
    for (int r = 0; r < RW; ++r) wv[r] = load_bf16_tail(w + r * ldw + i, rem);
#pragma GCC unroll 8
    for (int t = 0; t < RX; ++t) {
      const __m512bh xv = load_bf16_tail(x + t * ldx + i, rem);
#pragma GCC unroll 8
      for (int r = 0; r < RW; ++r) acc[t][r] = _mm512_dpbf16_ps(acc[t][r], xv, wv[r]);
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < RX; ++t)
#pragma GCC unroll 8
    for (int r = 0; r < RW; ++r) y[t * ldy + r] = reduce(acc[t][r]);
}

using Tile = void (*)(const uint16_t*, size_t, const uint16_t*, size_t, int64_t, float*, size_t);

template <int RX>
Tile tile_for(int rw) {
  switch (rw) {
    case 1:
      return &tile<RX, 1>;
    case 2:
      return &tile<RX, 2>;
    case 3:
      return &tile<RX, 3>;
    default:
      return &tile<RX, 4>;
  }
}

Tile tile_for(int rx, int rw) {
  switch (rx) {
    case 1:
      return tile_for<1>(rw);
    case 2:
      return tile_for<2>(rw);
    case 3:
      return tile_for<3>(rw);
    default:
      return tile_for<4>(rw);
  }
}

void run_tiles(const MatmulArgs& a, const uint16_t* xb, size_t ldxb, int64_t t0, int64_t t1,
               int64_t n0, int64_t n1, bool x_outer) {
  const auto* w = static_cast<const uint16_t*>(a.w);
  const size_t ldw = static_cast<size_t>(a.k);
  auto one = [&](int64_t t, int64_t n) {
    const int rx = static_cast<int>(t1 - t < kRowsX ? t1 - t : kRowsX);
    const int rw = static_cast<int>(n1 - n < kRowsW ? n1 - n : kRowsW);
    tile_for(rx, rw)(xb + static_cast<size_t>(t) * ldxb, ldxb, w + static_cast<size_t>(n) * ldw,
                     ldw, a.k, a.y + static_cast<size_t>(t) * a.ldy + n, a.ldy);
  };
  if (x_outer) {
    for (int64_t t = t0; t < t1; t += kRowsX)
      for (int64_t n = n0; n < n1; n += kRowsW) one(t, n);
  } else {
    for (int64_t n = n0; n < n1; n += kRowsW)
      for (int64_t t = t0; t < t1; t += kRowsX) one(t, n);
  }
}

}  // namespace

void matmul_range_avx512_bf16(const MatmulArgs& a, const uint16_t* x_bf16, size_t ldx_bf16,
                              int64_t n0, int64_t n1) {
  if (a.t <= 2 * kRowsX) return run_tiles(a, x_bf16, ldx_bf16, 0, a.t, n0, n1, false);
  int64_t block = static_cast<int64_t>(kXBlockBytes / (static_cast<size_t>(a.k) * 2));
  block = block < kRowsX ? kRowsX : block - block % kRowsX;
  int64_t panel = static_cast<int64_t>(kWPanelBytes / (static_cast<size_t>(a.k) * 2));
  panel = panel < kRowsW ? kRowsW : panel - panel % kRowsW;
  for (int64_t t0 = 0; t0 < a.t; t0 += block) {
    const int64_t t1 = t0 + block < a.t ? t0 + block : a.t;
    for (int64_t p0 = n0; p0 < n1; p0 += panel) {
      run_tiles(a, x_bf16, ldx_bf16, t0, t1, p0, p0 + panel < n1 ? p0 + panel : n1, true);
    }
  }
}

}  // namespace gemmaserve::cpu::detail

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif  // __x86_64__
