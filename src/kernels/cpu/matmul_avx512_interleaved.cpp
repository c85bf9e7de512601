// AVX-512 kernels over interleaved F32 / BF16 weights (interleave.h): a 64-byte line holds one
// 4-byte word of 16 rows. With f32 activations each pair of elements (one bf16 line widened
// into its even and odd halves, or two f32 lines) meets two broadcast activations in two fma
// chains; with bf16 activations one vdpbf16ps takes a bf16 line against a broadcast pair. Tiles of
// RG groups x RX activation rows reuse each line RX times and each broadcast RG times.
#include <algorithm>
#include <cstring>

#include "kernels/cpu/interleave.h"
#include "kernels/cpu/line_prefetch.h"
#include "kernels/cpu/matmul_kernels.h"

#if defined(__x86_64__)
// GCC 12 reports its own _mm512_undefined_* placeholders as maybe-uninitialized: false positive.
#ifndef __clang__  // a GCC-only warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#define GS_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))
#define GS_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,avx512bf16")))

namespace gemmaserve::cpu::detail {
namespace {

// Lines are prefetched this far ahead in their own group's stream (or the next group's) by the
// first X tile of a group; later X tiles find them in cache.
constexpr size_t kPrefetchBytes = size_t{16} << 10;

// What a tile prefetches: nothing, lines later X tiles reuse, or lines one X row reads once.
using Prefetch = LinePrefetch;

template <Prefetch kPrefetch>
GS_AVX512 inline void prefetch_ahead(const std::byte* line) {
  prefetch_line<kPrefetch>(reinterpret_cast<const char*>(line) + kPrefetchBytes);
}

struct Groups {
  const std::byte* base;
  size_t group_bytes;
  int64_t lines;  // K / 2
  const std::byte* group(int64_t g) const { return base + static_cast<size_t>(g) * group_bytes; }
};

inline Groups groups_of(const MatmulArgs& a) {
  return {static_cast<const std::byte*>(a.w), dtype_row_bytes(a.w_dtype, a.k) * kInterleaveRows,
          a.k / 2};
}

template <DType D, int RG, int RX, Prefetch kPrefetch>
GS_AVX512 void f32_tile(const MatmulArgs& a, const Groups& gs, int64_t t0, int64_t g0) {
  const std::byte* w[RG];
  for (int g = 0; g < RG; ++g) w[g] = gs.group(g0 + g);
  const float* x[RX];
  for (int i = 0; i < RX; ++i) x[i] = a.x + static_cast<size_t>(t0 + i) * a.ldx;
  __m512 even[RG][RX], odd[RG][RX];
  for (int g = 0; g < RG; ++g)
    for (int i = 0; i < RX; ++i) even[g][i] = odd[g][i] = _mm512_setzero_ps();
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  for (int64_t p = 0; p < gs.lines; ++p) {
    __m512 we[RG], wo[RG];
    for (int g = 0; g < RG; ++g) {
      if constexpr (D == DType::kBF16) {
        const std::byte* line = w[g] + 64 * p;
        prefetch_ahead<kPrefetch>(line);
        const __m512i v = _mm512_loadu_si512(line);
        we[g] = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
        wo[g] = _mm512_castsi512_ps(_mm512_and_si512(v, high));
      } else {
        const std::byte* line = w[g] + 128 * p;
        prefetch_ahead<kPrefetch>(line);
        prefetch_ahead<kPrefetch>(line + 64);
        we[g] = _mm512_loadu_ps(line);
        wo[g] = _mm512_loadu_ps(line + 64);
      }
    }
    for (int i = 0; i < RX; ++i) {
      const __m512 xe = _mm512_set1_ps(x[i][2 * p]);
      const __m512 xo = _mm512_set1_ps(x[i][2 * p + 1]);
      for (int g = 0; g < RG; ++g) {
        even[g][i] = _mm512_fmadd_ps(xe, we[g], even[g][i]);
        odd[g][i] = _mm512_fmadd_ps(xo, wo[g], odd[g][i]);
      }
    }
  }
  for (int i = 0; i < RX; ++i) {
    float* y = a.y + static_cast<size_t>(t0 + i) * a.ldy;
    for (int g = 0; g < RG; ++g) {
      _mm512_storeu_ps(y + (g0 + g) * kInterleaveRows, _mm512_add_ps(even[g][i], odd[g][i]));
    }
  }
}

template <int RG, int RX, Prefetch kPrefetch>
GS_AVX512_BF16 void bf16_tile(const MatmulArgs& a, const Groups& gs, const uint16_t* xb,
                              size_t ldxb, int64_t t0, int64_t g0) {
  const std::byte* w[RG];
  for (int g = 0; g < RG; ++g) w[g] = gs.group(g0 + g);
  const uint16_t* x[RX];
  for (int i = 0; i < RX; ++i) x[i] = xb + static_cast<size_t>(t0 + i) * ldxb;
  __m512 acc[RG][RX];
  for (int g = 0; g < RG; ++g)
    for (int i = 0; i < RX; ++i) acc[g][i] = _mm512_setzero_ps();
  for (int64_t p = 0; p < gs.lines; ++p) {
    __m512bh v[RG];
    for (int g = 0; g < RG; ++g) {
      const std::byte* line = w[g] + 64 * p;
      prefetch_ahead<kPrefetch>(line);
      v[g] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(line));
    }
    for (int i = 0; i < RX; ++i) {
      int32_t pair;
      std::memcpy(&pair, x[i] + 2 * p, 4);
      const __m512bh xv = reinterpret_cast<__m512bh>(_mm512_set1_epi32(pair));
      for (int g = 0; g < RG; ++g) acc[g][i] = _mm512_dpbf16_ps(acc[g][i], v[g], xv);
    }
  }
  for (int i = 0; i < RX; ++i) {
    float* y = a.y + static_cast<size_t>(t0 + i) * a.ldy;
    for (int g = 0; g < RG; ++g) _mm512_storeu_ps(y + (g0 + g) * kInterleaveRows, acc[g][i]);
  }
}

// Groups [g_begin, g_end) for every X row, RG groups x RX rows per tile; Tile(rg, rx, prefetch,
// t, g) runs one tile. The first X tile of each RG groups prefetches.
template <int RG, int RX, class Tile>
inline void run_groups(int64_t t_count, int64_t g_begin, int64_t g_end, const Tile& tile) {
  int64_t g = g_begin;
  for (; g + RG <= g_end; g += RG) {
    int64_t t = 0;
    if (t_count >= RX) {
      tile.template operator()<RG, RX, Prefetch::kL1>(t, g);
      t = RX;
    }
    for (; t + RX <= t_count; t += RX) tile.template operator()<RG, RX, Prefetch::kNone>(t, g);
    for (; t < t_count; ++t) {
      if (t == 0) {
        tile.template operator()<RG, 1, Prefetch::kL1>(t, g);
      } else {
        tile.template operator()<RG, 1, Prefetch::kNone>(t, g);
      }
    }
  }
  for (; g < g_end; ++g) {
    int64_t t = 0;
    for (; t + RX <= t_count; t += RX) tile.template operator()<1, RX, Prefetch::kNone>(t, g);
    for (; t < t_count; ++t) tile.template operator()<1, 1, Prefetch::kL1>(t, g);
  }
}

// Decode of one row: every line is read once.
template <int RG, Prefetch kOnce, class Tile>
inline void run_groups_one_row(int64_t g_begin, int64_t g_end, const Tile& tile) {
  int64_t g = g_begin;
  for (; g + RG <= g_end; g += RG) tile.template operator()<RG, 1, kOnce>(0, g);
  for (; g < g_end; ++g) tile.template operator()<1, 1, kOnce>(0, g);
}

template <int RG, class Tile>
inline void run_groups_one_row(int64_t g_begin, int64_t g_end, const Tile& tile) {
  with_once_line_prefetch(
      [&]<Prefetch kOnce>() { run_groups_one_row<RG, kOnce>(g_begin, g_end, tile); });
}

}  // namespace

