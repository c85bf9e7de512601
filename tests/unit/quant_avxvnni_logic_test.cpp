// The AVX-VNNI kernels' logic on any AVX2 CPU: quant_interleaved_ymm.h's DpbusdDot (where the
// unsigned storage's offset comes back out, Q4_K's mins, the tiles) with the VEX vpdpbusd replaced
// by a scalar step of the instruction's definition, against the portable interleaved kernel bit
// for bit. CPUs with AVX-VNNI run the real instruction in quant_test.
#if defined(__x86_64__)

#include <gtest/gtest.h>
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/interleave.h"
#include "kernels/cpu/line_prefetch.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/quant_matmul_internal.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif

#include "kernels/cpu/quant_interleaved_ymm.h"

namespace gemmaserve::cpu::quant_detail {
namespace {

// vpdpbusd: each 32-bit lane adds the 4 products of its unsigned bytes of w and signed bytes of x.
struct ScalarDpbusd {
  static __m256i dpbusd(__m256i acc, __m256i w, __m256i x) {
    alignas(32) uint8_t wb[32];
    alignas(32) int8_t xb[32];
    alignas(32) int32_t ab[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(wb), w);
    _mm256_store_si256(reinterpret_cast<__m256i*>(xb), x);
    _mm256_store_si256(reinterpret_cast<__m256i*>(ab), acc);
    for (int i = 0; i < 8; ++i)
      for (int j = 0; j < 4; ++j) ab[i] += static_cast<int32_t>(wb[4 * i + j]) * xb[4 * i + j];
    return _mm256_load_si256(reinterpret_cast<const __m256i*>(ab));
  }
};

RangeKernel emulated_avxvnni_kernel(DType dtype) {
  return ymm_interleaved_kernel<DpbusdDot<ScalarDpbusd>>(dtype);
}

}  // namespace
}  // namespace gemmaserve::cpu::quant_detail

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

namespace gemmaserve::cpu::quant_detail {
namespace {

// Random bytes (every stored value, Q8_0's q = -128 included) with small finite f16 scales.
std::vector<std::byte> random_rows(DType d, int64_t n, int64_t k, std::mt19937& rng) {
  std::vector<std::byte> rows(dtype_row_bytes(d, k) * static_cast<size_t>(n));
  const size_t bb = dtype_row_bytes(d, dtype_block_elems(d));
  const size_t scale_bytes = d == DType::kQ4_K ? 4 : 2;
  for (size_t i = 0; i < rows.size(); ++i) {
    uint8_t v = static_cast<uint8_t>(rng());
    if (i % bb < scale_bytes && i % 2 == 1) v = 0x20;  // f16 about 0.008
    rows[i] = std::byte{v};
  }
  return rows;
}

TEST(QuantAvxVnniLogic, EmulatedDpbusdMatchesTheCanonicalOrderBitwise) {
  if (!cpu_supports(CpuIsa::kAvx2)) GTEST_SKIP() << "no AVX2 on this CPU";
  std::mt19937 rng(11);
  for (DType d : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K}) {
    for (int64_t k : {256, 768}) {
      for (int64_t t : {1, 2, 3, 5, 9}) {
        const int64_t n = 48, nb = k / 32;
        const std::vector<std::byte> rows = random_rows(d, n, k, rng);
        std::vector<std::byte> w(rows.size());
        interleave_rows(d, rows.data(), w.data(), n, k, nullptr);
        std::normal_distribution<float> dist(0.0f, 1.0f);
        std::vector<float> x(static_cast<size_t>(t * k));
        for (float& v : x) v = dist(rng);
        std::vector<int8_t> q(x.size());
        std::vector<float> dx(static_cast<size_t>(t * nb)), xs(dx.size());
        std::vector<int32_t> off(dx.size() * 8), corr(dx.size());
        const int32_t corr_mult = d == DType::kQ8_0 ? -128 : -8;
        for (int64_t r = 0; r < t; ++r) {
          quantize_act_row(x.data() + r * k, k, q.data() + r * k, dx.data() + r * nb,
                           off.data() + r * nb * 8, xs.data() + r * nb, corr.data() + r * nb,
                           corr_mult);
        }
        QuantActs acts;
        acts.q = q.data();
        acts.d = dx.data();
        acts.off = off.data();
        acts.xs = xs.data();
        acts.corr = corr.data();
        acts.k = k;
        MatmulArgs a;
        a.w = w.data();
        a.w_dtype = d;
        a.w_layout = WeightLayout::kInterleaved16;
        a.t = t;
        a.k = k;
        a.n = n;
        a.ldy = static_cast<size_t>(n);
        std::vector<float> want(static_cast<size_t>(t * n)), got(want.size());
        a.y = want.data();
        portable_interleaved_kernel(d)(a, acts, 0, n);
        a.y = got.data();
        emulated_avxvnni_kernel(d)(a, acts, 0, n);
        ASSERT_EQ(std::memcmp(want.data(), got.data(), want.size() * 4), 0)
            << dtype_name(d) << " K=" << k << " T=" << t;
      }
    }
  }
}

}  // namespace
}  // namespace gemmaserve::cpu::quant_detail

#endif
