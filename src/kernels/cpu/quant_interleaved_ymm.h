// Kernels over interleaved Q8_0 / Q4_0 / Q4_K weights (interleave.h) in 256-bit vectors: one
// vector holds 4 bytes of 8 rows, half a 16-row group, so no horizontal sums are needed and a
// thread reads its rows as one stream. Included once by the AVX2 and once by the AVX-VNNI
// translation unit, each under its own target pragma and with its own Dot: the exact int32 dot
// products of 4-byte groups (vpmaddubsw sums, or vpdpbusd). Both follow interleave.h's canonical
// order bit for bit, as the AVX-512 kernels do.
//
// Dot's interface (w unsigned, x signed int8, 4 bytes per 32-bit lane, 8 lanes = 8 rows):
//   nib_add(acc, w, x)   acc += w . x for nibble weights (w < 16); at most 8 calls per acc
//   nib_sum(acc)         the int32 lane sums of an accumulator of nib_add
//   q8_add(acc, w, x)    acc += (w - 128) . x as int32, for Q8_0 stored + 128
//   q8_corr(corr)        what to add to q8_add's sums: corr (stored + 128 counted) or 0
//   zero()               an empty accumulator
// Include only inside `#if defined(__x86_64__)`, after <immintrin.h> and the target pragma.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/interleave.h"
#include "kernels/cpu/line_prefetch.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/quant_matmul_internal.h"

namespace gemmaserve::cpu::quant_detail {
namespace {

constexpr size_t kYmmScaleBytes = 2 * kInterleaveRows;  // one block's 16 f16 scales
constexpr size_t kYmmQ4KUnit = kInterleaveRows * kQ4KBlockBytes;
constexpr size_t kYmmQ4KHeader = 256;

// Four consecutive int8 activations in every 32-bit lane.
inline __m256i ymm_broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// Pins a running integer sum in a register at this point: GCC otherwise regroups the additions
// of a tile's sums into trees whose products no longer fit the 16 registers and spill.
inline void ymm_keep(__m256i& v) { asm("" : "+x"(v)); }

template <DType kType>
constexpr size_t ymm_values_bytes() {
  return kType == DType::kQ8_0 ? 512 : 256;
}

template <DType kType>
size_t ymm_group_bytes(int64_t k) {
  if constexpr (kType == DType::kQ4_K) {
    return static_cast<size_t>(k / kQ4KBlockElems) * kYmmQ4KUnit;
  } else {
    return static_cast<size_t>(k / 32) * (kYmmScaleBytes + ymm_values_bytes<kType>());
  }
}

// The f32 outputs of a tile of RX activation rows x kHalves halves (8 rows each) of group g from
// half h0, zeroed, and stored into Y at the end.
template <int RX, int kHalves>
struct YmmTileOutputs {
  __m256 acc[kHalves][RX];
  YmmTileOutputs() {
    for (int h = 0; h < kHalves; ++h)
      for (int x = 0; x < RX; ++x) acc[h][x] = _mm256_setzero_ps();
  }
  void store(const MatmulArgs& args, int64_t t0, int64_t g, int h0) const {
    for (int x = 0; x < RX; ++x) {
      float* y = args.y + static_cast<size_t>(t0 + x) * args.ldy + g * kInterleaveRows + 8 * h0;
      for (int h = 0; h < kHalves; ++h) _mm256_storeu_ps(y + 8 * h, acc[h][x]);
    }
  }
};

// Q8_0 / Q4_0 tile: RX activation rows from t0 by kHalves halves (8 rows each) of group g from
// half h0, requesting the lines of `prefetch` as kPrefetch while it runs.
template <class Dot, DType kType, int RX, int kHalves, LinePrefetch kPrefetch>
void ymm_tile_32(const MatmulArgs& args, const QuantActs& a, int64_t t0, int64_t g, int h0,
                 LineRange prefetch) {
  constexpr size_t kValues = ymm_values_bytes<kType>();
  const int64_t nb = a.blocks();
  const std::byte* scales =
      static_cast<const std::byte*>(args.w) + static_cast<size_t>(g) * ymm_group_bytes<kType>(a.k);
  const std::byte* values = scales + static_cast<size_t>(nb) * kYmmScaleBytes;
  const int8_t* xq[RX];
  for (int x = 0; x < RX; ++x) xq[x] = a.q + (t0 + x) * a.k;
  YmmTileOutputs<RX, kHalves> out;
  auto& acc = out.acc;
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  LineTrickle<kPrefetch> requests(prefetch, nb);
  for (int64_t b = 0; b < nb; ++b) {
    requests.step();
    const std::byte* vb = values + static_cast<size_t>(b) * kValues + 32 * h0;
    __m256i p[kHalves][RX];
    for (int h = 0; h < kHalves; ++h)
      for (int x = 0; x < RX; ++x) p[h][x] = Dot::zero();
    if constexpr (kType == DType::kQ8_0) {
      for (int j = 0; j < 8; ++j) {
        __m256i w[kHalves];
        for (int h = 0; h < kHalves; ++h) {
          w[h] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(vb + 64 * j + 32 * h));
        }
        for (int x = 0; x < RX; ++x) {
          const __m256i xv = ymm_broadcast4(xq[x] + b * 32 + 4 * j);
          for (int h = 0; h < kHalves; ++h) {
            p[h][x] = Dot::q8_add(p[h][x], w[h], xv);
            ymm_keep(p[h][x]);
          }
        }
      }
    } else {
      for (int m = 0; m < 4; ++m) {
        __m256i lo[kHalves], hi[kHalves];
        for (int h = 0; h < kHalves; ++h) {
          const __m256i v =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(vb + 64 * m + 32 * h));
          lo[h] = _mm256_and_si256(v, low4);
          hi[h] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
        }
        for (int x = 0; x < RX; ++x) {
          const __m256i xl = ymm_broadcast4(xq[x] + b * 32 + 4 * m);
          const __m256i xh = ymm_broadcast4(xq[x] + b * 32 + 16 + 4 * m);
          for (int h = 0; h < kHalves; ++h) {
            p[h][x] = Dot::nib_add(p[h][x], lo[h], xl);
            p[h][x] = Dot::nib_add(p[h][x], hi[h], xh);
            ymm_keep(p[h][x]);
          }
        }
      }
    }
    __m256 dw[kHalves];
    for (int h = 0; h < kHalves; ++h) {
      dw[h] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(
          scales + static_cast<size_t>(b) * kYmmScaleBytes + 16 * (h0 + h))));
    }
    for (int x = 0; x < RX; ++x) {
      const __m256 dx = _mm256_set1_ps(a.d[(t0 + x) * nb + b]);
      const __m256i corr = _mm256_set1_epi32(a.corr[(t0 + x) * nb + b]);
      for (int h = 0; h < kHalves; ++h) {
        __m256i total;
        if constexpr (kType == DType::kQ8_0) {
          total = _mm256_add_epi32(p[h][x], Dot::q8_corr(corr));
        } else {
          total = _mm256_add_epi32(Dot::nib_sum(p[h][x]), corr);
        }
        acc[h][x] = _mm256_fmadd_ps(_mm256_mul_ps(dw[h], dx), _mm256_cvtepi32_ps(total), acc[h][x]);
      }
    }
  }
  out.store(args, t0, g, h0);
}

