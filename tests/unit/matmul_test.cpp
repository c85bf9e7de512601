// Matmul kernels at every SIMD level this CPU has, against a double-precision reference, plus
// the bitwise invariances the engine relies on (row results independent of T, tile, threads
// and N split), the thread pool's error path, and the shape of the kernel benchmarks' JSON.
#include "kernels/cpu/matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/interleave.h"
#include "kernels/cpu/line_prefetch.h"
#include "test_support.h"

namespace gemmaserve::cpu {
namespace {

std::vector<CpuIsa> available_isas() {
  std::vector<CpuIsa> out;
  for (CpuIsa isa : {CpuIsa::kPortable, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (cpu_supports(isa)) out.push_back(isa);
  }
  return out;
}

std::vector<float> random_vec(size_t n, std::mt19937& g) {
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

// A weight matrix stored as `dtype` plus the exact f32 value of every element.
struct Weights {
  DType dtype;
  std::vector<float> f32;
  std::vector<uint16_t> half;
  const void* data() const {
    return dtype == DType::kF32 ? static_cast<const void*>(f32.data()) : half.data();
  }
};

Weights make_weights(DType dtype, size_t n, std::mt19937& g) {
  Weights w{dtype, random_vec(n, g), {}};
  if (dtype == DType::kF32) return w;
  w.half.resize(n);
  for (size_t i = 0; i < n; ++i) {
    w.half[i] = dtype == DType::kBF16 ? f32_to_bf16(w.f32[i]) : f32_to_f16(w.f32[i]);
    w.f32[i] = dtype == DType::kBF16 ? bf16_to_f32(w.half[i]) : f16_to_f32(w.half[i]);
  }
  return w;
}

struct Shape {
  int64_t t, k, n;
};

// Y from `isa`, with padded row strides, checked against a double reference and for no writes
// past N.
void check_against_reference(CpuIsa isa, DType dtype, Shape s, ThreadPool* pool, std::mt19937& g) {
  const size_t ldx = static_cast<size_t>(s.k) + 5, ldy = static_cast<size_t>(s.n) + 3;
  const std::vector<float> x = random_vec(static_cast<size_t>(s.t) * ldx, g);
  const Weights w = make_weights(dtype, static_cast<size_t>(s.n * s.k), g);
  std::vector<float> y(static_cast<size_t>(s.t) * ldy, -7.0f);
  matmul_with_isa({x.data(), ldx, w.data(), dtype, y.data(), ldy, s.t, s.k, s.n}, pool, isa);
  for (int64_t r = 0; r < s.t; ++r) {
    for (int64_t c = 0; c < s.n; ++c) {
      double ref = 0.0, mag = 0.0;
      for (int64_t i = 0; i < s.k; ++i) {
        const double p = static_cast<double>(x[r * ldx + i]) * w.f32[c * s.k + i];
        ref += p;
        mag += std::fabs(p);
      }
      ASSERT_NEAR(y[r * ldy + c], ref, 2e-6 * mag + 1e-30)
          << cpu_isa_name(isa) << " " << dtype_name(dtype) << " t=" << s.t << " k=" << s.k
          << " n=" << s.n << " at " << r << "," << c;
    }
    for (size_t c = static_cast<size_t>(s.n); c < ldy; ++c) {
      ASSERT_EQ(y[r * ldy + c], -7.0f) << "wrote past N";
    }
  }
}

TEST(CpuFeatures, ChosenLevelIsSupportedAndNamesParse) {
  const CpuFeatures& f = cpu_features();
  EXPECT_TRUE(cpu_supports(cpu_isa())) << cpu_isa_name(cpu_isa());
  EXPECT_TRUE(cpu_supports(CpuIsa::kPortable));
  for (CpuIsa isa : {CpuIsa::kPortable, CpuIsa::kAvx2, CpuIsa::kAvxVnni, CpuIsa::kAvx512}) {
    EXPECT_EQ(parse_cpu_isa(cpu_isa_name(isa)), isa);
  }
  try {
    parse_cpu_isa("sse9");
    ADD_FAILURE() << "sse9 parsed";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "unknown CPU ISA 'sse9' (expected portable, avx2, avxvnni or avx512)");
  }
  if (cpu_supports(CpuIsa::kAvxVnni)) {
    EXPECT_TRUE(f.avx2 && f.avx_vnni);
  }
  if (cpu_supports(CpuIsa::kAvx512)) {
    EXPECT_TRUE(f.avx2 && f.avx512f && f.avx512bw);
  }
}

TEST(Matmul, OnceLinePrefetchParsesItsTwoKinds) {
  EXPECT_EQ(parse_once_line_prefetch("nta"), LinePrefetch::kNonTemporal);
  EXPECT_EQ(parse_once_line_prefetch("l2"), LinePrefetch::kL2);
  try {
    parse_once_line_prefetch("t0");
    ADD_FAILURE() << "no error for t0";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "GEMMASERVE_LINE_PREFETCH must be nta or l2, got 't0'");
  }
  const LinePrefetch chosen = once_line_prefetch();
  if (std::getenv("GEMMASERVE_LINE_PREFETCH") == nullptr) {
    EXPECT_EQ(chosen, cpu_features().amd ? LinePrefetch::kNonTemporal : LinePrefetch::kL2);
  }
  EXPECT_EQ(batch_line_prefetch(), cpu_features().amd ? LinePrefetch::kL1 : LinePrefetch::kL2);
}

TEST(Matmul, EveryLevelMatchesReferenceOnOddShapes) {
  std::mt19937 g(11);
  ThreadPool pool(2);
  for (CpuIsa isa : available_isas()) {
    for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (int64_t t : {1, 3, 17, 31}) {
        for (int64_t k : {1, 3, 17, 100, 256, 257}) {
          for (int64_t n : {1, 3, 17, 100}) check_against_reference(isa, dt, {t, k, n}, &pool, g);
        }
      }
    }
  }
}

TEST(Matmul, EveryLevelMatchesReferenceOnModelWidths) {
  std::mt19937 g(12);
  ThreadPool pool(2);
  for (CpuIsa isa : available_isas()) {
    for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (int64_t k : {512, 1536, 2560}) {
        check_against_reference(isa, dt, {1, k, 37}, &pool, g);
        check_against_reference(isa, dt, {9, k, 20}, &pool, g);
      }
    }
    // Enough rows for the prefill blocking (several X blocks and W panels).
    check_against_reference(isa, DType::kBF16, {150, 1536, 140}, &pool, g);
  }
}

