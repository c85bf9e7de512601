// x86 vector traits the templated kernels (simd_math.h, attention_simd.h, ops_simd.h) are
// written against. Include only after `#pragma GCC target` for the ISA, with GS_VEC_AVX512 or
// GS_VEC_AVX2 defined (each struct needs its ISA enabled to compile).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace gemmaserve::cpu::simd {

#if defined(GS_VEC_AVX512)
struct VecAvx512 {
  using F = __m512;
  using Mask = __mmask16;
  static constexpr int kWidth = 16;

  static F zero() { return _mm512_setzero_ps(); }
  static F set1(float x) { return _mm512_set1_ps(x); }
  static F load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, F x) { _mm512_storeu_ps(p, x); }
  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F div(F a, F b) { return _mm512_div_ps(a, b); }
  static F max(F a, F b) { return _mm512_max_ps(a, b); }
  static F min(F a, F b) { return _mm512_min_ps(a, b); }
  static F fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F abs(F a) { return _mm512_abs_ps(a); }
  // Magnitude of `mag` with the sign of `sign`.
  static F copysign(F mag, F sign) {
    const __m512i m = _mm512_set1_epi32(0x7fffffff);
    return _mm512_castsi512_ps(_mm512_ternarylogic_epi32(
        m, _mm512_castps_si512(mag), _mm512_castps_si512(sign), 0xCA));  // m ? mag : sign
  }
  static F round_nearest(F a) {
    return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  // 2^n for integral n in [-126, 127].
  static F pow2i(F n) {
    const __m512i e = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127));
    return _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));
  }
  static Mask lt(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
  static F select(Mask m, F if_true, F if_false) {
    return _mm512_mask_blend_ps(m, if_false, if_true);
  }
  // Sum of the lanes in a fixed order (pairwise halves).
  static float reduce_add(F a) {
    const __m256 h =
        _mm256_add_ps(_mm512_castps512_ps256(a),
                      _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    q = _mm_add_ss(q, _mm_movehdup_ps(q));
    return _mm_cvtss_f32(q);
  }
  static float reduce_max(F a) { return _mm512_reduce_max_ps(a); }
  // out[i] = the sum of r[i]'s lanes for 16 vectors, pairing lanes as reduce_add does, by
  // transposing as it adds: 31 shuffles and 15 adds instead of 16 x 8 operations.
  static void reduce_add16(const F* r, float* out) {
    F t[8], u[4], v[2];
    for (int i = 0; i < 8; ++i) {  // lane l + lane l+8 of r[2i] and r[2i+1]
      t[i] = _mm512_add_ps(_mm512_shuffle_f32x4(r[2 * i], r[2 * i + 1], 0x44),
                           _mm512_shuffle_f32x4(r[2 * i], r[2 * i + 1], 0xEE));
    }
    for (int i = 0; i < 4; ++i) {  // + lane l+4: 128-bit block b holds r[4i + b]
      u[i] = _mm512_add_ps(_mm512_shuffle_f32x4(t[2 * i], t[2 * i + 1], 0x88),
                           _mm512_shuffle_f32x4(t[2 * i], t[2 * i + 1], 0xDD));
    }
    for (int i = 0; i < 2; ++i) {  // + lane l+2
      v[i] = _mm512_add_ps(_mm512_shuffle_ps(u[2 * i], u[2 * i + 1], 0x44),
                           _mm512_shuffle_ps(u[2 * i], u[2 * i + 1], 0xEE));
    }
    // + lane l+1: lane 4b + m then holds r[4m + b]'s sum.
    const F d =
        _mm512_add_ps(_mm512_shuffle_ps(v[0], v[1], 0x88), _mm512_shuffle_ps(v[0], v[1], 0xDD));
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    _mm512_storeu_ps(out, _mm512_permutexvar_ps(order, d));
  }

  // Cache element loads, widened to f32.
  static F load_bf16(const void* p) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(static_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  }
  static F load_f16(const void* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(static_cast<const __m256i*>(p)));
  }
  // e4m3 codes as value * 2^-120 (exact; see kv_format.cpp).
  static F load_e4m3_scaled(const void* p) {
    const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(static_cast<const __m128i*>(p)));
    const __m512i mag = _mm512_slli_epi32(_mm512_and_si512(b, _mm512_set1_epi32(0x7f)), 20);
    const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(b, _mm512_set1_epi32(0x80)), 24);
    return _mm512_castsi512_ps(_mm512_or_si512(mag, sign));
  }
  static F load_i8(const void* p) {
    return _mm512_cvtepi32_ps(
        _mm512_cvtepi8_epi32(_mm_loadu_si128(static_cast<const __m128i*>(p))));
  }

  // Sum of squares in double precision, lanes combined in a fixed order.
  static double sum_squares(const float* x, int64_t n, int64_t* done) {
    __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
      const __m512d lo = _mm512_cvtps_pd(_mm256_loadu_ps(x + i));
      const __m512d hi = _mm512_cvtps_pd(_mm256_loadu_ps(x + i + 8));
      a0 = _mm512_fmadd_pd(lo, lo, a0);
      a1 = _mm512_fmadd_pd(hi, hi, a1);
    }
    *done = i;
    const __m512d s = _mm512_add_pd(a0, a1);
    const __m256d h = _mm256_add_pd(_mm512_castpd512_pd256(s), _mm512_extractf64x4_pd(s, 1));
    __m128d q = _mm_add_pd(_mm256_castpd256_pd128(h), _mm256_extractf128_pd(h, 1));
    q = _mm_add_sd(q, _mm_unpackhi_pd(q, q));
    return _mm_cvtsd_f64(q);
  }
};
#endif  // GS_VEC_AVX512

