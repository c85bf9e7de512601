// AVX-512 VNNI path of the quantized matmul: vpdpbusd on 64-byte pairs of blocks, register
// tiles of RX activation rows x RW weight rows so each weight load serves RX rows (prefill,
// batched decode). Follows the canonical order of quant_matmul_internal.h exactly.
#include <cstring>

#include "kernels/cpu/quant.h"
#include "kernels/cpu/quant_matmul_internal.h"

#if defined(__x86_64__)
#include "kernels/cpu/vnni_avx512.h"

namespace gemmaserve::cpu::quant_detail {
namespace {

GS_AVX512 inline float f16_value(const std::byte* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}

// Lanes 0-7 = lo, 8-15 = hi.
GS_AVX512 inline __m512 pair_ps(float lo, float hi) {
  return _mm512_insertf32x8(_mm512_set1_ps(lo), _mm256_set1_ps(hi), 1);
}

GS_AVX512 inline __m512i pair_si(__m256i lo, __m256i hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

GS_AVX512 inline float reduce8_ps(__m256 v) {
  const __m128 r4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 r2 = _mm_add_ps(r4, _mm_movehl_ps(r4, r4));
  return _mm_cvtss_f32(_mm_add_ss(r2, _mm_shuffle_ps(r2, r2, 1)));
}

GS_AVX512 inline float reduce16_ps(__m512 v) {
  return reduce8_ps(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)));
}

// 32 nibbles of a Q4_0 block in element order (low nibbles first).
GS_AVX512 inline __m256i q4_0_nibbles(const std::byte* qs) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(raw, 4), raw);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

// Two adjacent Q4_0 blocks' 64 nibbles in element order: one 256-bit gather of both qs, each
// 128-bit half duplicated, then a per-half shift (0 or 4) and a mask.
GS_AVX512 inline __m512i q4_0_nibble_pair(const std::byte* qs_a, const std::byte* qs_b) {
  const __m256i raw = _mm256_inserti128_si256(
      _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs_a))),
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs_b)), 1);
  const __m512i dup = _mm512_shuffle_i64x2(_mm512_castsi256_si512(raw), _mm512_castsi256_si512(raw),
                                           _MM_SHUFFLE(1, 1, 0, 0));
  constexpr long long kHigh = 0x0004000400040004;  // shift of the 16-bit lanes holding high nibbles
  const __m512i shift = _mm512_set_epi64(kHigh, kHigh, 0, 0, kHigh, kHigh, 0, 0);
  return _mm512_and_si512(_mm512_srlv_epi16(dup, shift), _mm512_set1_epi8(0x0F));
}

// [d(a) x 8, d(b) x 8] from two f16 scales: one conversion and one permute.
GS_AVX512 inline __m512 pair_f16(const std::byte* a, const std::byte* b) {
  uint16_t ha, hb;
  std::memcpy(&ha, a, 2);
  std::memcpy(&hb, b, 2);
  const __m128 both = _mm_cvtph_ps(_mm_insert_epi16(_mm_cvtsi32_si128(ha), hb, 1));
  const __m512i idx = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(both));
}

// While a tile runs, its steps prefetch the W tile kTilesAhead further as one sequential run
// of cache lines (an equal share per step): the rows of the tiles arrive as a single stream
// the hardware prefetchers also follow, with one prefetch per line.
constexpr int kTilesAhead = 2;  // 1 and 4 measured slower (bench quant-kernel, 2026-11-30)

struct TilePrefetch {
  const char* cursor;
  const char* end;
  int lines_per_step;
  GS_AVX512 inline void step() {
    for (int i = 0; i < lines_per_step && cursor < end; ++i, cursor += 64) {
      _mm_prefetch(cursor, _MM_HINT_T0);
    }
  }
};