TEST(Matmul, RowBitsIndependentOfBatchTileThreadsAndSplit) {
  std::mt19937 g(13);
  const int64_t t = 150, k = 1536 + 7, n = 150;
  const std::vector<float> x = random_vec(static_cast<size_t>(t * k), g);
  ThreadPool p1(1), p2(2), p3(3);
  for (CpuIsa isa : available_isas()) {
    for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
      const Weights w = make_weights(dt, static_cast<size_t>(n * k), g);
      const size_t row_bytes = dtype_row_bytes(dt, k);
      auto run = [&](int64_t rows, int64_t row0, int64_t n0, int64_t cols, ThreadPool* pool) {
        std::vector<float> y(static_cast<size_t>(rows * cols));
        matmul_with_isa({x.data() + row0 * k, static_cast<size_t>(k),
                         static_cast<const std::byte*>(w.data()) + n0 * row_bytes, dt, y.data(),
                         static_cast<size_t>(cols), rows, k, cols},
                        pool, isa);
        return y;
      };
      const std::vector<float> full = run(t, 0, 0, n, nullptr);
      for (ThreadPool* pool : {&p1, &p2, &p3}) {
        ASSERT_EQ(0, std::memcmp(full.data(), run(t, 0, 0, n, pool).data(), full.size() * 4))
            << cpu_isa_name(isa) << " threads " << pool->size();
      }
      // Any row alone, or in a small batch starting elsewhere, or any column range of W.
      for (int64_t r : {0, 5, 77, 149}) {
        const std::vector<float> one = run(1, r, 0, n, &p2);
        ASSERT_EQ(0, std::memcmp(one.data(), &full[r * n], n * 4)) << cpu_isa_name(isa) << r;
        const int64_t rows = std::min<int64_t>(3, t - r);
        const std::vector<float> few = run(rows, r, 0, n, &p3);
        ASSERT_EQ(0, std::memcmp(few.data(), &full[r * n], n * 4)) << cpu_isa_name(isa) << r;
        const std::vector<float> cols = run(1, r, 33, 7, nullptr);
        ASSERT_EQ(0, std::memcmp(cols.data(), &full[r * n + 33], 7 * 4)) << cpu_isa_name(isa);
      }
    }
  }
}

