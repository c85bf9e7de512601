// Quantized weight formats and the quantized matmul: round-trip error, exact block layouts,
// every ISA path against the portable one (bitwise), batch invariance, float reference.
#include "kernels/cpu/quant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/quant_matmul.h"

namespace gemmaserve::cpu {
namespace {

constexpr DType kTypes[] = {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K};

std::vector<float> random_values(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<std::byte> quantize_matrix(DType dtype, const std::vector<float>& w, int64_t rows,
                                       int64_t cols) {
  const size_t row_bytes = dtype_row_bytes(dtype, cols);
  std::vector<std::byte> out(row_bytes * rows);
  for (int64_t r = 0; r < rows; ++r) {
    quantize_row(dtype, w.data() + r * cols, out.data() + r * row_bytes, cols);
  }
  return out;
}

double relative_rms_error(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * double(a[i] - b[i]);
    den += double(a[i]) * a[i];
  }
  return std::sqrt(num / den);
}

TEST(QuantFormat, RoundTripErrorBounds) {
  const int64_t n = 4096;
  const std::vector<float> x = random_values(n, 1);
  const double bound[] = {0.006, 0.1, 0.08};  // measured: 0.0054, 0.0875, 0.0713
  for (int i = 0; i < 3; ++i) {
    const DType t = kTypes[i];
    std::vector<std::byte> q(dtype_row_bytes(t, n));
    quantize_row(t, x.data(), q.data(), n);
    std::vector<float> back(n);
    dequantize_row(t, q.data(), back.data(), n);
    const double err = relative_rms_error(x, back);
    std::printf("%s relative rms error %.4f\n", dtype_name(t), err);
    EXPECT_LT(err, bound[i]) << dtype_name(t);
    // to_f32 dequantizes too (embedding gathers).
    std::vector<float> via_convert(n);
    to_f32(t, q.data(), via_convert.data(), n);
    EXPECT_EQ(back, via_convert) << dtype_name(t);
  }
}

TEST(QuantFormat, Q8_0PerElementBound) {
  const std::vector<float> x = random_values(32 * 64, 2, 3.0f);
  std::vector<std::byte> q(dtype_row_bytes(DType::kQ8_0, x.size()));
  quantize_row(DType::kQ8_0, x.data(), q.data(), static_cast<int64_t>(x.size()));
  std::vector<float> back(x.size());
  dequantize_row(DType::kQ8_0, q.data(), back.data(), static_cast<int64_t>(x.size()));
  for (size_t b = 0; b < x.size() / 32; ++b) {
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[b * 32 + i]));
    for (int i = 0; i < 32; ++i) {
      EXPECT_LE(std::fabs(x[b * 32 + i] - back[b * 32 + i]), amax / 127 * 0.502f);
    }
  }
}

TEST(QuantFormat, Q8_0Layout) {
  std::vector<float> x(32);
  for (int i = 0; i < 32; ++i) x[i] = static_cast<float>(i - 16) * 0.5f;  // amax 8 -> d = 8/127
  std::vector<std::byte> q(34);
  quantize_row(DType::kQ8_0, x.data(), q.data(), 32);
  uint16_t h;
  std::memcpy(&h, q.data(), 2);
  EXPECT_EQ(h, f32_to_f16(8.0f / 127.0f));
  EXPECT_EQ(static_cast<int8_t>(q[2]), -127);      // x[0] = -8
  EXPECT_EQ(static_cast<int8_t>(q[2 + 16]), 0);    // x[16] = 0
  EXPECT_EQ(static_cast<int8_t>(q[2 + 31]), 119);  // 7.5 / (8/127) = 119.06
}

