// AVX-512 VNNI kernels over interleaved Q4_K weights (interleave.h): a super-block's packed 6-bit
// scales and mins are widened for its 16 rows at once into d * sc and dmin * m vectors (once per
// group of rows, not per activation tile), then each 32-element sub-block costs 8 vpdpbusd per
// X row (one nibble half of 8 lines) and one scale step per X row.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/interleave.h"
#include "kernels/cpu/line_prefetch.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/quant_matmul_internal.h"

#if defined(__x86_64__)
#include "kernels/cpu/vnni_avx512.h"

namespace gemmaserve::cpu::quant_detail {
namespace {

constexpr size_t kUnitBytes = kInterleaveRows * kQ4KBlockBytes;  // one super-block of 16 rows
constexpr size_t kHeaderBytes = 256;
constexpr int kTableVectors = 16;  // d * sc of sub-blocks 0..7, then dmin * m of 0..7

// The scale table of one super-block unit: byte j of all 16 rows widens in one load, then
// q4k_scale_min's bit arithmetic runs on 16 lanes.
GS_AVX512 void unit_table(const std::byte* unit, float* tab) {
  __m512i b[12];
  for (int j = 0; j < 12; ++j) {
    b[j] =
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(unit + 64 + 16 * j)));
  }
  const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(unit)));
  const __m512 dmin =
      _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(unit + 32)));
  const __m512i low6 = _mm512_set1_epi32(63), low4 = _mm512_set1_epi32(15);
  for (int s = 0; s < 8; ++s) {
    __m512i sc, m;
    if (s < 4) {
      sc = _mm512_and_si512(b[s], low6);
      m = _mm512_and_si512(b[s + 4], low6);
    } else {
      sc = _mm512_or_si512(_mm512_and_si512(b[s + 4], low4),
                           _mm512_slli_epi32(_mm512_srli_epi32(b[s - 4], 6), 4));
      m = _mm512_or_si512(_mm512_srli_epi32(b[s + 4], 4),
                          _mm512_slli_epi32(_mm512_srli_epi32(b[s], 6), 4));
    }
    _mm512_store_ps(tab + 16 * s, _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc)));
    _mm512_store_ps(tab + 16 * (8 + s), _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(m)));
  }
}

// One tile: RX activation rows from t0 by RG groups from g0. `tables` holds the groups' scale
// tables ([RG][ns][16] vectors) or is null, in which case each super-block's are made here.
template <int RG, int RX, LinePrefetch kPrefetch = LinePrefetch::kL1>
GS_AVX512 void tile(const MatmulArgs& args, const QuantActs& a, int64_t t0, int64_t g0,
                    const float* tables, LineRange prefetch) {
  const int64_t ns = a.k / kQ4KBlockElems, nb = a.blocks();
  const size_t group_bytes = static_cast<size_t>(ns) * kUnitBytes;
  const auto* w = static_cast<const std::byte*>(args.w);
  const int8_t* xq[RX];
  for (int x = 0; x < RX; ++x) xq[x] = a.q + (t0 + x) * a.k;
  TileOutputs<RG, RX> out;
  auto& acc = out.acc;
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  LineTrickle<kPrefetch> requests(prefetch, ns);
  alignas(64) float own[RG][kTableVectors * 16];
  for (int64_t sb = 0; sb < ns; ++sb) {
    requests.step();
    const std::byte* unit[RG];
    const float* tab[RG];
    for (int g = 0; g < RG; ++g) {
      unit[g] =
          w + static_cast<size_t>(g0 + g) * group_bytes + static_cast<size_t>(sb) * kUnitBytes;
      if (tables != nullptr) {
        tab[g] = tables + (static_cast<size_t>(g) * ns + sb) * kTableVectors * 16;
      } else {
        unit_table(unit[g], own[g]);
        tab[g] = own[g];
      }
    }
    // Small tiles take both nibble halves of a line in one pass (one load, two chains per
    // output); big ones go over the lines once per half, as their registers hold one set.
    constexpr int kFuse = RG * RX <= 4 ? 2 : 1;
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
#pragma GCC unroll 2
      for (int h0 = 0; h0 < 2; h0 += kFuse) {
        __m512i p[kFuse][RG][RX];
        for (int k = 0; k < kFuse; ++k)
          for (int g = 0; g < RG; ++g)
            for (int x = 0; x < RX; ++x) p[k][g][x] = _mm512_setzero_si512();
        for (int m = 0; m < 8; ++m) {
          __m512i v[kFuse][RG];
          for (int g = 0; g < RG; ++g) {
            const __m512i raw = _mm512_loadu_si512(unit[g] + kHeaderBytes + 512 * c + 64 * m);
            for (int k = 0; k < kFuse; ++k) {
              v[k][g] = _mm512_and_si512(h0 + k ? _mm512_srli_epi16(raw, 4) : raw, low4);
            }
          }
          for (int x = 0; x < RX; ++x) {
            for (int k = 0; k < kFuse; ++k) {
              const __m512i xv =
                  broadcast4(xq[x] + sb * kQ4KBlockElems + 64 * c + 32 * (h0 + k) + 4 * m);
              for (int g = 0; g < RG; ++g)
                p[k][g][x] = _mm512_dpbusd_epi32(p[k][g][x], v[k][g], xv);
            }
          }
        }
        for (int k = 0; k < kFuse; ++k) {  // sub-blocks in order: the canonical order
          const int s = 2 * c + h0 + k;
          const int64_t b = sb * 8 + s;
          for (int x = 0; x < RX; ++x) {
            const __m512 dx = _mm512_set1_ps(a.d[(t0 + x) * nb + b]);
            const __m512 xs = _mm512_set1_ps(a.xs[(t0 + x) * nb + b]);
            for (int g = 0; g < RG; ++g) {
              acc[g][x] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_load_ps(tab[g] + 16 * s), dx),
                                          _mm512_cvtepi32_ps(p[k][g][x]), acc[g][x]);
              acc[g][x] = _mm512_fnmadd_ps(_mm512_load_ps(tab[g] + 16 * (8 + s)), xs, acc[g][x]);
            }
          }
        }
      }
    }
  }
  out.store(args, t0, g0);
}