#if defined(GS_VEC_AVX2)
struct VecAvx2 {
  using F = __m256;
  using Mask = __m256;
  static constexpr int kWidth = 8;

  static F zero() { return _mm256_setzero_ps(); }
  static F set1(float x) { return _mm256_set1_ps(x); }
  static F load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, F x) { _mm256_storeu_ps(p, x); }
  static F add(F a, F b) { return _mm256_add_ps(a, b); }
  static F sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F div(F a, F b) { return _mm256_div_ps(a, b); }
  static F max(F a, F b) { return _mm256_max_ps(a, b); }
  static F min(F a, F b) { return _mm256_min_ps(a, b); }
  static F fmadd(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F abs(F a) { return _mm256_and_ps(a, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff))); }
  static F copysign(F mag, F sign) {
    const F m = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    return _mm256_or_ps(_mm256_and_ps(m, mag), _mm256_andnot_ps(m, sign));
  }
  static F round_nearest(F a) {
    return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  static F pow2i(F n) {
    const __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
    return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
  }
  static Mask lt(F a, F b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
  static F select(Mask m, F if_true, F if_false) { return _mm256_blendv_ps(if_false, if_true, m); }
  static float reduce_add(F a) {
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    q = _mm_add_ss(q, _mm_movehdup_ps(q));
    return _mm_cvtss_f32(q);
  }
  static float reduce_max(F a) {
    __m128 q = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    q = _mm_max_ps(q, _mm_movehl_ps(q, q));
    q = _mm_max_ss(q, _mm_movehdup_ps(q));
    return _mm_cvtss_f32(q);
  }

  static F load_bf16(const void* p) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(static_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
  static F load_f16(const void* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(static_cast<const __m128i*>(p)));
  }
  static F load_e4m3_scaled(const void* p) {
    const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64(static_cast<const __m128i*>(p)));
    const __m256i mag = _mm256_slli_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x7f)), 20);
    const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x80)), 24);
    return _mm256_castsi256_ps(_mm256_or_si256(mag, sign));
  }
  static F load_i8(const void* p) {
    return _mm256_cvtepi32_ps(
        _mm256_cvtepi8_epi32(_mm_loadl_epi64(static_cast<const __m128i*>(p))));
  }

  static double sum_squares(const float* x, int64_t n, int64_t* done) {
    __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const __m256d lo = _mm256_cvtps_pd(_mm_loadu_ps(x + i));
      const __m256d hi = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4));
      a0 = _mm256_fmadd_pd(lo, lo, a0);
      a1 = _mm256_fmadd_pd(hi, hi, a1);
    }
    *done = i;
    const __m256d s = _mm256_add_pd(a0, a1);
    __m128d q = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
    q = _mm_add_sd(q, _mm_unpackhi_pd(q, q));
    return _mm_cvtsd_f64(q);
  }
};
#endif  // GS_VEC_AVX2

}  // namespace gemmaserve::cpu::simd
