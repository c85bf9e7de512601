// What the AVX-512 VNNI quantized kernels share: their target attribute (GS_AVX512), the
// intrinsics and a 4-byte activation broadcast. Include only inside `#if defined(__x86_64__)`.
#pragma once

// GCC 12 reports its own _mm512_undefined_* placeholders (inside insert intrinsics) as
// maybe-uninitialized: a false positive.
#ifndef __clang__  // a GCC-only warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/interleave.h"
#include "kernels/cpu/matmul.h"

#define GS_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c")))

namespace gemmaserve::cpu::quant_detail {

// Four consecutive int8 activations in every 32-bit lane (vpdpbusd's signed operand).
GS_AVX512 inline __m512i broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// The f32 outputs of a tile of RG interleaved weight groups (16 rows each) x RX activation
// rows, zeroed, and stored into Y at the end.
template <int RG, int RX>
struct TileOutputs {
  __m512 acc[RG][RX];
  GS_AVX512 TileOutputs() {
    for (int g = 0; g < RG; ++g)
      for (int x = 0; x < RX; ++x) acc[g][x] = _mm512_setzero_ps();
  }
  GS_AVX512 void store(const MatmulArgs& args, int64_t t0, int64_t g0) const {
    for (int x = 0; x < RX; ++x) {
      float* y = args.y + static_cast<size_t>(t0 + x) * args.ldy;
      for (int g = 0; g < RG; ++g) _mm512_storeu_ps(y + (g0 + g) * kInterleaveRows, acc[g][x]);
    }
  }
};

}  // namespace gemmaserve::cpu::quant_detail
