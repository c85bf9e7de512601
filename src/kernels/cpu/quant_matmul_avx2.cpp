// AVX2 path of the quantized matmul: maddubs + madd per 32-element block (the same exact
// 4-element lane sums as vpdpbusd), two float accumulators for even and odd blocks, so the
// canonical order of quant_matmul_internal.h holds bit for bit. Tiles of 2 x rows x 2 w rows.
#include <cstring>

#include "kernels/cpu/quant.h"
#include "kernels/cpu/quant_matmul_internal.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define GS_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace gemmaserve::cpu::quant_detail {
namespace {

GS_AVX2 inline float f16_value(const std::byte* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}

GS_AVX2 inline float reduce8_ps(__m256 v) {
  const __m128 r4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 r2 = _mm_add_ps(r4, _mm_movehl_ps(r4, r4));
  return _mm_cvtss_f32(_mm_add_ss(r2, _mm_shuffle_ps(r2, r2, 1)));
}

// Exact int32 sums of u8 x s8 products over each group of 4 bytes (|u| <= 128, |s| <= 127:
// maddubs cannot saturate).
GS_AVX2 inline __m256i dot4(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

GS_AVX2 inline __m256i q4_0_nibbles(const std::byte* qs) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(raw, 4), raw);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

// Q8_0 / Q4_0 tile: acc[x][r][parity].
template <DType kType, int RX, int RW>
GS_AVX2 void tile_32(const MatmulArgs& args, const QuantActs& a, int64_t t0, int64_t n0) {
  constexpr size_t kBlockBytes = kType == DType::kQ8_0 ? kQ8_0BlockBytes : kQ4_0BlockBytes;
  const int64_t nb = a.blocks();
  const size_t row_bytes = static_cast<size_t>(nb) * kBlockBytes;
  const auto* w0 = static_cast<const std::byte*>(args.w) + static_cast<size_t>(n0) * row_bytes;
  __m256 acc[RX][RW][2];
  for (int x = 0; x < RX; ++x)
    for (int r = 0; r < RW; ++r) acc[x][r][0] = acc[x][r][1] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const int h = static_cast<int>(b & 1);
    __m256i wv[RW], wsign[RW];
    float dw[RW];
    for (int r = 0; r < RW; ++r) {
      const std::byte* blk = w0 + r * row_bytes + b * kBlockBytes;
      if constexpr (kType == DType::kQ8_0) {
        wsign[r] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
        wv[r] = _mm256_sign_epi8(wsign[r], wsign[r]);
      } else {
        wv[r] = q4_0_nibbles(blk + 2);
        wsign[r] = wv[r];
      }
      dw[r] = f16_value(blk);
    }
    for (int x = 0; x < RX; ++x) {
      const int64_t t = t0 + x;
      const __m256i xv =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.q + t * a.k + b * 32));
      const float dx = a.d[t * nb + b];
      __m256i off = _mm256_setzero_si256();
      if constexpr (kType == DType::kQ4_0) {
        off = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.off + (t * nb + b) * 8));
      }
      for (int r = 0; r < RW; ++r) {
        __m256i p;
        if constexpr (kType == DType::kQ8_0) {
          p = dot4(wv[r], _mm256_sign_epi8(xv, wsign[r]));
        } else {
          p = _mm256_add_epi32(dot4(wv[r], xv), off);
        }
        acc[x][r][h] =
            _mm256_fmadd_ps(_mm256_set1_ps(dw[r] * dx), _mm256_cvtepi32_ps(p), acc[x][r][h]);
      }
    }
  }
  const __m256 zero = _mm256_setzero_ps();
  for (int x = 0; x < RX; ++x) {
    for (int r = 0; r < RW; ++r) {
      if (nb & 1) acc[x][r][1] = _mm256_fmadd_ps(zero, zero, acc[x][r][1]);  // the zero block
      args.y[static_cast<size_t>(t0 + x) * args.ldy + n0 + r] =
          reduce8_ps(_mm256_add_ps(acc[x][r][0], acc[x][r][1]));
    }
  }
}