// One pair of blocks (b, b + 1) of a Q8_0 / Q4_0 tile; kFull = false: block b + 1 is absent
// and contributes fma(0, 0, acc) as in the canonical order.
template <DType kType, int RX, int RW, bool kFull>
GS_AVX512 inline __attribute__((always_inline)) void step_32(const std::byte* w0, size_t row_bytes,
                                                             const QuantActs& a, int64_t t0,
                                                             int64_t b, __m512 (&acc)[RX][RW]) {
  constexpr size_t kBlockBytes = kType == DType::kQ8_0 ? kQ8_0BlockBytes : kQ4_0BlockBytes;
  const int64_t nb = a.blocks();
  const __m512i zero = _mm512_setzero_si512();
  __m512i wv[RW];
  __mmask64 neg[RW];
  __m512 dw[RW];
  for (int r = 0; r < RW; ++r) {
    const std::byte* blk = w0 + r * row_bytes + b * kBlockBytes;
    const std::byte* nxt = blk + kBlockBytes;
    if constexpr (kType == DType::kQ8_0) {
      const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
      const __m256i hi = kFull ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(nxt + 2))
                               : _mm256_setzero_si256();
      const __m512i v = pair_si(lo, hi);
      neg[r] = _mm512_movepi8_mask(v);
      wv[r] = _mm512_abs_epi8(v);
    } else {
      wv[r] = kFull ? q4_0_nibble_pair(blk + 2, nxt + 2)
                    : pair_si(q4_0_nibbles(blk + 2), _mm256_setzero_si256());
      neg[r] = 0;
    }
    dw[r] = kFull ? pair_f16(blk, nxt) : pair_ps(f16_value(blk), 0.0f);
  }
  for (int x = 0; x < RX; ++x) {
    const int64_t t = t0 + x;
    const int8_t* xq = a.q + t * a.k + b * 32;
    const float* dxp = a.d + t * nb + b;
    const __m512i xv = kFull ? _mm512_loadu_si512(xq)
                             : pair_si(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq)),
                                       _mm256_setzero_si256());
    const __m512 dx = kFull ? _mm512_insertf32x8(_mm512_set1_ps(dxp[0]), _mm256_set1_ps(dxp[1]), 1)
                            : pair_ps(dxp[0], 0.0f);
    __m512i init = zero;
    if constexpr (kType == DType::kQ4_0) {
      const int32_t* off = a.off + (t * nb + b) * 8;
      init = kFull ? _mm512_loadu_si512(off)
                   : pair_si(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(off)),
                             _mm256_setzero_si256());
    }
    for (int r = 0; r < RW; ++r) {
      __m512i xs = xv;
      if constexpr (kType == DType::kQ8_0) xs = _mm512_mask_sub_epi8(xv, neg[r], zero, xv);
      const __m512i p = _mm512_dpbusd_epi32(init, wv[r], xs);
      acc[x][r] = _mm512_fmadd_ps(_mm512_mul_ps(dw[r], dx), _mm512_cvtepi32_ps(p), acc[x][r]);
    }
  }
}

// Q8_0 and Q4_0: one tile of RX x rows (from t0) by RW w rows (from n0).
template <DType kType, int RX, int RW>
GS_AVX512 void tile_32(const MatmulArgs& args, const QuantActs& a, int64_t t0, int64_t n0) {
  constexpr size_t kBlockBytes = kType == DType::kQ8_0 ? kQ8_0BlockBytes : kQ4_0BlockBytes;
  const int64_t nb = a.blocks();
  const size_t row_bytes = static_cast<size_t>(nb) * kBlockBytes;
  const auto* w0 = static_cast<const std::byte*>(args.w) + static_cast<size_t>(n0) * row_bytes;
  __m512 acc[RX][RW];
  for (int x = 0; x < RX; ++x)
    for (int r = 0; r < RW; ++r) acc[x][r] = _mm512_setzero_ps();
  const size_t tile_bytes = RW * row_bytes;
  const int64_t steps = (nb + 1) / 2;
  const auto* ahead = reinterpret_cast<const char*>(w0) + kTilesAhead * tile_bytes;
  TilePrefetch pf{ahead, ahead + tile_bytes,
                  static_cast<int>((tile_bytes / 64 + static_cast<size_t>(steps)) /
                                   static_cast<size_t>(steps))};
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    pf.step();
    step_32<kType, RX, RW, true>(w0, row_bytes, a, t0, b, acc);
  }
  if (b < nb) step_32<kType, RX, RW, false>(w0, row_bytes, a, t0, b, acc);
  for (int x = 0; x < RX; ++x)
    for (int r = 0; r < RW; ++r)
      args.y[static_cast<size_t>(t0 + x) * args.ldy + n0 + r] = reduce16_ps(acc[x][r]);
}