// AVX2 keeps the AVX-512 lanes in two halves with the same FMAs and tree: identical bits.
TEST(Matmul, Avx2AndAvx512GiveIdenticalBits) {
  if (!cpu_supports(CpuIsa::kAvx512)) GTEST_SKIP() << "no AVX-512 on this CPU";
  std::mt19937 g(14);
  const int64_t t = 13, k = 1000, n = 45;
  const std::vector<float> x = random_vec(static_cast<size_t>(t * k), g);
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    const Weights w = make_weights(dt, static_cast<size_t>(n * k), g);
    std::vector<float> a(static_cast<size_t>(t * n)), b(a.size());
    MatmulArgs args{
        x.data(), static_cast<size_t>(k), w.data(), dt, a.data(), static_cast<size_t>(n), t, k, n};
    matmul_with_isa(args, nullptr, CpuIsa::kAvx512);
    args.y = b.data();
    matmul_with_isa(args, nullptr, CpuIsa::kAvx2);
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4)) << dtype_name(dt);
  }
}

TEST(Matmul, DotMatchesMatmulElement) {
  std::mt19937 g(15);
  for (int64_t k : {1, 16, 33, 1536}) {
    const std::vector<float> x = random_vec(static_cast<size_t>(k), g);
    const std::vector<float> w = random_vec(static_cast<size_t>(k), g);
    float y = 0.0f;
    matmul({x.data(), static_cast<size_t>(k), w.data(), DType::kF32, &y, 1, 1, k, 1}, nullptr);
    const float d = dot_f32(x.data(), w.data(), k);
    EXPECT_EQ(0, std::memcmp(&y, &d, 4)) << k;
  }
}

// The optional bf16-activation path: X rounded to bf16, products exact, f32 sums; and still
// row-invariant. Where the CPU lacks AVX512_BF16 it must be exactly the f32 path.
TEST(Matmul, Bf16ActivationsMatchRoundedReferenceAndStayInvariant) {
  std::mt19937 g(16);
  ThreadPool pool(2);
  for (int64_t k : {1, 31, 33, 100, 1536}) {
    const int64_t t = 21, n = 37;
    const std::vector<float> x = random_vec(static_cast<size_t>(t * k), g);
    const Weights w = make_weights(DType::kBF16, static_cast<size_t>(n * k), g);
    std::vector<float> y(static_cast<size_t>(t * n)), f32(y.size());
    MatmulArgs a{x.data(), static_cast<size_t>(k), w.data(), DType::kBF16,
                 y.data(), static_cast<size_t>(n), t,        k,
                 n};
    a.precision = MatmulPrecision::kBF16;
    matmul(a, &pool);
    MatmulArgs plain = a;
    plain.precision = MatmulPrecision::kF32;
    plain.y = f32.data();
    matmul(plain, &pool);
    const bool bf16_kernel = cpu_isa() == CpuIsa::kAvx512 && cpu_features().avx512_bf16;
    if (!bf16_kernel) {
      EXPECT_EQ(0, std::memcmp(y.data(), f32.data(), y.size() * 4));
      continue;
    }
    for (int64_t r = 0; r < t; ++r) {
      for (int64_t c = 0; c < n; ++c) {
        double ref = 0.0, mag = 0.0;
        for (int64_t i = 0; i < k; ++i) {
          const double p =
              static_cast<double>(bf16_to_f32(f32_to_bf16(x[r * k + i]))) * w.f32[c * k + i];
          ref += p;
          mag += std::fabs(p);
        }
        ASSERT_NEAR(y[r * n + c], ref, 2e-6 * mag + 1e-30) << k << " " << r << "," << c;
      }
      std::vector<float> one(static_cast<size_t>(n));
      MatmulArgs single = a;
      single.x = x.data() + r * k;
      single.t = 1;
      single.y = one.data();
      matmul(single, nullptr);
      ASSERT_EQ(0, std::memcmp(one.data(), &y[r * n], n * 4)) << "row " << r << " k " << k;
    }
  }
}

