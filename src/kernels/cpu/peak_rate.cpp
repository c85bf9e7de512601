#include "kernels/cpu/peak_rate.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/quant_matmul.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace gemmaserve::cpu {
namespace {

enum class Kind { kF32Fma, kBf16Dot, kInt8Dot };

// Twelve independent accumulators hide every latency these units have (4-6 cycles, 2 pipes).
constexpr int kChains = 12;
constexpr int64_t kInnerIters = 4096;

#if defined(__x86_64__)
#define GS_PEAK_ALL(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7) M(8) M(9) M(10) M(11)
// One function per instruction kind: twelve accumulators declared by GS_PEAK_DECL_<NAME>(i),
// each updated by GS_PEAK_OP_<NAME>(i) every iteration, then kept alive with an empty asm.
#define GS_PEAK_RUN(NAME, TARGET, X)                         \
  __attribute__((target(TARGET))) void NAME(int64_t iters) { \
    GS_PEAK_ALL(GS_PEAK_DECL_##NAME)                         \
    auto x = X;                                              \
    asm volatile("" : "+v"(x)); /* not a known constant */   \
    for (int64_t it = 0; it < iters; ++it) {                 \
      GS_PEAK_ALL(GS_PEAK_OP_##NAME)                         \
    }                                                        \
    GS_PEAK_ALL(GS_PEAK_SINK)                                \
  }
#define GS_PEAK_SINK(i) asm volatile("" ::"v"(a##i));

#define GS_PEAK_DECL_run_fma512(i) __m512 a##i = _mm512_set1_ps(1e-9f * (i));
#define GS_PEAK_OP_run_fma512(i) a##i = _mm512_fmadd_ps(x, x, a##i);
GS_PEAK_RUN(run_fma512, "avx512f", _mm512_set1_ps(0.999f))

#define GS_PEAK_DECL_run_fma256(i) __m256 a##i = _mm256_set1_ps(1e-9f * (i));
#define GS_PEAK_OP_run_fma256(i) a##i = _mm256_fmadd_ps(x, x, a##i);
GS_PEAK_RUN(run_fma256, "avx2,fma", _mm256_set1_ps(0.999f))

#define GS_PEAK_DECL_run_bf16(i) __m512 a##i = _mm512_set1_ps(1e-9f * (i));
#define GS_PEAK_OP_run_bf16(i) a##i = _mm512_dpbf16_ps(a##i, x, x);
GS_PEAK_RUN(run_bf16, "avx512f,avx512bf16", (__m512bh)_mm512_set1_epi16(0x3f80))

#define GS_PEAK_DECL_run_int8(i) __m512i a##i = _mm512_set1_epi32(i);
#define GS_PEAK_OP_run_int8(i) a##i = _mm512_dpbusd_epi32(a##i, x, x);
GS_PEAK_RUN(run_int8, "avx512f,avx512vnni", _mm512_set1_epi8(1))

// AVX-VNNI: the VEX vpdpbusd, 32 multiply-adds per instruction.
#define GS_PEAK_DECL_run_int8_avxvnni(i) __m256i a##i = _mm256_set1_epi32(i);
#define GS_PEAK_OP_run_int8_avxvnni(i) a##i = _mm256_dpbusd_avx_epi32(a##i, x, x);
GS_PEAK_RUN(run_int8_avxvnni, "avx2,avxvnni", _mm256_set1_epi8(1))

// AVX2: vpmaddubsw, 32 multiplies and 16 adds into int16 pairs, accumulated with vpaddw: the
// inner step of the AVX2 quantized kernels (quant_matmul_avx2_interleaved.cpp).
#define GS_PEAK_DECL_run_int8_avx2(i) __m256i a##i = _mm256_set1_epi16(static_cast<int16_t>(i));
// The accumulator feeds the multiply too, so the product cannot be hoisted out of the loop.
#define GS_PEAK_OP_run_int8_avx2(i) a##i = _mm256_add_epi16(a##i, _mm256_maddubs_epi16(a##i, x));
GS_PEAK_RUN(run_int8_avx2, "avx2", _mm256_set1_epi8(1))

#undef GS_PEAK_SINK
#undef GS_PEAK_ALL
#endif

// Operations one call of run_*(1) performs per chain, or 0 when this CPU lacks the kind.
double ops_per_instruction(Kind kind) {
#if defined(__x86_64__)
  const CpuFeatures& f = cpu_features();
  switch (kind) {
    case Kind::kF32Fma:
      return cpu_supports(CpuIsa::kAvx512) ? 32 : cpu_supports(CpuIsa::kAvx2) ? 16 : 0;
    case Kind::kBf16Dot:
      return cpu_supports(CpuIsa::kAvx512) && f.avx512_bf16 ? 64 : 0;
    case Kind::kInt8Dot:  // the instruction of the quantized kernels this process runs
      switch (quant_best_isa()) {
        case QuantIsa::kAvx512Vnni:
          return 128;
        case QuantIsa::kAvxVnni:
        case QuantIsa::kAvx2:
          return 64;  // 32 multiply-adds per instruction
        case QuantIsa::kPortable:
          return 0;
      }
  }
#else
  (void)kind;
#endif
  return 0;
}

void run(Kind kind, int64_t iters) {
#if defined(__x86_64__)
  switch (kind) {
    case Kind::kF32Fma:
      return cpu_supports(CpuIsa::kAvx512) ? run_fma512(iters) : run_fma256(iters);
    case Kind::kBf16Dot:
      return run_bf16(iters);
    case Kind::kInt8Dot:
      switch (quant_best_isa()) {
        case QuantIsa::kAvx512Vnni:
          return run_int8(iters);
        case QuantIsa::kAvxVnni:
          return run_int8_avxvnni(iters);
        case QuantIsa::kAvx2:
          return run_int8_avx2(iters);
        case QuantIsa::kPortable:
          return;
      }
  }
#else
  (void)kind;
  (void)iters;
#endif
}

// Every thread runs the same number of iterations at once; the rate is total work / wall time.
double measure(Kind kind, ThreadPool& pool, double seconds, int passes) {
  const double per = ops_per_instruction(kind);
  if (per == 0) return 0;
  using Clock = std::chrono::steady_clock;
  // Calibrate on one thread so a pass lasts about `seconds`.
  int64_t iters = kInnerIters;
  for (;;) {
    const auto start = Clock::now();
    run(kind, iters);
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    if (s > seconds / 4 || iters > (int64_t{1} << 34)) {
      iters =
          std::max<int64_t>(kInnerIters, static_cast<int64_t>(iters * seconds / std::max(s, 1e-9)));
      break;
    }
    iters *= 4;
  }
  const size_t threads = pool.size();
  double best = 0;
  for (int p = 0; p < passes; ++p) {
    const auto start = Clock::now();
    pool.parallel_for(threads, [&](size_t b, size_t e) {
      for (size_t i = b; i < e; ++i) run(kind, iters);
    });
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    best = std::max(best,
                    static_cast<double>(threads) * static_cast<double>(iters) * kChains * per / s);
  }
  return best;
}

}  // namespace

PeakRates measure_peak_rates(ThreadPool& pool, double seconds, int passes) {
  PeakRates r;
  r.f32_fma_flops = measure(Kind::kF32Fma, pool, seconds, passes);
  r.bf16_dot_flops = measure(Kind::kBf16Dot, pool, seconds, passes);
  r.int8_dot_ops = measure(Kind::kInt8Dot, pool, seconds, passes);
  return r;
}

}  // namespace gemmaserve::cpu
