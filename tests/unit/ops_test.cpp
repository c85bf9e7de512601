// Element-wise ops at every supported SIMD level against double-precision references; results
// that must not depend on where a value sits in a call (batch invariance).
#include "kernels/cpu/ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace gemmaserve::cpu {
namespace {

std::vector<float> random_values(size_t n, float lo, float hi, std::mt19937& g) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

// |got - want| in units of float spacing at want (at least FLT_MIN's).
double ulps(float got, double want) {
  // ilogb(0) is INT_MIN: zero takes the smallest normal exponent instead.
  const int e = static_cast<float>(want) == 0.0f ? -126 : std::ilogb(static_cast<float>(want));
  const double spacing = std::max(std::ldexp(1.0, e - 23), 1.1754943508222875e-38);
  return std::fabs(static_cast<double>(got) - want) / spacing;
}

TEST(Ops, RmsNormMatchesReferenceAtEveryLevel) {
  std::mt19937 g(1);
  for (int64_t n : {1, 7, 16, 33, 256, 512, 1536, 2819}) {
    const std::vector<float> x = random_values(static_cast<size_t>(n), -3.0f, 3.0f, g);
    const std::vector<float> w = random_values(static_cast<size_t>(n), 0.5f, 1.5f, g);
    double sq = 0;
    for (float v : x) sq += static_cast<double>(v) * v;
    const double inv = 1.0 / std::sqrt(sq / static_cast<double>(n) + 1e-6);
    for (SimdIsa isa : supported_simd_isas()) {
      const ElementwiseKernels& k = elementwise_kernels(isa);
      std::vector<float> y(x.size()), y_noweight(x.size());
      k.rms_norm(x.data(), w.data(), y.data(), n, 1e-6f);
      k.rms_norm(x.data(), nullptr, y_noweight.data(), n, 1e-6f);
      for (size_t i = 0; i < x.size(); ++i) {
        EXPECT_LE(ulps(y[i], x[i] * inv * w[i]), 4.0) << simd_isa_name(isa) << " n " << n;
        EXPECT_LE(ulps(y_noweight[i], x[i] * inv), 3.0) << simd_isa_name(isa) << " n " << n;
      }
      // In place gives the same bits.
      std::vector<float> z = x;
      k.rms_norm(z.data(), w.data(), z.data(), n, 1e-6f);
      EXPECT_EQ(0, std::memcmp(z.data(), y.data(), y.size() * sizeof(float)));
    }
  }
}

TEST(Ops, RopeMatchesPortableAtEveryLevel) {
  std::mt19937 g(2);
  for (int hd : {16, 40, 256, 512}) {
    for (int pairs : {hd / 2, hd / 8, 3}) {
      const std::vector<float> x = random_values(static_cast<size_t>(hd), -2.0f, 2.0f, g);
      std::vector<float> inv(static_cast<size_t>(hd / 2)), c(inv.size()), s(inv.size());
      rope_inv_freq(hd, 10000.0, pairs, 1.0, inv.data());
      rope_cos_sin(1234, inv.data(), hd / 2, c.data(), s.data());
      std::vector<float> want = x;
      elementwise_kernels(SimdIsa::kPortable)
          .apply_rope(want.data(), hd, c.data(), s.data(), pairs);
      for (SimdIsa isa : supported_simd_isas()) {
        std::vector<float> got = x;
        elementwise_kernels(isa).apply_rope(got.data(), hd, c.data(), s.data(), pairs);
        // Vector code may fuse a*c - b*s into one FMA: within a rounding of the operands.
        for (int i = 0; i < hd; ++i) {
          EXPECT_NEAR(got[static_cast<size_t>(i)], want[static_cast<size_t>(i)], 5e-7f)
              << simd_isa_name(isa) << " hd " << hd << " pairs " << pairs << " i " << i;
        }
        // Slots past rotated_pairs stay untouched.
        for (int i = pairs; i < hd / 2; ++i) {
          EXPECT_EQ(got[static_cast<size_t>(i)], x[static_cast<size_t>(i)]);
          EXPECT_EQ(got[static_cast<size_t>(i + hd / 2)], x[static_cast<size_t>(i + hd / 2)]);
        }
      }
    }
  }
}

double gelu_tanh_ref(double x) {
  const double inner = 0.7978845608028654 * (x + 0.044715 * x * x * x);
  return 0.5 * x * (1.0 + std::tanh(inner));
}

TEST(Ops, GeluTanhMulIsAccurateAndPositionIndependent) {
  std::mt19937 g(3);
  const int64_t n = 1000;
  std::vector<float> gate = random_values(static_cast<size_t>(n), -8.0f, 8.0f, g);
  gate[0] = 0.0f;
  gate[1] = 1e-4f;
  gate[2] = -20.0f;
  gate[3] = 12.0f;
  const std::vector<float> up = random_values(static_cast<size_t>(n), -2.0f, 2.0f, g);
  for (SimdIsa isa : supported_simd_isas()) {
    const ElementwiseKernels& k = elementwise_kernels(isa);
    std::vector<float> out(gate.size());
    k.gelu_tanh_mul(gate.data(), up.data(), out.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const double want = gelu_tanh_ref(gate[i]) * up[i];
      // Absolute error scaled to the operands: tanh's error is absolute near |x| ~ 1.
      EXPECT_NEAR(out[i], want, 4e-7 * (std::fabs(gate[i]) + 1e-3) * std::fabs(up[i]) + 1e-30)
          << simd_isa_name(isa) << " x " << gate[i];
    }
    // Any sub-range (odd offsets and lengths) gives each element the same bits.
    for (int64_t off : {1, 5, 13}) {
      std::vector<float> part(static_cast<size_t>(n - off - 3));
      k.gelu_tanh_mul(&gate[off], &up[off], part.data(), static_cast<int64_t>(part.size()));
      EXPECT_EQ(0, std::memcmp(part.data(), &out[off], part.size() * sizeof(float)))
          << simd_isa_name(isa) << " offset " << off;
    }
  }
}

TEST(Ops, SoftCapIsAccurateAndPositionIndependent) {
  std::mt19937 g(4);
  const int64_t n = 777;
  std::vector<float> x = random_values(static_cast<size_t>(n), -200.0f, 200.0f, g);
  for (int i = 0; i < 40; ++i) x[static_cast<size_t>(i)] = static_cast<float>(i - 20) * 1e-3f;
  for (SimdIsa isa : supported_simd_isas()) {
    const ElementwiseKernels& k = elementwise_kernels(isa);
    std::vector<float> y = x;
    k.soft_cap(y.data(), n, 30.0f);
    for (int64_t i = 0; i < n; ++i) {
      const double want = 30.0 * std::tanh(static_cast<double>(x[i] / 30.0f));
      EXPECT_LE(ulps(y[i], want), 4.0) << simd_isa_name(isa) << " x " << x[i];
    }
    std::vector<float> part(x.begin() + 3, x.end() - 2);
    k.soft_cap(part.data(), static_cast<int64_t>(part.size()), 30.0f);
    EXPECT_EQ(0, std::memcmp(part.data(), &y[3], part.size() * sizeof(float)));
  }
}

TEST(Ops, SoftmaxMatchesReference) {
  std::mt19937 g(5);
  for (int64_t n : {1, 3, 8, 17, 128, 1000}) {
    std::vector<float> x = random_values(static_cast<size_t>(n), -30.0f, 10.0f, g);
    if (n > 4) x[2] = -std::numeric_limits<float>::infinity();
    double mx = -1e300;
    for (float v : x) mx = std::max(mx, static_cast<double>(v));
    double sum = 0;
    for (float v : x) sum += std::exp(static_cast<double>(v) - mx);
    for (SimdIsa isa : supported_simd_isas()) {
      std::vector<float> y = x;
      elementwise_kernels(isa).softmax(y.data(), n);
      double total = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double want = std::exp(static_cast<double>(x[i]) - mx) / sum;
        // exp's argument x - max carries a rounding of |x - max| * 2^-24.
        const double tol =
            std::isinf(x[i]) ? 0.0 : want * (4e-7 + std::fabs(x[i] - mx) * 1.2e-7) + 1e-37;
        EXPECT_NEAR(y[i], want, tol) << simd_isa_name(isa) << " n " << n;
        total += y[i];
      }
      EXPECT_NEAR(total, 1.0, 1e-5);
    }
  }
}

