// AVX-512 level of the matmul: one zmm holds an output element's 16 lanes.
#include <cstddef>
#include <cstdint>

#include "kernels/cpu/matmul_kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>

// GCC 12's avx512fintrin.h "undefined" vectors (__Y = __Y) trip -Wuninitialized when inlined.
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#ifndef __clang__  // a GCC-only warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#endif

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl")
#endif

#include "kernels/cpu/matmul_tiling.h"

namespace gemmaserve::cpu::detail {
namespace {

struct Avx512Vec {
  using Vec = __m512;
  static Vec zero() { return _mm512_setzero_ps(); }
  static Vec load_x(const float* p) { return _mm512_loadu_ps(p); }
  static Vec load_x_tail(const float* p, int rem) {
    return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << rem) - 1), p);
  }
  static Vec widen(__m256i h, DType d) {
    if (d == DType::kF16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  template <DType D>
  static Vec load_w(const std::byte* row, int64_t i) {
    if constexpr (D == DType::kF32) {
      return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + i);
    } else {
      const auto* p = reinterpret_cast<const uint16_t*>(row) + i;
      return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)), D);
    }
  }
  template <DType D>
  static Vec load_w_tail(const std::byte* row, int64_t i, int rem) {
    const auto mask = static_cast<__mmask16>((1u << rem) - 1);
    if constexpr (D == DType::kF32) {
      return _mm512_maskz_loadu_ps(mask, reinterpret_cast<const float*>(row) + i);
    } else {
      const auto* p = reinterpret_cast<const uint16_t*>(row) + i;
      return widen(_mm256_maskz_loadu_epi16(mask, p), D);
    }
  }
  static Vec fma(Vec x, Vec w, Vec acc) { return _mm512_fmadd_ps(x, w, acc); }
  // ((l + l+8) + (l+4 ...)) as matmul_tiling.h's tree: halves, then quarters, pairs, the last.
  static float reduce(Vec v) {
    const __m256 lo = _mm512_castps512_ps256(v);
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    const __m256 s8 = _mm256_add_ps(lo, hi);
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
  }
};

}  // namespace

void matmul_range_avx512(const MatmulArgs& a, int64_t n_begin, int64_t n_end) {
  matmul_range_any<Avx512Vec>(a, n_begin, n_end);
}

float dot_f32_avx512(const float* a, const float* b, int64_t n) {
  return dot_f32_any<Avx512Vec>(a, b, n);
}

}  // namespace gemmaserve::cpu::detail

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif  // __x86_64__