// The 8 six-bit scales (or mins) of a Q4_K block as floats, times `mult`: word arithmetic on
// the 12 packed bytes (same values as q4k_scale_min).
GS_AVX512 inline void q4k_scales_mins(const std::byte* packed, float d, float dmin, __m256* dsc,
                                      __m256* dm) {
  uint32_t u[3];
  std::memcpy(u, packed, 12);
  const uint32_t sc_lo = u[0] & 0x3f3f3f3fu, m_lo = u[1] & 0x3f3f3f3fu;
  const uint32_t sc_hi = (u[2] & 0x0f0f0f0fu) | (((u[0] >> 6) & 0x03030303u) << 4);
  const uint32_t m_hi = ((u[2] >> 4) & 0x0f0f0f0fu) | (((u[1] >> 6) & 0x03030303u) << 4);
  const __m128i sc = _mm_set_epi32(0, 0, static_cast<int>(sc_hi), static_cast<int>(sc_lo));
  const __m128i m = _mm_set_epi32(0, 0, static_cast<int>(m_hi), static_cast<int>(m_lo));
  if (dsc) *dsc = _mm256_mul_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(sc)));
  if (dm) *dm = _mm256_mul_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(m)));
}

// Q4_K tile. The min term goes in a second pass over the block headers, so the main loop keeps
// only the RX x RW scale accumulators in registers.
template <int RX, int RW>
GS_AVX512 void tile_q4_k(const MatmulArgs& args, const QuantActs& a, int64_t t0, int64_t n0) {
  const int64_t nb = a.blocks(), nsb = nb / 8;
  const size_t row_bytes = static_cast<size_t>(nsb) * kQ4KBlockBytes;
  const auto* w0 = static_cast<const std::byte*>(args.w) + static_cast<size_t>(n0) * row_bytes;
  __m512 acc[RX][RW];
  for (int x = 0; x < RX; ++x)
    for (int r = 0; r < RW; ++r) acc[x][r] = _mm512_setzero_ps();
  const __m512i zero = _mm512_setzero_si512();
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  for (int64_t sb = 0; sb < nsb; ++sb) {
    __m512 dsc[RW];
    for (int r = 0; r < RW; ++r) {
      const std::byte* blk = w0 + r * row_bytes + sb * kQ4KBlockBytes;
      __m256 v;
      q4k_scales_mins(blk + 4, f16_value(blk), 0.0f, &v, nullptr);
      dsc[r] = _mm512_castps256_ps512(v);
    }
    for (int c = 0; c < 4; ++c) {
      const __m512i idx = _mm512_set_epi32(2 * c + 1, 2 * c + 1, 2 * c + 1, 2 * c + 1, 2 * c + 1,
                                           2 * c + 1, 2 * c + 1, 2 * c + 1, 2 * c, 2 * c, 2 * c,
                                           2 * c, 2 * c, 2 * c, 2 * c, 2 * c);
      __m512i wv[RW];
      __m512 ws[RW];
      for (int r = 0; r < RW; ++r) {
        const std::byte* qs = w0 + r * row_bytes + sb * kQ4KBlockBytes + 16 + 32 * c;
        const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs));
        wv[r] =
            pair_si(_mm256_and_si256(raw, low4), _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4));
        ws[r] = _mm512_permutexvar_ps(idx, dsc[r]);
      }
      for (int x = 0; x < RX; ++x) {
        const int64_t t = t0 + x;
        const int64_t b = sb * 8 + 2 * c;
        const __m512i xv = _mm512_loadu_si512(a.q + t * a.k + b * 32);
        const float* dxp = a.d + t * nb + b;
        const __m512 dx = _mm512_insertf32x8(_mm512_set1_ps(dxp[0]), _mm256_set1_ps(dxp[1]), 1);
        for (int r = 0; r < RW; ++r) {
          const __m512i p = _mm512_dpbusd_epi32(zero, wv[r], xv);
          acc[x][r] = _mm512_fmadd_ps(_mm512_mul_ps(ws[r], dx), _mm512_cvtepi32_ps(p), acc[x][r]);
        }
      }
    }
  }
  for (int r = 0; r < RW; ++r) {
    __m256 macc[RX];
    for (int x = 0; x < RX; ++x) macc[x] = _mm256_setzero_ps();
    for (int64_t sb = 0; sb < nsb; ++sb) {
      const std::byte* blk = w0 + r * row_bytes + sb * kQ4KBlockBytes;
      __m256 dm;
      q4k_scales_mins(blk + 4, 0.0f, f16_value(blk + 2), nullptr, &dm);
      for (int x = 0; x < RX; ++x) {
        const __m256 xs = _mm256_loadu_ps(a.xs + (t0 + x) * nb + sb * 8);
        macc[x] = _mm256_fmadd_ps(dm, xs, macc[x]);
      }
    }
    for (int x = 0; x < RX; ++x) {
      args.y[static_cast<size_t>(t0 + x) * args.ldy + n0 + r] =
          reduce16_ps(acc[x][r]) - reduce8_ps(macc[x]);
    }
  }
}