// Q4_K scale table of half h of a super-block unit: d * sc of sub-blocks 0..7 (8 rows each),
// then dmin * m of 0..7; q4k_scale_min's bit arithmetic on 8 lanes.
inline void ymm_q4k_table(const std::byte* unit, int h, float* tab) {
  __m256i b[12];
  for (int j = 0; j < 12; ++j) {
    b[j] = _mm256_cvtepu8_epi32(
        _mm_loadl_epi64(reinterpret_cast<const __m128i*>(unit + 64 + 16 * j + 8 * h)));
  }
  const __m256 d =
      _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(unit + 16 * h)));
  const __m256 dmin =
      _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(unit + 32 + 16 * h)));
  const __m256i low6 = _mm256_set1_epi32(63), low4 = _mm256_set1_epi32(15);
  for (int s = 0; s < 8; ++s) {
    __m256i sc, m;
    if (s < 4) {
      sc = _mm256_and_si256(b[s], low6);
      m = _mm256_and_si256(b[s + 4], low6);
    } else {
      sc = _mm256_or_si256(_mm256_and_si256(b[s + 4], low4),
                           _mm256_slli_epi32(_mm256_srli_epi32(b[s - 4], 6), 4));
      m = _mm256_or_si256(_mm256_srli_epi32(b[s + 4], 4),
                          _mm256_slli_epi32(_mm256_srli_epi32(b[s], 6), 4));
    }
    _mm256_store_ps(tab + 8 * s, _mm256_mul_ps(d, _mm256_cvtepi32_ps(sc)));
    _mm256_store_ps(tab + 8 * (8 + s), _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(m)));
  }
}

constexpr int kYmmQ4KTableFloats = 16 * 8;  // one half's table