// Interleaved F32 / BF16 weights (interleave.h): every level reproduces the canonical even/odd
// fma order bit for bit (written out here on the row-major weights), so a bf16 matrix and its
// f32 copy agree exactly; row results are independent of T and threads, and bf16 activations
// stay within rounding of the exact product.
TEST(Matmul, InterleavedMatchesCanonicalOrderOnEveryLevel) {
  std::mt19937 g(21);
  ThreadPool pool(2);
  for (const Shape s : {Shape{1, 32, 16}, Shape{1, 1536, 80}, Shape{5, 96, 48}, Shape{13, 512, 32},
                        Shape{9, 2560, 64}}) {
    const size_t ldx = static_cast<size_t>(s.k) + 3, ldy = static_cast<size_t>(s.n) + 5;
    const std::vector<float> x = random_vec(static_cast<size_t>(s.t) * ldx, g);
    const Weights w = make_weights(DType::kBF16, static_cast<size_t>(s.n * s.k), g);
    std::vector<uint16_t> packed(w.half.size());
    interleave_rows(DType::kBF16, w.half.data(), packed.data(), s.n, s.k, &pool);
    std::vector<float> packed_f32(w.f32.size());
    interleave_rows(DType::kF32, w.f32.data(), packed_f32.data(), s.n, s.k, &pool);
    std::vector<float> want(static_cast<size_t>(s.t) * ldy, -7.0f);
    for (int64_t t = 0; t < s.t; ++t) {
      for (int64_t n = 0; n < s.n; ++n) {
        float even = 0.0f, odd = 0.0f;
        for (int64_t p = 0; p < s.k / 2; ++p) {
          even = std::fma(x[t * ldx + 2 * p], w.f32[n * s.k + 2 * p], even);
          odd = std::fma(x[t * ldx + 2 * p + 1], w.f32[n * s.k + 2 * p + 1], odd);
        }
        want[t * ldy + n] = even + odd;
      }
    }
    for (CpuIsa isa : available_isas()) {
      for (DType d : {DType::kBF16, DType::kF32}) {
        std::vector<float> y(want.size(), -7.0f);
        const void* wd = d == DType::kBF16 ? static_cast<const void*>(packed.data())
                                           : static_cast<const void*>(packed_f32.data());
        MatmulArgs a{x.data(), ldx, wd, d, y.data(), ldy, s.t, s.k, s.n};
        a.w_layout = WeightLayout::kInterleaved16;
        matmul_with_isa(a, &pool, isa);
        ASSERT_EQ(0, std::memcmp(y.data(), want.data(), y.size() * 4))
            << cpu_isa_name(isa) << " " << dtype_name(d) << " T=" << s.t << " K=" << s.k
            << " N=" << s.n;
      }
    }
    std::vector<float> got(want.size(), -7.0f);
    MatmulArgs a{x.data(), ldx, packed.data(), DType::kBF16, got.data(), ldy, s.t, s.k, s.n};
    a.w_layout = WeightLayout::kInterleaved16;
    a.precision = MatmulPrecision::kBF16;
    matmul(a, &pool);
    // Without the bf16 dot kernel, bf16 activations fall back to f32 ones: the same bits.
    if (!(cpu_isa() == CpuIsa::kAvx512 && cpu_features().avx512_bf16)) {
      ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4)) << "bf16 falls back";
      continue;
    }
    for (int64_t t = 0; t < s.t; ++t) {
      for (int64_t n = 0; n < s.n; ++n) {
        double ref = 0.0, mag = 0.0;
        for (int64_t i = 0; i < s.k; ++i) {
          const double p =
              static_cast<double>(bf16_to_f32(f32_to_bf16(x[t * ldx + i]))) * w.f32[n * s.k + i];
          ref += p;
          mag += std::fabs(p);
        }
        ASSERT_NEAR(got[t * ldy + n], ref, 2e-6 * mag + 1e-30) << t << "," << n;
      }
      std::vector<float> one(static_cast<size_t>(s.n));
      MatmulArgs single = a;
      single.x = x.data() + t * ldx;
      single.t = 1;
      single.y = one.data();
      single.ldy = static_cast<size_t>(s.n);
      matmul(single, nullptr);
      ASSERT_EQ(0, std::memcmp(one.data(), &got[t * ldy], s.n * 4)) << "bf16 row " << t;
    }
  }
}