// The scale tables of groups [g0, g0 + RG), reused by every activation tile of those groups
// (64-byte aligned inside a per-thread buffer that only grows).
template <int RG>
GS_AVX512 const float* group_tables(const std::byte* w, int64_t g0, int64_t ns) {
  thread_local std::vector<float> buffer;
  const size_t need = static_cast<size_t>(RG * ns * kTableVectors * 16) + 16;
  if (buffer.size() < need) buffer.resize(need);
  const auto at = reinterpret_cast<uintptr_t>(buffer.data());
  float* tables = buffer.data() + ((64 - at % 64) % 64) / sizeof(float);
  for (int g = 0; g < RG; ++g) {
    const std::byte* group = w + static_cast<size_t>(g0 + g) * static_cast<size_t>(ns) * kUnitBytes;
    for (int64_t sb = 0; sb < ns; ++sb) {
      unit_table(group + static_cast<size_t>(sb) * kUnitBytes,
                 tables + (static_cast<size_t>(g) * ns + sb) * kTableVectors * 16);
    }
  }
  return tables;
}

// Groups [g_begin, g_end) for every X row, RG groups at a time, X rows in tiles of RX, the next
// RG groups' lines requested while these compute (spread over the X tiles) as in the Q4_0
// kernel; `ahead` > 0 requests them from that many bytes past the current groups' start.
template <int RG, int RX, LinePrefetch kPrefetch = LinePrefetch::kL1>
GS_AVX512 void groups(const MatmulArgs& args, const QuantActs& a, int64_t g_begin, int64_t g_end,
                      size_t ahead = 0) {
  const int64_t ns = a.k / kQ4KBlockElems;
  const size_t group_bytes = static_cast<size_t>(ns) * kUnitBytes;
  const int64_t tiles = args.t / RX + (args.t % RX != 0);
  const size_t lines = RG * group_bytes / 64;
  const auto* w = static_cast<const std::byte*>(args.w);
  const auto* wc = static_cast<const char*>(args.w);
  int64_t g = g_begin;
  for (; g + RG <= g_end; g += RG) {
    const char* next =
        wc + static_cast<size_t>(g) * group_bytes + (ahead > 0 ? ahead : RG * group_bytes);
    LineShares shares(next, lines, tiles);
    // Two tiles (batched decode of 5-8 rows) make their own: 4 % faster than a table round trip
    // (bench quant-kernel --type q4_k --t 8, alternating builds).
    const float* tables = tiles > 2 ? group_tables<RG>(w, g, ns) : nullptr;
    int64_t t = 0;
    for (; t + RX <= args.t; t += RX) tile<RG, RX, kPrefetch>(args, a, t, g, tables, shares.take());
    static_assert(RX <= 4);
    if (args.t - t == 3) tile<RG, 3>(args, a, t, g, tables, shares.take());
    if (args.t - t == 2) tile<RG, 2>(args, a, t, g, tables, shares.take());
    if (args.t - t == 1) tile<RG, 1>(args, a, t, g, tables, shares.take());
  }
  for (; g < g_end; ++g) {
    const float* tables = tiles > 1 ? group_tables<1>(w, g, ns) : nullptr;
    int64_t t = 0;
    for (; t + RX <= args.t; t += RX) tile<1, RX>(args, a, t, g, tables, {});
    for (; t < args.t; ++t) tile<1, 1>(args, a, t, g, tables, {});
  }
}

GS_AVX512 void range(const MatmulArgs& args, const QuantActs& a, int64_t n_begin, int64_t n_end) {
  const int64_t g_begin = n_begin / kInterleaveRows, g_end = n_end / kInterleaveRows;
  // The Q4_0 kernel's shapes and requests (quant_matmul_avx512_interleaved.cpp): one group at a
  // time for decode, 3 groups x 4 rows otherwise, requests into L2 for batched decode where the
  // CPU prefers them.
  constexpr int64_t kMaxBatchRows = 12;
  if (args.t == 1) {
    const size_t ahead = args.prefetch_ahead >= 0 ? static_cast<size_t>(args.prefetch_ahead)
                                                  : once_prefetch_distance();
    with_once_line_prefetch(
        [&]<LinePrefetch kOnce>() { groups<1, 1, kOnce>(args, a, g_begin, g_end, ahead); });
  } else if (batch_line_prefetch() == LinePrefetch::kL2 && args.t <= kMaxBatchRows) {
    groups<3, 4, LinePrefetch::kL2>(args, a, g_begin, g_end);
  } else {
    groups<3, 4>(args, a, g_begin, g_end);
  }
}

}  // namespace

RangeKernel avx512_interleaved_q4k_kernel() { return range; }

}  // namespace gemmaserve::cpu::quant_detail

#else

namespace gemmaserve::cpu::quant_detail {
RangeKernel avx512_interleaved_q4k_kernel() { return portable_interleaved_kernel(DType::kQ4_K); }
}  // namespace gemmaserve::cpu::quant_detail

#endif