TEST(Ops, ExpScaledMatchesReferenceAtEveryLevel) {
  std::mt19937 g(8);
  for (int64_t n : {1, 3, 16, 17, 1000}) {
    std::vector<float> x = random_values(static_cast<size_t>(n), -60.0f, 10.0f, g);
    if (n > 2) x[1] = -std::numeric_limits<float>::infinity();
    for (SimdIsa isa : supported_simd_isas()) {
      std::vector<float> y(static_cast<size_t>(n), std::nanf(""));
      elementwise_kernels(isa).exp_scaled(x.data(), y.data(), n, 10.0f, 1.25f);
      for (int64_t i = 0; i < n; ++i) {
        if (std::isinf(x[i])) {
          EXPECT_EQ(y[i], 0.0f) << simd_isa_name(isa);
          continue;
        }
        const double arg = (static_cast<double>(x[i]) - 10.0) * 1.25;
        const double want = std::exp(arg);
        // The argument is rounded twice in float (difference, product): |arg| * 2^-23.
        const double tol = want * (4e-7 + std::fabs(arg) * 1.2e-7) + 1.2e-38;
        EXPECT_NEAR(y[i], want, tol) << simd_isa_name(isa) << " x " << x[i];
      }
      if (n > 5) {
        std::vector<float> part(static_cast<size_t>(n - 4));
        elementwise_kernels(isa).exp_scaled(&x[3], part.data(), n - 4, 10.0f, 1.25f);
        EXPECT_EQ(0, std::memcmp(part.data(), &y[3], part.size() * sizeof(float)))
            << simd_isa_name(isa);
      }
    }
  }
}

// The free functions use the widest level.
TEST(Ops, FreeFunctionsDispatchToTheBestLevel) {
  std::mt19937 g(6);
  std::vector<float> x = random_values(300, -5.0f, 5.0f, g);
  std::vector<float> a = x, b = x;
  soft_cap(a.data(), 300, 30.0f);
  elementwise_kernels(best_simd_isa()).soft_cap(b.data(), 300, 30.0f);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
  std::vector<float> y1(300), y2(300);
  rms_norm_rows(x.data(), 100, nullptr, y1.data(), 100, 3, 100, 1e-6f);
  for (int r = 0; r < 3; ++r) {
    elementwise_kernels(best_simd_isa())
        .rms_norm(&x[static_cast<size_t>(r) * 100], nullptr, &y2[static_cast<size_t>(r) * 100], 100,
                  1e-6f);
  }
  EXPECT_EQ(0, std::memcmp(y1.data(), y2.data(), y1.size() * sizeof(float)));
}

}  // namespace
}  // namespace gemmaserve::cpu