TEST(Matmul, InterleavedRowsReadBackExactly) {
  std::mt19937 g(22);
  const int64_t n = 32, k = 96;
  const Weights w = make_weights(DType::kBF16, static_cast<size_t>(n * k), g);
  std::vector<uint16_t> packed(w.half.size());
  interleave_rows(DType::kBF16, w.half.data(), packed.data(), n, k, nullptr);
  std::vector<float> packed_f32(w.f32.size());
  interleave_rows(DType::kF32, w.f32.data(), packed_f32.data(), n, k, nullptr);
  std::vector<float> row(static_cast<size_t>(k)), row32(row.size());
  for (int64_t r = 0; r < n; ++r) {
    interleaved_row_to_f32(DType::kBF16, packed.data(), r, k, row.data());
    interleaved_row_to_f32(DType::kF32, packed_f32.data(), r, k, row32.data());
    ASSERT_EQ(0, std::memcmp(row.data(), &w.f32[r * k], k * 4)) << "row " << r;
    ASSERT_EQ(0, std::memcmp(row32.data(), &w.f32[r * k], k * 4)) << "f32 row " << r;
  }
  EXPECT_EQ(packed_f32[16 * k + (64 * 7 + 4 * 5) / 4], w.f32[21 * k + 7]);
  // Line 3 of group 1 holds elements 6 and 7 of rows 16..31; row 21 at byte 4 * 5.
  EXPECT_EQ(packed[16 * k + (64 * 3 + 4 * 5) / 2], w.half[21 * k + 6]);
  EXPECT_EQ(packed[16 * k + (64 * 3 + 4 * 5) / 2 + 1], w.half[21 * k + 7]);
}

TEST(Matmul, RejectsQuantizedAndOtherDtypes) {
  float x = 1.0f, y = 0.0f;
  const int32_t w = 1;
  EXPECT_THROW(matmul({&x, 1, &w, DType::kI32, &y, 1, 1, 1, 1}, nullptr), InputError);
}

TEST(ThreadPool, ExceptionInCallerChunkWaitsForWorkersAndRethrows) {
  ThreadPool pool(2);
  std::vector<int> seen(100, 0);
  EXPECT_THROW(pool.parallel_for(100,
                                 [&](size_t b, size_t e) {
                                   for (size_t i = b; i < e; ++i) seen[i] = 1;
                                   if (b == 0) throw InputError("boom");
                                 }),
               InputError);
  for (int v : seen) EXPECT_EQ(v, 1);
  int total = 0;
  pool.parallel_for(10, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) __atomic_add_fetch(&total, 1, __ATOMIC_RELAXED);
  });
  EXPECT_EQ(total, 10);
}

nlohmann::json run_json(const std::string& args, const std::string& env = "") {
  const auto r = testing::run_command(env + " " + testing::cli_binary().string() + " " + args);
  EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.out;
  const size_t brace = r.out.find('{');
  EXPECT_NE(brace, std::string::npos) << r.out;
  if (brace == std::string::npos) return {};
  return nlohmann::json::parse(r.out.substr(brace));
}