TEST(QuantFormat, Q4_0Layout) {
  std::vector<std::byte> block(18);
  const uint16_t d = f32_to_f16(0.5f);
  std::memcpy(block.data(), &d, 2);
  for (int i = 0; i < 16; ++i) block[2 + i] = static_cast<std::byte>(i | ((15 - i) << 4));
  std::vector<float> v(32);
  dequantize_row(DType::kQ4_0, block.data(), v.data(), 32);
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(v[i], 0.5f * (i - 8)) << i;       // low nibble: element i
    EXPECT_EQ(v[i + 16], 0.5f * (7 - i)) << i;  // high nibble: element i + 16
  }
  // Quantizing: the largest-magnitude value maps to -8 (d = vmax / -8).
  std::vector<float> x(32, 0.0f);
  x[3] = -4.0f;
  x[20] = 1.0f;
  std::vector<std::byte> q(18);
  quantize_row(DType::kQ4_0, x.data(), q.data(), 32);
  uint16_t h;
  std::memcpy(&h, q.data(), 2);
  EXPECT_EQ(f16_to_f32(h), 0.5f);
  EXPECT_EQ(static_cast<int>(q[2 + 3]) & 15, 0);   // -4 / 0.5 + 8
  EXPECT_EQ(static_cast<int>(q[2 + 4]) >> 4, 10);  // x[20] = 1 -> 2 + 8
}

TEST(QuantFormat, Q4_KLayout) {
  std::vector<std::byte> block(144, std::byte{0});
  const uint16_t d = f32_to_f16(0.25f), dmin = f32_to_f16(0.125f);
  std::memcpy(block.data(), &d, 2);
  std::memcpy(block.data() + 2, &dmin, 2);
  const uint8_t sc[8] = {1, 2, 3, 63, 17, 33, 48, 5};
  const uint8_t mn[8] = {0, 7, 63, 1, 20, 40, 60, 9};
  auto* packed = reinterpret_cast<uint8_t*>(block.data() + 4);
  for (int s = 0; s < 4; ++s) {
    packed[s] = static_cast<uint8_t>(sc[s] | ((sc[s + 4] >> 4) << 6));
    packed[s + 4] = static_cast<uint8_t>(mn[s] | ((mn[s + 4] >> 4) << 6));
    packed[s + 8] = static_cast<uint8_t>((sc[s + 4] & 15) | ((mn[s + 4] & 15) << 4));
  }
  for (int s = 0; s < 8; ++s) {
    uint8_t a, b;
    q4k_scale_min(packed, s, &a, &b);
    EXPECT_EQ(a, sc[s]) << s;
    EXPECT_EQ(b, mn[s]) << s;
  }
  auto* qs = reinterpret_cast<uint8_t*>(block.data() + 16);
  for (int i = 0; i < 128; ++i) qs[i] = static_cast<uint8_t>((i % 16) | ((15 - i % 16) << 4));
  std::vector<float> v(256);
  dequantize_row(DType::kQ4_K, block.data(), v.data(), 256);
  for (int s = 0; s < 8; ++s) {
    for (int l = 0; l < 32; ++l) {
      const int byte = 32 * (s / 2) + l;
      const int q = s % 2 == 0 ? byte % 16 : 15 - byte % 16;
      EXPECT_EQ(v[32 * s + l], 0.25f * sc[s] * q - 0.125f * mn[s]) << s << " " << l;
    }
  }
}

TEST(QuantFormat, RejectsPartialBlocks) {
  std::vector<float> x(48);
  std::vector<std::byte> q(256);
  EXPECT_THROW(quantize_row(DType::kQ8_0, x.data(), q.data(), 48), InputError);
  EXPECT_THROW(quantize_row(DType::kQ4_K, x.data(), q.data(), 32), InputError);
  EXPECT_THROW(parse_quantization_type("q5_k", "--type"), InputError);
  EXPECT_EQ(parse_quantization_type("Q4_K", "--type"), DType::kQ4_K);
}

struct Problem {
  DType dtype;
  int64_t t, n, k;
};

std::vector<float> run(const Problem& p, const std::vector<std::byte>& w,
                       const std::vector<float>& x, ThreadPool* pool, QuantIsa isa, int64_t ldx) {
  std::vector<float> y(p.t * (p.n + 3), -1.0f);
  MatmulArgs a;
  a.x = x.data();
  a.ldx = ldx;
  a.w = w.data();
  a.w_dtype = p.dtype;
  a.y = y.data();
  a.ldy = p.n + 3;
  a.t = p.t;
  a.k = p.k;
  a.n = p.n;
  quant_matmul_isa(a, pool, isa);
  return y;
}

std::vector<Problem> problems() {
  std::vector<Problem> out;
  for (DType d : kTypes) {
    for (int64_t k : {256, 512, 1536, 2560}) {
      out.push_back({d, 1, 13, k});
      out.push_back({d, 5, 33, k});
      out.push_back({d, 8, 7, k});
    }
  }
  for (DType d : {DType::kQ8_0, DType::kQ4_0}) {
    out.push_back({d, 3, 9, 96});   // odd block count
    out.push_back({d, 1, 17, 96});  // odd block count through the 8-row decode tiles
    out.push_back({d, 7, 5, 32});
  }
  return out;
}