template <int RX, int RW>
GS_AVX2 void tile_q4_k(const MatmulArgs& args, const QuantActs& a, int64_t t0, int64_t n0) {
  const int64_t nb = a.blocks(), nsb = nb / 8;
  const size_t row_bytes = static_cast<size_t>(nsb) * kQ4KBlockBytes;
  const auto* w0 = static_cast<const std::byte*>(args.w) + static_cast<size_t>(n0) * row_bytes;
  __m256 acc[RX][RW][2], macc[RX][RW];
  for (int x = 0; x < RX; ++x)
    for (int r = 0; r < RW; ++r) acc[x][r][0] = acc[x][r][1] = macc[x][r] = _mm256_setzero_ps();
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  for (int64_t sb = 0; sb < nsb; ++sb) {
    float dsc[RW][8];
    __m256 dm[RW];
    for (int r = 0; r < RW; ++r) {
      const std::byte* blk = w0 + r * row_bytes + sb * kQ4KBlockBytes;
      const float d = f16_value(blk), dmin = f16_value(blk + 2);
      alignas(32) float mf[8];
      for (int s = 0; s < 8; ++s) {
        uint8_t sc, m;
        q4k_scale_min(reinterpret_cast<const uint8_t*>(blk + 4), s, &sc, &m);
        dsc[r][s] = d * static_cast<float>(sc);
        mf[s] = static_cast<float>(m);
      }
      dm[r] = _mm256_mul_ps(_mm256_set1_ps(dmin), _mm256_load_ps(mf));
    }
    for (int s = 0; s < 8; ++s) {
      const int h = s & 1;
      __m256i wv[RW];
      for (int r = 0; r < RW; ++r) {
        const std::byte* qs = w0 + r * row_bytes + sb * kQ4KBlockBytes + 16 + 32 * (s / 2);
        const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs));
        wv[r] = h ? _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4) : _mm256_and_si256(raw, low4);
      }
      for (int x = 0; x < RX; ++x) {
        const int64_t t = t0 + x, b = sb * 8 + s;
        const __m256i xv =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.q + t * a.k + b * 32));
        const float dx = a.d[t * nb + b];
        for (int r = 0; r < RW; ++r) {
          acc[x][r][h] = _mm256_fmadd_ps(_mm256_set1_ps(dsc[r][s] * dx),
                                         _mm256_cvtepi32_ps(dot4(wv[r], xv)), acc[x][r][h]);
        }
      }
    }
    for (int x = 0; x < RX; ++x) {
      const __m256 xs = _mm256_loadu_ps(a.xs + (t0 + x) * nb + sb * 8);
      for (int r = 0; r < RW; ++r) macc[x][r] = _mm256_fmadd_ps(dm[r], xs, macc[x][r]);
    }
  }
  for (int x = 0; x < RX; ++x)
    for (int r = 0; r < RW; ++r)
      args.y[static_cast<size_t>(t0 + x) * args.ldy + n0 + r] =
          reduce8_ps(_mm256_add_ps(acc[x][r][0], acc[x][r][1])) - reduce8_ps(macc[x][r]);
}

template <int RX, int RW>
GS_AVX2 void run_tile(DType dtype, const MatmulArgs& args, const QuantActs& a, int64_t t0,
                      int64_t n0) {
  if (dtype == DType::kQ8_0) {
    tile_32<DType::kQ8_0, RX, RW>(args, a, t0, n0);
  } else if (dtype == DType::kQ4_0) {
    tile_32<DType::kQ4_0, RX, RW>(args, a, t0, n0);
  } else {
    tile_q4_k<RX, RW>(args, a, t0, n0);
  }
}

template <DType kType>
GS_AVX2 void range(const MatmulArgs& args, const QuantActs& a, int64_t n_begin, int64_t n_end) {
  int64_t n = n_begin;
  for (; n + 2 <= n_end; n += 2) {
    int64_t t = 0;
    for (; t + 2 <= args.t; t += 2) run_tile<2, 2>(kType, args, a, t, n);
    for (; t < args.t; ++t) run_tile<1, 2>(kType, args, a, t, n);
  }
  for (; n < n_end; ++n) {
    int64_t t = 0;
    for (; t + 2 <= args.t; t += 2) run_tile<2, 1>(kType, args, a, t, n);
    for (; t < args.t; ++t) run_tile<1, 1>(kType, args, a, t, n);
  }
}

}  // namespace