// bench quant-kernel's layout options: each bad value names itself (exit 2), a good run says
// which layout it timed.
TEST(BenchCli, QuantKernelLayoutAndCopies) {
  const std::string bin = testing::cli_binary().string() + " bench quant-kernel ";
  const struct {
    std::string args, error;
  } bad[] = {
      {"--layout diagonal",
       "bench quant-kernel: --layout: unknown layout 'diagonal' (expected "
       "rows or interleaved)"},
      {"--copies 0", "bench quant-kernel: --copies must be positive"},
      {"--ahead 12k",
       "bench quant-kernel: --ahead: '12k' is not an integer (expected a list like 2,45,67)"},
      {"--ahead 0,,1",
       "bench quant-kernel: --ahead: '' is not an integer (expected a list like 2,45,67)"},
      {"--ahead cpu,-5", "bench quant-kernel: --ahead: -5 bytes is negative"},
      {"--type q4_k --k 256 --n 24 --layout interleaved",
       "bench quant-kernel: --layout interleaved: needs N a multiple of 16 and K a multiple of 32 "
       "(256 for q4_k)"},
  };
  for (const auto& b : bad) {
    const auto r = testing::run_command(bin + b.args + " 2>&1");
    EXPECT_EQ(r.exit_code, 2) << b.args;
    EXPECT_NE(r.out.find(b.error), std::string::npos) << b.args << "\n" << r.out;
  }
  const auto r = testing::run_command(
      bin + "--type q8_0 --k 64 --n 32 --t 2 --copies 3 --iters 3 --layout rows 2>&1");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("type q8_0 isa "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" layout rows threads "), std::string::npos) << r.out;
  // --ahead: one line per distance, in the order given, each the median of alternating sweeps.
  const auto ab = testing::run_command(
      bin + "--type q4_0 --k 64 --n 32 --t 1 --copies 2 --iters 2 --ahead cpu,0,4096 2>&1");
  EXPECT_EQ(ab.exit_code, 0) << ab.out;
  const size_t cpu_line = ab.out.find(" ahead cpu: "), zero = ab.out.find(" ahead 0: "),
               bytes = ab.out.find(" ahead 4096: ");
  ASSERT_NE(cpu_line, std::string::npos) << ab.out;
  ASSERT_NE(zero, std::string::npos) << ab.out;
  ASSERT_NE(bytes, std::string::npos) << ab.out;
  EXPECT_LT(cpu_line, zero);
  EXPECT_LT(zero, bytes);
  EXPECT_NE(ab.out.find("(median of 5 sweeps, alternating)"), std::string::npos) << ab.out;
}

TEST(BenchCli, MembwJson) {
  const nlohmann::json j = run_json("bench membw --threads 2 --size-mib 8 --json");
  EXPECT_EQ(j.at("threads").get<int>(), 2);
  EXPECT_GT(j.at("membw_bytes_per_s").get<double>(), 0.0);
}

TEST(BenchCli, PeakJson) {
  const nlohmann::json j = run_json("bench peak --threads 1 --json");
  EXPECT_EQ(j.at("threads").get<int>(), 1);
  EXPECT_EQ(j.at("f32_fma_flops").get<double>() > 0, cpu_supports(CpuIsa::kAvx2));
  for (const char* key : {"bf16_dot_flops", "int8_dot_ops"}) EXPECT_TRUE(j.contains(key)) << key;
}