TEST(QuantMatmul, EveryIsaMatchesPortableBitwise) {
  ThreadPool pool(2);
  for (QuantIsa isa : {QuantIsa::kAvx2, QuantIsa::kAvx512Vnni}) {
    if (!quant_isa_supported(isa)) {
      std::printf("skipping %s: not supported here\n", quant_isa_name(isa));
      continue;
    }
    uint32_t seed = 10;
    for (const Problem& p : problems()) {
      const int64_t ldx = p.k + 5;
      const auto w = quantize_matrix(p.dtype, random_values(p.n * p.k, seed++), p.n, p.k);
      const auto x = random_values(p.t * ldx, seed++);
      const auto ref = run(p, w, x, nullptr, QuantIsa::kPortable, ldx);
      const auto got = run(p, w, x, &pool, isa, ldx);
      ASSERT_EQ(std::memcmp(ref.data(), got.data(), ref.size() * 4), 0)
          << quant_isa_name(isa) << " " << dtype_name(p.dtype) << " T=" << p.t << " N=" << p.n
          << " K=" << p.k;
    }
  }
}

TEST(QuantMatmul, CloseToFloatReference) {
  uint32_t seed = 100;
  for (DType d : kTypes) {
    const Problem p{d, 4, 24, 1536};
    const auto wf = random_values(p.n * p.k, seed++);
    const auto w = quantize_matrix(d, wf, p.n, p.k);
    const auto x = random_values(p.t * p.k, seed++);
    std::vector<float> wdq(wf.size());
    for (int64_t r = 0; r < p.n; ++r) {
      dequantize_row(d, w.data() + r * dtype_row_bytes(d, p.k), wdq.data() + r * p.k, p.k);
    }
    const auto y = run(p, w, x, nullptr, quant_best_isa(), p.k);
    double num = 0, den = 0;
    for (int64_t t = 0; t < p.t; ++t) {
      for (int64_t n = 0; n < p.n; ++n) {
        double ref = 0;
        for (int64_t i = 0; i < p.k; ++i) ref += double(x[t * p.k + i]) * wdq[n * p.k + i];
        const double diff = y[t * (p.n + 3) + n] - ref;
        num += diff * diff;
        den += ref * ref;
      }
    }
    // Only the int8 activation rounding separates the two (about 0.5/127 per element).
    EXPECT_LT(std::sqrt(num / den), 0.01) << dtype_name(d);
  }
}

TEST(QuantMatmul, BatchInvariantBitwise) {
  ThreadPool pool2(2), pool3(3);
  uint32_t seed = 200;
  for (DType d : kTypes) {
    const int64_t n = 37, k = 512, t_max = 11;
    const auto w = quantize_matrix(d, random_values(n * k, seed++), n, k);
    const auto x = random_values(t_max * k, seed++);
    const auto full = run({d, t_max, n, k}, w, x, &pool2, quant_best_isa(), k);
    for (int64_t t = 0; t < t_max; ++t) {
      std::vector<float> one_row(x.begin() + t * k, x.begin() + (t + 1) * k);
      for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool3}) {
        const auto single = run({d, 1, n, k}, w, one_row, pool, quant_best_isa(), k);
        ASSERT_EQ(std::memcmp(single.data(), full.data() + t * (n + 3), n * 4), 0)
            << dtype_name(d) << " row " << t;
      }
    }
  }
}

TEST(QuantMatmul, RejectsBadShapes) {
  std::vector<std::byte> w(1024);
  std::vector<float> x(64), y(4);
  MatmulArgs a;
  a.x = x.data();
  a.w = w.data();
  a.y = y.data();
  a.t = 1;
  a.n = 1;
  a.k = 48;
  a.w_dtype = DType::kQ8_0;
  EXPECT_THROW(quant_matmul(a, nullptr), InputError);
  a.k = 64;
  a.w_dtype = DType::kQ4_K;
  EXPECT_THROW(quant_matmul(a, nullptr), InputError);
}

}  // namespace
}  // namespace gemmaserve::cpu