GS_AVX2 void quantize_act_row_avx2(const float* x, int64_t k, int8_t* q, float* d, int32_t* off,
                                   float* xs, int32_t* corr, int32_t corr_mult) {
  const __m256 sign = _mm256_set1_ps(-0.0f), too_big = _mm256_set1_ps(3.0e38f);
  const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127);
  // packs works within 128-bit lanes: this puts the 8 dwords of packed bytes back in order.
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t b = 0; b < k / 32; ++b) {
    const float* xb = x + b * 32;
    __m256 v[4], m = _mm256_setzero_ps();
    int bad = 0;
    for (int i = 0; i < 4; ++i) {
      v[i] = _mm256_loadu_ps(xb + 8 * i);
      const __m256 a = _mm256_andnot_ps(sign, v[i]);
      bad |= _mm256_movemask_ps(_mm256_cmp_ps(a, too_big, _CMP_NLT_UQ));  // NaN, inf, huge
      m = _mm256_max_ps(m, a);
    }
    const __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    const __m128 m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    const float amax = _mm_cvtss_f32(_mm_max_ss(m2, _mm_shuffle_ps(m2, m2, 1)));
    const float scale = amax / 127.0f;
    const float inv = scale != 0.0f ? 1.0f / scale : 0.0f;
    // Non-finite values or a scale so small its inverse overflows: the scalar code decides.
    if (bad != 0 || !(inv < 3.0e38f)) {
      quantize_act_row(xb, 32, q + b * 32, d + b, off ? off + b * 8 : nullptr,
                       xs ? xs + b : nullptr, corr ? corr + b : nullptr, corr_mult);
      continue;
    }
    const __m256 vi = _mm256_set1_ps(inv);
    __m256i qi[4];
    for (int i = 0; i < 4; ++i) {
      // cvtps rounds to nearest even (the default MXCSR mode), as the scalar round_even.
      qi[i] =
          _mm256_min_epi32(_mm256_max_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(v[i], vi)), lo), hi);
    }
    const __m256i words =
        _mm256_packs_epi16(_mm256_packs_epi32(qi[0], qi[1]), _mm256_packs_epi32(qi[2], qi[3]));
    int8_t* qb = q + b * 32;
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(qb), _mm256_permutevar8x32_epi32(words, order));
    const __m256i sum =
        _mm256_add_epi32(_mm256_add_epi32(qi[0], qi[1]), _mm256_add_epi32(qi[2], qi[3]));
    const __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
    const __m128i s2 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
    const int32_t total = _mm_cvtsi128_si32(_mm_add_epi32(s2, _mm_shuffle_epi32(s2, 0xB1)));
    d[b] = scale;
    act_block_extras(qb, scale, total, b, off, xs, corr, corr_mult);
  }
}

RangeKernel avx2_kernel(DType dtype) {
  switch (dtype) {
    case DType::kQ8_0:
      return range<DType::kQ8_0>;
    case DType::kQ4_0:
      return range<DType::kQ4_0>;
    case DType::kQ4_K:
      return range<DType::kQ4_K>;
    default:
      return portable_kernel(dtype);
  }
}

}  // namespace gemmaserve::cpu::quant_detail

#else

namespace gemmaserve::cpu::quant_detail {
RangeKernel avx2_kernel(DType dtype) { return portable_kernel(dtype); }
void quantize_act_row_avx2(const float* x, int64_t k, int8_t* q, float* d, int32_t* off, float* xs,
                           int32_t* corr, int32_t corr_mult) {
  quantize_act_row(x, k, q, d, off, xs, corr, corr_mult);
}
}  // namespace gemmaserve::cpu::quant_detail

#endif
