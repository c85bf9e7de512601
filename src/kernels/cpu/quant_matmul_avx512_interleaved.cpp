// AVX-512 VNNI kernels over interleaved Q8_0 / Q4_0 weights (interleave.h): each
// vpdpbusd takes 4 elements of 16 weight rows (unsigned) and 4 broadcast activations (signed),
// so a block of 16 rows costs 8 vpdpbusd and one convert + multiply + fma per X row. Tiles of
// RG groups x RX activation rows reuse each weight load RX times and each broadcast RG times.
#include <algorithm>
#include <cstring>

#include "kernels/cpu/interleave.h"
#include "kernels/cpu/line_prefetch.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/quant_matmul_internal.h"

#if defined(__x86_64__)
#include "kernels/cpu/vnni_avx512.h"

namespace gemmaserve::cpu::quant_detail {
namespace {

constexpr size_t kScaleBytes = 2 * kInterleaveRows;

// One tile: RX activation rows from t0 by RG groups (16 rows each) from group g0, requesting
// the lines of `prefetch` as kPrefetch.
template <DType kType, int RG, int RX, LinePrefetch kPrefetch = LinePrefetch::kL1>
GS_AVX512 void tile(const MatmulArgs& args, const QuantActs& a, int64_t t0, int64_t g0,
                    LineRange prefetch) {
  constexpr size_t kValues = kType == DType::kQ8_0 ? 512 : 256;
  const int64_t nb = a.blocks();
  const size_t group_bytes = static_cast<size_t>(nb) * (kScaleBytes + kValues);
  const std::byte* scales[RG];
  const std::byte* values[RG];
  for (int g = 0; g < RG; ++g) {
    scales[g] = static_cast<const std::byte*>(args.w) + static_cast<size_t>(g0 + g) * group_bytes;
    values[g] = scales[g] + static_cast<size_t>(nb) * kScaleBytes;
  }
  const int8_t* xq[RX];
  for (int x = 0; x < RX; ++x) xq[x] = a.q + (t0 + x) * a.k;
  TileOutputs<RG, RX> out;
  auto& acc = out.acc;
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  LineTrickle<kPrefetch> requests(prefetch, nb);
  for (int64_t b = 0; b < nb; ++b) {
    requests.step();
    __m512i p[RG][RX];
    for (int x = 0; x < RX; ++x) {
      const __m512i start = _mm512_set1_epi32(a.corr[(t0 + x) * nb + b]);
      for (int g = 0; g < RG; ++g) p[g][x] = start;
    }
    if constexpr (kType == DType::kQ8_0) {
      for (int j = 0; j < 8; ++j) {
        __m512i w[RG];
        for (int g = 0; g < RG; ++g) {
          w[g] = _mm512_loadu_si512(values[g] + static_cast<size_t>(b) * kValues + 64 * j);
        }
        for (int x = 0; x < RX; ++x) {
          const __m512i xv = broadcast4(xq[x] + b * 32 + 4 * j);
          for (int g = 0; g < RG; ++g) p[g][x] = _mm512_dpbusd_epi32(p[g][x], w[g], xv);
        }
      }
    } else {
      for (int m = 0; m < 4; ++m) {
        __m512i lo[RG], hi[RG];
        for (int g = 0; g < RG; ++g) {
          const __m512i v =
              _mm512_loadu_si512(values[g] + static_cast<size_t>(b) * kValues + 64 * m);
          lo[g] = _mm512_and_si512(v, low4);
          hi[g] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
        }
        for (int x = 0; x < RX; ++x) {
          const __m512i xl = broadcast4(xq[x] + b * 32 + 4 * m);
          const __m512i xh = broadcast4(xq[x] + b * 32 + 16 + 4 * m);
          for (int g = 0; g < RG; ++g) {
            p[g][x] = _mm512_dpbusd_epi32(p[g][x], lo[g], xl);
            p[g][x] = _mm512_dpbusd_epi32(p[g][x], hi[g], xh);
          }
        }
      }
    }
    __m512 dw[RG];
    for (int g = 0; g < RG; ++g) {
      dw[g] = _mm512_cvtph_ps(_mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(scales[g] + static_cast<size_t>(b) * kScaleBytes)));
    }
    for (int x = 0; x < RX; ++x) {
      const __m512 dx = _mm512_set1_ps(a.d[(t0 + x) * nb + b]);
      for (int g = 0; g < RG; ++g) {
        acc[g][x] =
            _mm512_fmadd_ps(_mm512_mul_ps(dw[g], dx), _mm512_cvtepi32_ps(p[g][x]), acc[g][x]);
      }
    }
  }
  out.store(args, t0, g0);
}

// Groups [g_begin, g_end) for every X row: RG groups at a time, X rows in tiles of RX. While
// one RG groups are multiplied, the next RG groups' lines are requested, spread over all of
// the X tiles, so memory streams W while every tile computes (requesting them all in the first
// tile left memory idle during the others: batched decode paid stream + compute in turn).
// `ahead` > 0 requests as many lines, but from `ahead` bytes past the current groups' start.
template <DType kType, int RG, int RX, LinePrefetch kPrefetch = LinePrefetch::kL1>
GS_AVX512 void groups(const MatmulArgs& args, const QuantActs& a, int64_t g_begin, int64_t g_end,
                      size_t ahead = 0) {
  const size_t group_bytes =
      static_cast<size_t>(a.blocks()) * (kScaleBytes + (kType == DType::kQ8_0 ? 512 : 256));
  const int64_t tiles = args.t / RX + (args.t % RX != 0);
  const size_t lines = RG * group_bytes / 64;
  const auto* w = static_cast<const char*>(args.w);
  int64_t g = g_begin;
  for (; g + RG <= g_end; g += RG) {
    const char* next =
        w + static_cast<size_t>(g) * group_bytes + (ahead > 0 ? ahead : RG * group_bytes);
    LineShares shares(next, lines, tiles);
    int64_t t = 0;
    for (; t + RX <= args.t; t += RX) tile<kType, RG, RX, kPrefetch>(args, a, t, g, shares.take());
    // The last rows in narrower tiles (MoE experts see T of any size), not one at a time.
    static_assert(RX <= 8);
    if constexpr (RX > 4) {
      if (args.t - t >= 4) tile<kType, RG, 4>(args, a, t, g, shares.take());
      if (args.t - t >= 4) t += 4;
    }
    if (args.t - t == 3) tile<kType, RG, 3>(args, a, t, g, shares.take());
    if (args.t - t == 2) tile<kType, RG, 2>(args, a, t, g, shares.take());
    if (args.t - t == 1) tile<kType, RG, 1>(args, a, t, g, shares.take());
  }
  for (; g < g_end; ++g) {
    int64_t t = 0;
    for (; t + RX <= args.t; t += RX) tile<kType, 1, RX>(args, a, t, g, {});
    for (; t < args.t; ++t) tile<kType, 1, 1>(args, a, t, g, {});
  }
}

template <DType kType>
GS_AVX512 void range(const MatmulArgs& args, const QuantActs& a, int64_t n_begin, int64_t n_end) {
  const int64_t g_begin = n_begin / kInterleaveRows, g_end = n_end / kInterleaveRows;
  // Decode: one group at a time, the next one prefetched (best of 1/2/4 groups in flight and
  // 0-8 groups ahead, bench quant-kernel --copies 64; with no prefetch it is the slowest).
  // Several rows: 3 groups x 4 rows, 12 vpdpbusd chains (3-5 % faster than 2 x 4, 2 x 5 and
  // 2 x 6; 4 x 3 and 1 x 8 slower: bench quant-kernel --t 512); T = 8 streams 1.1-1.7x faster
  // with the prefetch, and 1.1x more with it spread over both X tiles (1 x 8 is no faster on
  // Zen 5). Batched decode on the Intel Xeon requests the next groups into L2 and takes Q8_0
  // 8 rows at a time (one load per 8 vpdpbusd): bench quant-kernel --t 8 --copies 256, 2
  // threads, 17.6-18.3 -> 21.6-22.3 GB/s for Q8_0, 16.3-16.9 -> 17.4-18.1 for Q4_0 (whose
  // 1 x 8 tile is no faster: its nibble unpacking is not what it waits on).
  constexpr int64_t kMaxBatchRows = 12;
  const bool batch_l2 = batch_line_prefetch() == LinePrefetch::kL2;
  if (args.t == 1) {
    const size_t ahead = args.prefetch_ahead >= 0 ? static_cast<size_t>(args.prefetch_ahead)
                                                  : once_prefetch_distance();
    with_once_line_prefetch(
        [&]<LinePrefetch kOnce>() { groups<kType, 1, 1, kOnce>(args, a, g_begin, g_end, ahead); });
  } else if (batch_l2 && args.t <= kMaxBatchRows && kType == DType::kQ8_0 && args.t >= 8) {
    groups<kType, 1, 8, LinePrefetch::kL2>(args, a, g_begin, g_end);
  } else if (batch_l2 && args.t <= kMaxBatchRows) {
    groups<kType, 3, 4, LinePrefetch::kL2>(args, a, g_begin, g_end);
  } else {
    groups<kType, 3, 4>(args, a, g_begin, g_end);
  }
}

}  // namespace

RangeKernel avx512_interleaved_kernel(DType dtype) {
  switch (dtype) {
    case DType::kQ8_0:
      return range<DType::kQ8_0>;
    case DType::kQ4_0:
      return range<DType::kQ4_0>;
    case DType::kQ4_K:
      return avx512_interleaved_q4k_kernel();
    default:
      return portable_interleaved_kernel(dtype);
  }
}

}  // namespace gemmaserve::cpu::quant_detail

#else

namespace gemmaserve::cpu::quant_detail {
RangeKernel avx512_interleaved_kernel(DType dtype) { return portable_interleaved_kernel(dtype); }
}  // namespace gemmaserve::cpu::quant_detail

#endif