// A forced level the CPU lacks becomes the highest level below it that it has, with a warning
// naming both (an AVX-512 CPU without AVX-VNNI asked for avxvnni runs avx2, not avx512).
TEST(CpuFeatures, ForcedLevelFallsToTheHighestSupportedBelowIt) {
  const auto r = testing::run_command(
      "GEMMASERVE_CPU_ISA=avxvnni " + testing::cli_binary().string() +
      " bench matmul --t 1 --k 64 --n 32 --iters 2 --stream-mib 1 --threads 1 --json 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const std::string want = cpu_supports(CpuIsa::kAvxVnni) ? "avxvnni"
                           : cpu_supports(CpuIsa::kAvx2)  ? "avx2"
                                                          : "portable";
  const nlohmann::json j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  EXPECT_EQ(j.at("isa").get<std::string>(), want);
  if (!cpu_supports(CpuIsa::kAvxVnni)) {
    EXPECT_NE(r.out.find("GEMMASERVE_CPU_ISA=avxvnni is not supported by this CPU; using " + want),
              std::string::npos)
        << r.out;
  }
}

TEST(BenchCli, MatmulJsonHonoursIsaOverride) {
  const nlohmann::json j =
      run_json("bench matmul --t 3 --k 64 --n 32 --iters 2 --stream-mib 1 --threads 2 --json",
               "GEMMASERVE_CPU_ISA=portable");
  EXPECT_EQ(j.at("isa").get<std::string>(), "portable");
  EXPECT_GT(j.at("gflop_per_s").get<double>(), 0.0);
}

// bench attention: a small pass reports its rates against the plain read of the same rows;
// bad shapes name themselves (exit 2).
TEST(BenchCli, AttentionJsonAndErrors) {
  const nlohmann::json j = run_json(
      "bench attention --head-dim 64 --heads 4 --kv-heads 2 --context 40 --window 16 --seqs 3 "
      "--layers 2 --kv-cache-dtype q8_0 --iters 2 --threads 2 --json");
  EXPECT_EQ(j.at("kv_dtype").get<std::string>(), "q8_0");
  EXPECT_EQ(j.at("threads").get<int>(), 2);
  for (const char* key : {"median_s", "kv_gb_per_s", "read_gb_per_s", "gflop_per_s"}) {
    EXPECT_GT(j.at(key).get<double>(), 0.0) << key;
  }
  const std::string bin = testing::cli_binary().string() + " bench attention ";
  const struct {
    std::string args, error;
  } bad[] = {
      {"--heads 8 --kv-heads 3", "error: --heads (8) must be a multiple of --kv-heads (3)"},
      {"--window -1", "error: --window must be >= 0, got -1"},
      {"--layers 0", "error: --layers must be positive, got 0"},
      {"--kv-cache-dtype fp4", "error: --kv-cache-dtype: 'fp4' is not supported"},
  };
  for (const auto& b : bad) {
    const auto r = testing::run_command(bin + b.args + " 2>&1");
    EXPECT_EQ(r.exit_code, 2) << b.args;
    EXPECT_NE(r.out.find(b.error), std::string::npos) << b.args << "\n" << r.out;
  }
}

// Every bench command that takes --threads (0 = all cores) refuses a negative count by name.
TEST(BenchCli, NegativeCountsAreRefused) {
  const std::string bin = testing::cli_binary().string() + " bench ";
  for (const char* cmd : {"membw", "peak", "matmul", "attention", "quant-kernel"}) {
    const auto r = testing::run_command(bin + cmd + " --threads -1 2>&1");
    EXPECT_EQ(r.exit_code, 2) << cmd << "\n" << r.out;
    EXPECT_NE(r.out.find("--threads must be >= 0, got -1"), std::string::npos) << cmd << "\n"
                                                                               << r.out;
  }
  const auto r = testing::run_command(bin + "latency /nonexistent --num-iters-warmup -2 2>&1");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("error: --num-iters-warmup must be >= 0, got -2"), std::string::npos)
      << r.out;
}

TEST(BenchCli, LatencyJsonHasPrefillDecodeAndRoofline) {
  testing::TempDir tmp;
  const auto made = testing::run_command(testing::cli_binary().string() +
                                         " make-test-model --preset tiny --out " +
                                         (tmp.path() / "m").string() + " 2>&1");
  ASSERT_EQ(made.exit_code, 0) << made.out;
  const nlohmann::json j =
      run_json("bench latency " + (tmp.path() / "m").string() +
               " --input-len 8 --output-len 4 --batch-size 2 --repeat 2 --num-iters-warmup 0"
               " --membw-size-mib 8 --threads 2 --json 2>/dev/null");
  for (const char* key : {"pp_tokens_per_s", "tg_tokens_per_s", "membw_bytes_per_s",
                          "roofline_tokens_per_s", "roofline_fraction", "avg_latency",
                          "prefill_flops", "prefill_flops_per_s", "peak_f32_fma_flops"}) {
    ASSERT_TRUE(j.contains(key)) << key << " in " << j.dump();
    EXPECT_GT(j.at(key).get<double>(), 0.0) << key;
  }
  EXPECT_GT(j.at("weight_bytes_per_token").get<uint64_t>(), 0u);
  EXPECT_EQ(j.at("latencies").size(), 2u);
  EXPECT_EQ(j.at("membw_between_runs_bytes_per_s").size(), 3u);  // before, between, after
}

}  // namespace
}  // namespace gemmaserve::cpu