// Q4_K tile, the shape of ymm_tile_32. Small tiles take both nibble halves of a line in one
// pass; big ones go over the lines once per nibble half, as their registers hold one set.
template <class Dot, int RX, int kHalves, LinePrefetch kPrefetch>
void ymm_tile_q4k(const MatmulArgs& args, const QuantActs& a, int64_t t0, int64_t g, int h0,
                  LineRange prefetch) {
  const int64_t ns = a.k / kQ4KBlockElems, nb = a.blocks();
  const std::byte* group = static_cast<const std::byte*>(args.w) +
                           static_cast<size_t>(g) * ymm_group_bytes<DType::kQ4_K>(a.k);
  const int8_t* xq[RX];
  for (int x = 0; x < RX; ++x) xq[x] = a.q + (t0 + x) * a.k;
  YmmTileOutputs<RX, kHalves> out;
  auto& acc = out.acc;
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  alignas(32) float tab[kHalves][kYmmQ4KTableFloats];
  LineTrickle<kPrefetch> requests(prefetch, ns);
  for (int64_t sb = 0; sb < ns; ++sb) {
    requests.step();
    const std::byte* unit = group + static_cast<size_t>(sb) * kYmmQ4KUnit;
    for (int h = 0; h < kHalves; ++h) ymm_q4k_table(unit, h0 + h, tab[h]);
    constexpr int kFuse = kHalves * RX <= 2 ? 2 : 1;
    for (int c = 0; c < 4; ++c) {
      for (int n0 = 0; n0 < 2; n0 += kFuse) {
        __m256i p[kFuse][kHalves][RX];
        for (int k = 0; k < kFuse; ++k)
          for (int h = 0; h < kHalves; ++h)
            for (int x = 0; x < RX; ++x) p[k][h][x] = Dot::zero();
        for (int m = 0; m < 8; ++m) {
          __m256i v[kFuse][kHalves];
          for (int h = 0; h < kHalves; ++h) {
            const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(
                unit + kYmmQ4KHeader + 512 * c + 64 * m + 32 * (h0 + h)));
            for (int k = 0; k < kFuse; ++k) {
              v[k][h] = _mm256_and_si256(n0 + k ? _mm256_srli_epi16(raw, 4) : raw, low4);
            }
          }
          for (int x = 0; x < RX; ++x) {
            for (int k = 0; k < kFuse; ++k) {
              const __m256i xv =
                  ymm_broadcast4(xq[x] + sb * kQ4KBlockElems + 64 * c + 32 * (n0 + k) + 4 * m);
              for (int h = 0; h < kHalves; ++h) {
                p[k][h][x] = Dot::nib_add(p[k][h][x], v[k][h], xv);
                ymm_keep(p[k][h][x]);
              }
            }
          }
        }
        for (int k = 0; k < kFuse; ++k) {  // sub-blocks in order: the canonical order
          const int s = 2 * c + n0 + k;
          const int64_t b = sb * 8 + s;
          for (int x = 0; x < RX; ++x) {
            const __m256 dx = _mm256_set1_ps(a.d[(t0 + x) * nb + b]);
            const __m256 xs = _mm256_set1_ps(a.xs[(t0 + x) * nb + b]);
            for (int h = 0; h < kHalves; ++h) {
              acc[h][x] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_load_ps(tab[h] + 8 * s), dx),
                                          _mm256_cvtepi32_ps(Dot::nib_sum(p[k][h][x])), acc[h][x]);
              acc[h][x] = _mm256_fnmadd_ps(_mm256_load_ps(tab[h] + 8 * (8 + s)), xs, acc[h][x]);
            }
          }
        }
      }
    }
  }
  out.store(args, t0, g, h0);
}

template <class Dot, DType kType, int RX, int kHalves, LinePrefetch kPrefetch>
void ymm_tile(const MatmulArgs& args, const QuantActs& a, int64_t t0, int64_t g, int h0,
              LineRange prefetch) {
  if constexpr (kType == DType::kQ4_K) {
    ymm_tile_q4k<Dot, RX, kHalves, kPrefetch>(args, a, t0, g, h0, prefetch);
  } else {
    ymm_tile_32<Dot, kType, RX, kHalves, kPrefetch>(args, a, t0, g, h0, prefetch);
  }
}

// One-row decode: group by group, both halves at once, the lines `ahead` bytes past the current
// group's start (0: the next group) requested while it computes.
template <class Dot, DType kType, LinePrefetch kPrefetch>
void ymm_decode_groups(const MatmulArgs& args, const QuantActs& a, int64_t g_begin, int64_t g_end,
                       size_t ahead) {
  const size_t group_bytes = ymm_group_bytes<kType>(a.k);
  const auto* w = static_cast<const char*>(args.w);
  for (int64_t g = g_begin; g < g_end; ++g) {
    const char* next = w + static_cast<size_t>(g) * group_bytes + (ahead > 0 ? ahead : group_bytes);
    LineShares shares(next, group_bytes / 64, 1);
    ymm_tile<Dot, kType, 1, 2, kPrefetch>(args, a, 0, g, 0, shares.take());
  }
}