// Decode: one group at a time (two fma chains per row); several rows: 2 groups x 4 rows.
GS_AVX512 void matmul_range_avx512_interleaved(const MatmulArgs& a, int64_t n_begin,
                                               int64_t n_end) {
  const Groups gs = groups_of(a);
  const bool bf16 = a.w_dtype == DType::kBF16;
  const auto tile = [&]<int RG, int RX, Prefetch kPrefetch>(int64_t t, int64_t g) {
    if (bf16) {
      f32_tile<DType::kBF16, RG, RX, kPrefetch>(a, gs, t, g);
    } else {
      f32_tile<DType::kF32, RG, RX, kPrefetch>(a, gs, t, g);
    }
  };
  const int64_t g0 = n_begin / kInterleaveRows, g1 = n_end / kInterleaveRows;
  if (a.t == 1) {
    run_groups_one_row<1>(g0, g1, tile);
  } else {
    run_groups<2, 4>(a.t, g0, g1, tile);
  }
}

// Decode: two groups at a time (one vdpbf16ps chain per row each); several rows: 3 x 4.
GS_AVX512_BF16 void matmul_range_avx512_bf16_interleaved(const MatmulArgs& a,
                                                         const uint16_t* x_bf16, size_t ldx_bf16,
                                                         int64_t n_begin, int64_t n_end) {
  const Groups gs = groups_of(a);
  const auto tile = [&]<int RG, int RX, Prefetch kPrefetch>(int64_t t, int64_t g) {
    bf16_tile<RG, RX, kPrefetch>(a, gs, x_bf16, ldx_bf16, t, g);
  };
  const int64_t g0 = n_begin / kInterleaveRows, g1 = n_end / kInterleaveRows;
  if (a.t == 1) {
    run_groups_one_row<2>(g0, g1, tile);
  } else {
    run_groups<3, 4>(a.t, g0, g1, tile);
  }
}

}  // namespace gemmaserve::cpu::detail

#endif
