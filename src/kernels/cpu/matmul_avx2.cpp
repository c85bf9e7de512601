// AVX2 level of the matmul: two ymm hold an output element's 16 lanes (0-7 and 8-15), with the
// same FMA per lane and the same reduction tree as AVX-512, so both give identical bits.
#include <cstddef>
#include <cstdint>

#include "kernels/cpu/matmul_kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif

#include "kernels/cpu/matmul_tiling.h"

namespace gemmaserve::cpu::detail {
namespace {

struct Avx2Vec {
  struct Vec {
    __m256 lo, hi;
  };
  static Vec zero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
  static Vec load_x(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
  static Vec load_x_tail(const float* p, int rem) {
    alignas(32) float buf[kLanes] = {};
    for (int j = 0; j < rem; ++j) buf[j] = p[j];
    return load_x(buf);
  }
  static __m256 widen(__m128i h, DType d) {
    if (d == DType::kF16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  template <DType D>
  static Vec load_w(const std::byte* row, int64_t i) {
    if constexpr (D == DType::kF32) {
      return load_x(reinterpret_cast<const float*>(row) + i);
    } else {
      const auto* p = reinterpret_cast<const __m128i*>(reinterpret_cast<const uint16_t*>(row) + i);
      return {widen(_mm_loadu_si128(p), D), widen(_mm_loadu_si128(p + 1), D)};
    }
  }
  template <DType D>
  static Vec load_w_tail(const std::byte* row, int64_t i, int rem) {
    if constexpr (D == DType::kF32) {
      return load_x_tail(reinterpret_cast<const float*>(row) + i, rem);
    } else {
      alignas(32) uint16_t buf[kLanes] = {};
      const auto* p = reinterpret_cast<const uint16_t*>(row) + i;
      for (int j = 0; j < rem; ++j) buf[j] = p[j];
      return load_w<D>(reinterpret_cast<const std::byte*>(buf), 0);
    }
  }
  static Vec fma(Vec x, Vec w, Vec acc) {
    return {_mm256_fmadd_ps(x.lo, w.lo, acc.lo), _mm256_fmadd_ps(x.hi, w.hi, acc.hi)};
  }
  static float reduce(Vec v) {
    const __m256 s8 = _mm256_add_ps(v.lo, v.hi);
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
  }
};

}  // namespace

void matmul_range_avx2(const MatmulArgs& a, int64_t n_begin, int64_t n_end) {
  matmul_range_any<Avx2Vec>(a, n_begin, n_end);
}

float dot_f32_avx2(const float* a, const float* b, int64_t n) {
  return dot_f32_any<Avx2Vec>(a, b, n);
}

}  // namespace gemmaserve::cpu::detail

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#endif  // __x86_64__