// Several rows: per group, X rows in tiles of RX against kHalves halves at a time, the group's
// bytes reused from cache by every tile; the next group's lines requested over all the tiles.
// Q8_0 / Q4_0 take 2 rows x both halves (Zen 3, bench quant-kernel --t 16 / 128: 1.2-1.5x the
// rows of 4 x one half, which spill and, for Q8_0, unpack each weight vector twice as often);
// Q4_K's table of 16 scale vectors per half leaves registers for 4 rows x one half only.
template <class Dot, DType kType, LinePrefetch kPrefetch>
void ymm_batch_groups(const MatmulArgs& args, const QuantActs& a, int64_t g_begin, int64_t g_end) {
  constexpr int RX = kType == DType::kQ4_K ? 4 : 2;
  constexpr int kHalves = kType == DType::kQ4_K ? 1 : 2;
  const size_t group_bytes = ymm_group_bytes<kType>(a.k);
  const auto* w = static_cast<const char*>(args.w);
  const int64_t tiles = (2 / kHalves) * (args.t / RX + (args.t % RX != 0));
  for (int64_t g = g_begin; g < g_end; ++g) {
    LineShares shares(w + static_cast<size_t>(g + 1) * group_bytes, group_bytes / 64, tiles);
    int64_t t = 0;
    for (; t + RX <= args.t; t += RX) {
      for (int h = 0; h < 2; h += kHalves) {
        ymm_tile<Dot, kType, RX, kHalves, kPrefetch>(args, a, t, g, h, shares.take());
      }
    }
    for (int h = 0; h < 2; h += kHalves) {
      const int64_t left = args.t - t;
      if (left == 3) ymm_tile<Dot, kType, 3, kHalves, kPrefetch>(args, a, t, g, h, shares.take());
      if (left == 2) ymm_tile<Dot, kType, 2, kHalves, kPrefetch>(args, a, t, g, h, shares.take());
      if (left == 1) ymm_tile<Dot, kType, 1, kHalves, kPrefetch>(args, a, t, g, h, shares.take());
    }
  }
}

template <class Dot, DType kType>
void ymm_range(const MatmulArgs& args, const QuantActs& a, int64_t n_begin, int64_t n_end) {
  const int64_t g_begin = n_begin / kInterleaveRows, g_end = n_end / kInterleaveRows;
  if (args.t == 1) {
    const size_t ahead = args.prefetch_ahead >= 0 ? static_cast<size_t>(args.prefetch_ahead)
                                                  : once_prefetch_distance();
    if (once_line_prefetch() == LinePrefetch::kNonTemporal) {
      ymm_decode_groups<Dot, kType, LinePrefetch::kNonTemporal>(args, a, g_begin, g_end, ahead);
    } else {
      ymm_decode_groups<Dot, kType, LinePrefetch::kL2>(args, a, g_begin, g_end, ahead);
    }
  } else if (batch_line_prefetch() == LinePrefetch::kL2) {
    ymm_batch_groups<Dot, kType, LinePrefetch::kL2>(args, a, g_begin, g_end);
  } else {
    ymm_batch_groups<Dot, kType, LinePrefetch::kL1>(args, a, g_begin, g_end);
  }
}

// The AVX-VNNI Dot over a 4-byte dot-product step Op::dpbusd(acc, u8 w, s8 x) (the VEX
// vpdpbusd; a test substitutes a scalar one to check the rest on CPUs without the instruction).
template <class Op>
struct DpbusdDot {
  static __m256i zero() { return _mm256_setzero_si256(); }
  static __m256i nib_add(__m256i acc, __m256i w, __m256i x) { return Op::dpbusd(acc, w, x); }
  static __m256i nib_sum(__m256i acc) { return acc; }
  static __m256i q8_add(__m256i acc, __m256i w, __m256i x) { return Op::dpbusd(acc, w, x); }
  // The stored values are q + 128: the block's corr (-128 * sum of x) takes it back out.
  static __m256i q8_corr(__m256i corr) { return corr; }
};

template <class Dot>
RangeKernel ymm_interleaved_kernel(DType dtype) {
  switch (dtype) {
    case DType::kQ8_0:
      return ymm_range<Dot, DType::kQ8_0>;
    case DType::kQ4_0:
      return ymm_range<Dot, DType::kQ4_0>;
    case DType::kQ4_K:
      return ymm_range<Dot, DType::kQ4_K>;
    default:
      return portable_interleaved_kernel(dtype);
  }
}

}  // namespace
}  // namespace gemmaserve::cpu::quant_detail