template <int RX, int RW>
GS_AVX512 void run_tile(DType dtype, const MatmulArgs& args, const QuantActs& a, int64_t t0,
                        int64_t n0) {
  if (dtype == DType::kQ8_0) {
    tile_32<DType::kQ8_0, RX, RW>(args, a, t0, n0);
  } else if (dtype == DType::kQ4_0) {
    tile_32<DType::kQ4_0, RX, RW>(args, a, t0, n0);
  } else {
    tile_q4_k<RX, RW>(args, a, t0, n0);
  }
}

// W rows in tiles of 4 (each tile streamed once per 4 X rows), X rows in tiles of 4.
template <DType kType>
GS_AVX512 void range(const MatmulArgs& args, const QuantActs& a, int64_t n_begin, int64_t n_end) {
  constexpr int kRx = 4;
  int64_t n = n_begin;
  // Decode of one row: 8 W rows per tile load each X pair and its scales once for 8 dots.
  if (args.t == 1 && kType != DType::kQ4_K) {
    for (; n + 8 <= n_end; n += 8) run_tile<1, 8>(kType, args, a, 0, n);
  }
  for (; n + 4 <= n_end; n += 4) {
    int64_t t = 0;
    for (; t + kRx <= args.t; t += kRx) run_tile<kRx, 4>(kType, args, a, t, n);
    for (; t < args.t; ++t) run_tile<1, 4>(kType, args, a, t, n);
  }
  for (; n < n_end; ++n) {
    int64_t t = 0;
    for (; t + kRx <= args.t; t += kRx) run_tile<kRx, 1>(kType, args, a, t, n);
    for (; t < args.t; ++t) run_tile<1, 1>(kType, args, a, t, n);
  }
}

}  // namespace

GS_AVX512 void quantize_act_row_avx512(const float* x, int64_t k, int8_t* q, float* d, int32_t* off,
                                       float* xs, int32_t* corr, int32_t corr_mult) {
  const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
  for (int64_t b = 0; b < k / 32; ++b) {
    const float* xb = x + b * 32;
    const __m512 v0 = _mm512_loadu_ps(xb), v1 = _mm512_loadu_ps(xb + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    const float scale = amax / 127.0f;
    const float inv = scale != 0.0f ? 1.0f / scale : 0.0f;
    // NaN or a scale so small its inverse overflows: the scalar code's clamping decides.
    if (!(inv < 3.0e38f) || !(amax < 3.0e38f)) {
      quantize_act_row(xb, 32, q + b * 32, d + b, off ? off + b * 8 : nullptr,
                       xs ? xs + b : nullptr, corr ? corr + b : nullptr, corr_mult);
      continue;
    }
    const __m512 vi = _mm512_set1_ps(inv);
    // cvtps rounds to nearest even (the default MXCSR mode), as the scalar round_even.
    const __m512i q0 =
        _mm512_min_epi32(_mm512_max_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(v0, vi)), lo), hi);
    const __m512i q1 =
        _mm512_min_epi32(_mm512_max_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(v1, vi)), lo), hi);
    int8_t* qb = q + b * 32;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(qb), _mm512_cvtepi32_epi8(q0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(qb + 16), _mm512_cvtepi32_epi8(q1));
    const int32_t total = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
    d[b] = scale;
    act_block_extras(qb, scale, total, b, off, xs, corr, corr_mult);
  }
}

RangeKernel avx512_kernel(DType dtype) {
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
RangeKernel avx512_kernel(DType dtype) { return portable_kernel(dtype); }
void quantize_act_row_avx512(const float* x, int64_t k, int8_t* q, float* d, int32_t* off,
                             float* xs, int32_t* corr, int32_t corr_mult) {
  quantize_act_row(x, k, q, d, off, xs, corr, corr_mult);
}
}  // namespace gemmaserve::cpu::quant_detail

#endif
