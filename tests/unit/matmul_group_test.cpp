// matmul_group (several weight matrices applied to one X in one parallel section): every part's
// output is bitwise what a separate matmul() call gives, for every weight dtype and precision,
// with part sizes that cut across the threads' 16-row chunks; mismatched parts are refused. A
// decode product's rows are shared out once each, a thread that finishes taking another's tail.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/matmul_kernels.h"
#include "kernels/cpu/quant.h"

namespace gemmaserve::cpu {
namespace {

std::vector<std::byte> make_matrix(DType dtype, int64_t rows, int64_t cols, std::mt19937& g) {
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> f(static_cast<size_t>(rows * cols));
  for (float& v : f) v = d(g);
  const size_t row_bytes = dtype_row_bytes(dtype, cols);
  std::vector<std::byte> out(row_bytes * static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    const float* src = f.data() + r * cols;
    std::byte* dst = out.data() + static_cast<size_t>(r) * row_bytes;
    if (dtype_is_quantized(dtype)) {
      quantize_row(dtype, src, dst, cols);
    } else if (dtype == DType::kF32) {
      std::memcpy(dst, src, row_bytes);
    } else {
      for (int64_t i = 0; i < cols; ++i) {
        const uint16_t h = dtype == DType::kBF16 ? f32_to_bf16(src[i]) : f32_to_f16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
    }
  }
  return out;
}

struct Case {
  DType dtype;
  MatmulPrecision precision;
};

TEST(MatmulGroup, EveryPartBitwiseEqualToItsOwnCall) {
  std::mt19937 g(7);
  ThreadPool pool(2);
  const std::vector<Case> cases = {
      {DType::kF32, MatmulPrecision::kF32},  {DType::kF16, MatmulPrecision::kF32},
      {DType::kBF16, MatmulPrecision::kF32}, {DType::kBF16, MatmulPrecision::kBF16},
      {DType::kQ8_0, MatmulPrecision::kF32}, {DType::kQ4_0, MatmulPrecision::kF32},
      {DType::kQ4_K, MatmulPrecision::kF32}};
  const int64_t k = 512;
  const std::vector<int64_t> sizes = {37, 16, 3, 200};
  for (const Case& c : cases) {
    for (int64_t t : {1, 5, 12}) {
      SCOPED_TRACE(std::string(dtype_name(c.dtype)) + " T=" + std::to_string(t) +
                   (c.precision == MatmulPrecision::kBF16 ? " bf16 activations" : ""));
      std::uniform_real_distribution<float> d(-1.0f, 1.0f);
      const size_t ldx = static_cast<size_t>(k) + 3;
      std::vector<float> x(static_cast<size_t>(t) * ldx);
      for (float& v : x) v = d(g);
      std::vector<std::vector<std::byte>> w;
      std::vector<std::vector<float>> grouped, alone;
      std::vector<MatmulArgs> parts;
      for (int64_t n : sizes) {
        w.push_back(make_matrix(c.dtype, n, k, g));
        grouped.emplace_back(static_cast<size_t>(t * (n + 2)), -9.0f);
        alone.emplace_back(static_cast<size_t>(t * (n + 2)), -9.0f);
      }
      for (size_t i = 0; i < sizes.size(); ++i) {
        MatmulArgs a{x.data(),
                     ldx,
                     w[i].data(),
                     c.dtype,
                     grouped[i].data(),
                     static_cast<size_t>(sizes[i] + 2),
                     t,
                     k,
                     sizes[i],
                     c.precision};
        parts.push_back(a);
        a.y = alone[i].data();
        matmul(a, &pool);
      }
      matmul_group(parts, &pool);
      for (size_t i = 0; i < sizes.size(); ++i) {
        ASSERT_EQ(0, std::memcmp(grouped[i].data(), alone[i].data(), grouped[i].size() * 4))
            << "part " << i;
        // The two padding columns of every row are untouched.
        for (int64_t r = 0; r < t; ++r) {
          EXPECT_EQ(grouped[i][static_cast<size_t>(r * (sizes[i] + 2) + sizes[i])], -9.0f);
        }
      }
    }
  }
}

// Two parts of 512 rows (64 units of 16 rows, 32 per thread). The thread that claims unit 0
// (with units 1-15: half of its share) is held there until 48 units are done elsewhere, which
// happens only if the other thread, after its own 32, takes units 16-31 from the back of the
// held share. The other thread starts only once unit 0 is claimed, so it cannot take it first.
TEST(MatmulGroup, DecodeRowsAreSharedOutOnceAndAFreeThreadTakesAnothersTail) {
  ThreadPool pool(2);
  MatmulArgs a;
  a.t = 1;
  a.k = 256;
  a.n = 512;
  const MatmulArgs parts[2] = {a, a};
  std::vector<std::atomic<int>> runs(64);
  std::vector<std::thread::id> runner(64);
  std::atomic<bool> zero_claimed{false};
  std::atomic<int> done_elsewhere{0};
  bool released = false;
  const auto wait_until = [](auto&& ready) {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!ready() && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
    return ready();
  };
  detail::parallel_over_parts(parts, &pool, [&](size_t part, int64_t b, int64_t e) {
    const int64_t first = static_cast<int64_t>(part) * 32 + b / 16;
    if (first == 0) {
      zero_claimed.store(true);
      released = wait_until([&] { return done_elsewhere.load() >= 48; });
    } else {
      wait_until([&] { return zero_claimed.load(); });
    }
    for (int64_t u = first; u < first + (e - b) / 16; ++u) {
      runs[static_cast<size_t>(u)].fetch_add(1);
      runner[static_cast<size_t>(u)] = std::this_thread::get_id();
    }
    if (first != 0) done_elsewhere.fetch_add(static_cast<int>((e - b) / 16));
  });
  EXPECT_TRUE(released);
  for (size_t u = 0; u < 64; ++u) EXPECT_EQ(runs[u].load(), 1) << "unit " << u;
  for (size_t u = 16; u < 32; ++u) EXPECT_NE(runner[u], runner[0]) << "unit " << u;
}

TEST(MatmulGroup, RefusesPartsThatDoNotShareX) {
  std::vector<float> x(64, 1.0f), y(8);
  std::vector<float> w(64, 1.0f);
  MatmulArgs a{x.data(), 32, w.data(), DType::kF32, y.data(), 1, 2, 32, 1};
  MatmulArgs b = a;
  b.k = 16;
  // Parts that gather X differently (act-order modules' column orders) cannot share it either.
  MatmulArgs c = a;
  const std::vector<int32_t> perm(32, 0);
  c.x_perm = perm.data();
  for (const MatmulArgs& other : {b, c}) {
    const std::vector<MatmulArgs> parts = {a, other};
    try {
      matmul_group(parts, nullptr);
      FAIL() << "no error";
    } catch (const InputError& e) {
      EXPECT_STREQ(e.what(),
                   "matmul_group: every part must share x, ldx, t, k, w_dtype, w_layout, "
                   "precision and x_perm");
    }
  }
  matmul_group({}, nullptr);  // nothing to do, no error
}

}  // namespace
}  // namespace gemmaserve::cpu
