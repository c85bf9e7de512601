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
#include "kernels/cpu/interleave.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quant_matmul.h"
#include "kernels/cpu/quant_matmul_internal.h"

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
                       const std::vector<float>& x, ThreadPool* pool, QuantIsa isa, int64_t ldx,
                       WeightLayout layout = WeightLayout::kRows, int64_t prefetch_ahead = -1,
                       const int32_t* x_perm = nullptr) {
  std::vector<float> y(p.t * (p.n + 3), -1.0f);
  MatmulArgs a;
  a.x = x.data();
  a.ldx = ldx;
  a.w = w.data();
  a.w_dtype = p.dtype;
  a.w_layout = layout;
  a.y = y.data();
  a.ldy = p.n + 3;
  a.t = p.t;
  a.k = p.k;
  a.n = p.n;
  a.prefetch_ahead = prefetch_ahead;
  a.x_perm = x_perm;
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
  for (QuantIsa isa : {QuantIsa::kAvx2, QuantIsa::kAvxVnni, QuantIsa::kAvx512Vnni}) {
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

// x_perm (act-order GPTQ modules, columns sorted by group): the product reads x[perm[j]] for
// column j, bit for bit the product with X permuted beforehand, on every ISA and thread count;
// float weights refuse it.
TEST(QuantMatmul, InputPermutationEqualsAPermutedX) {
  ThreadPool pool(2);
  uint32_t seed = 300;
  for (DType d : kTypes) {
    const Problem p{d, 9, 21, 512};
    const auto w = quantize_matrix(d, random_values(p.n * p.k, seed++), p.n, p.k);
    const auto x = random_values(p.t * p.k, seed++);
    std::vector<int32_t> perm(static_cast<size_t>(p.k));
    for (int64_t j = 0; j < p.k; ++j) perm[static_cast<size_t>(j)] = (j * 37 + 11) % p.k;
    std::vector<float> permuted(x.size());
    for (int64_t t = 0; t < p.t; ++t) {
      for (int64_t j = 0; j < p.k; ++j) permuted[t * p.k + j] = x[t * p.k + perm[j]];
    }
    for (QuantIsa isa :
         {QuantIsa::kPortable, QuantIsa::kAvx2, QuantIsa::kAvxVnni, QuantIsa::kAvx512Vnni}) {
      if (!quant_isa_supported(isa)) continue;
      const auto want = run(p, w, permuted, &pool, isa, p.k);
      const auto got = run(p, w, x, &pool, isa, p.k, WeightLayout::kRows, -1, perm.data());
      ASSERT_EQ(std::memcmp(want.data(), got.data(), want.size() * 4), 0)
          << quant_isa_name(isa) << " " << dtype_name(d);
    }
  }
  std::vector<float> wf(64), x(64), y(1);
  std::vector<int32_t> perm(64, 0);
  MatmulArgs a;
  a.x = x.data();
  a.ldx = 64;
  a.w = wf.data();
  a.w_dtype = DType::kF32;
  a.y = y.data();
  a.ldy = 1;
  a.t = a.n = 1;
  a.k = 64;
  a.x_perm = perm.data();
  EXPECT_THROW(matmul(a, nullptr), InputError);
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

TEST(QuantMatmul, VectorActivationQuantizationMatchesScalar) {
  const int64_t k = 32 * 10;
  auto x = random_values(k, 77, 3.0f);
  for (int i = 32; i < 64; ++i) x[i] = 0.0f;                     // all-zero block
  for (int i = 64; i < 96; ++i) x[i] *= 1e-30f;                  // tiny scale
  for (int i = 96; i < 128; ++i) x[i] = (i % 2 ? 2.5f : -0.5f);  // exact ties
  for (int i = 128; i < 160; ++i) x[i] *= 1e30f;                 // huge scale
  for (int i = 160; i < 192; ++i) x[i] *= 1e-40f;                // subnormal: inverse overflows
  for (int i = 192; i < 224; ++i) x[i] = (i % 5 ? 1.0f : -1.0f) * (i - 190);  // +-127 reached
  struct Out {
    std::vector<int8_t> q = std::vector<int8_t>(32 * 10);
    std::vector<float> d = std::vector<float>(10), xs = std::vector<float>(10);
    std::vector<int32_t> off = std::vector<int32_t>(80), corr = std::vector<int32_t>(10);
  };
  Out a;
  quant_detail::quantize_act_row(x.data(), k, a.q.data(), a.d.data(), a.off.data(), a.xs.data(),
                                 a.corr.data(), -128);
  for (QuantIsa isa : {QuantIsa::kAvx2, QuantIsa::kAvx512Vnni}) {
    if (!quant_isa_supported(isa)) continue;
    Out b;
    const auto vector_row = isa == QuantIsa::kAvx2 ? quant_detail::quantize_act_row_avx2
                                                   : quant_detail::quantize_act_row_avx512;
    vector_row(x.data(), k, b.q.data(), b.d.data(), b.off.data(), b.xs.data(), b.corr.data(), -128);
    EXPECT_EQ(a.q, b.q) << quant_isa_name(isa);
    EXPECT_EQ(std::memcmp(a.d.data(), b.d.data(), 10 * 4), 0) << quant_isa_name(isa);
    EXPECT_EQ(std::memcmp(a.xs.data(), b.xs.data(), 10 * 4), 0) << quant_isa_name(isa);
    EXPECT_EQ(a.off, b.off) << quant_isa_name(isa);
    EXPECT_EQ(a.corr, b.corr) << quant_isa_name(isa);
  }
}

// --- Interleaved layout (quant_interleave.h) ---

std::vector<std::byte> interleaved(DType d, const std::vector<std::byte>& rows, int64_t n,
                                   int64_t k, ThreadPool* pool = nullptr) {
  std::vector<std::byte> out(rows.size());
  interleave_rows(d, rows.data(), out.data(), n, k, pool);
  return out;
}

// Q4_K's interleaved canonical order for one row-major row against quantized activations:
// per sub-block the exact integer dot of its nibbles, then the scale fma and the min fma.
float q4k_interleaved_dot(const std::byte* row, const std::vector<int>& xq,
                          const std::vector<float>& dx, int64_t k) {
  float acc = 0.0f;
  for (int64_t sb = 0; sb < k / 256; ++sb) {
    const auto* blk = reinterpret_cast<const uint8_t*>(row + sb * kQ4KBlockBytes);
    uint16_t h[2];
    std::memcpy(h, blk, 4);
    const float d = f16_to_f32(h[0]), dmin = f16_to_f32(h[1]);
    for (int s = 0; s < 8; ++s) {
      const int64_t b = sb * 8 + s;
      uint8_t sc, m;
      q4k_scale_min(blk + 4, s, &sc, &m);
      int32_t dot = 0, sum = 0;
      for (int l = 0; l < 32; ++l) {
        const uint8_t byte = blk[16 + 32 * (s / 2) + l];
        dot += (s % 2 == 0 ? byte & 15 : byte >> 4) * xq[b * 32 + l];
        sum += xq[b * 32 + l];
      }
      const float xs = dx[b] * static_cast<float>(sum);
      acc = std::fma(d * static_cast<float>(sc) * dx[b], static_cast<float>(dot), acc);
      acc = std::fma(-(dmin * static_cast<float>(m)), xs, acc);
    }
  }
  return acc;
}

// The canonical interleaved order from the row-major weights, written independently of the
// kernels: per block the exact integer dot, then one fma per block (Q4_K: two per sub-block).
std::vector<float> interleaved_reference(DType d, const std::vector<std::byte>& rows,
                                         const std::vector<float>& x, const Problem& p,
                                         int64_t ldx) {
  std::vector<float> y(p.t * (p.n + 3), -1.0f);
  const int64_t nb = p.k / 32;
  std::vector<float> wdq(p.k);
  for (int64_t t = 0; t < p.t; ++t) {
    // X quantized exactly as quant_matmul does: per block d = max|x| / 127, round to even.
    std::vector<int> xq(p.k);
    std::vector<float> dx(nb);
    for (int64_t b = 0; b < nb; ++b) {
      float amax = 0.0f;
      for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[t * ldx + b * 32 + i]));
      dx[b] = amax / 127.0f;
      const float inv = dx[b] != 0.0f ? 1.0f / dx[b] : 0.0f;
      for (int i = 0; i < 32; ++i) {
        xq[b * 32 + i] = static_cast<int>(std::nearbyint(x[t * ldx + b * 32 + i] * inv));
      }
    }
    for (int64_t n = 0; n < p.n; ++n) {
      const std::byte* row = rows.data() + n * dtype_row_bytes(d, p.k);
      if (d == DType::kQ4_K) {
        y[t * (p.n + 3) + n] = q4k_interleaved_dot(row, xq, dx, p.k);
        continue;
      }
      dequantize_row(d, row, wdq.data(), p.k);
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const size_t bb = d == DType::kQ8_0 ? kQ8_0BlockBytes : kQ4_0BlockBytes;
        uint16_t h;
        std::memcpy(&h, row + b * bb, 2);
        const float dw = f16_to_f32(h);
        int32_t dot = 0;
        for (int i = 0; i < 32; ++i) {
          const int q = dw != 0.0f ? static_cast<int>(std::lround(wdq[b * 32 + i] / dw)) : 0;
          dot += q * xq[b * 32 + i];
        }
        acc = std::fma(dw * dx[b], static_cast<float>(dot), acc);
      }
      y[t * (p.n + 3) + n] = acc;
    }
  }
  return y;
}

TEST(QuantInterleave, RowsReadBackExactly) {
  uint32_t seed = 300;
  ThreadPool pool(2);
  for (DType d : kTypes) {
    for (int64_t k : {32, 96, 256, 1536}) {
      if (k % dtype_block_elems(d) != 0) continue;
      const int64_t n = 48;
      const auto rows = quantize_matrix(d, random_values(n * k, seed++), n, k);
      const auto w = interleaved(d, rows, n, k, &pool);
      std::vector<float> want(k), got(k);
      for (int64_t r = 0; r < n; ++r) {
        dequantize_row(d, rows.data() + r * dtype_row_bytes(d, k), want.data(), k);
        interleaved_row_to_f32(d, w.data(), r, k, got.data());
        ASSERT_EQ(std::memcmp(want.data(), got.data(), k * 4), 0)
            << dtype_name(d) << " K=" << k << " row " << r;
      }
    }
  }
}

TEST(QuantInterleave, Q8_0GroupLayout) {
  // Row r, element e = r + e (small ints) so every byte says where it came from.
  const int64_t n = 16, k = 64;
  std::vector<float> w(n * k);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t e = 0; e < k; ++e) w[r * k + e] = static_cast<float>((r * 3 + e) % 50) - 20.0f;
  const auto rows = quantize_matrix(DType::kQ8_0, w, n, k);
  const auto g = interleaved(DType::kQ8_0, rows, n, k);
  // Scales of block 1, row 5, then block 1 quad 2 row 5 element 3 (+ 128).
  EXPECT_EQ(std::memcmp(g.data() + 32 + 10, rows.data() + 5 * 68 + 34, 2), 0);
  const auto q = static_cast<int8_t>(rows[5 * 68 + 34 + 2 + 11]);
  EXPECT_EQ(std::to_integer<int>(g[2 * 32 + 512 + 64 * 2 + 4 * 5 + 3]), q + 128);
}

std::vector<Problem> interleave_problems() {
  std::vector<Problem> out;
  for (DType d : kTypes) {
    for (int64_t k : {32, 96, 256, 512, 1536}) {
      if (k % dtype_block_elems(d) != 0) continue;
      out.push_back({d, 1, 16, k});
      out.push_back({d, 1, 80, k});  // 4-group decode tiles and a remainder group
      out.push_back({d, 5, 48, k});  // 2 x 4 tiles plus remainders both ways
      out.push_back({d, 12, 32, k});
      out.push_back({d, 6, 48, k});  // remainder tiles of 2 and 3 rows
      out.push_back({d, 7, 48, k});
      out.push_back({d, 9, 48, k});    // batched decode: 8-row tiles with a 1-row tail
      out.push_back({d, 11, 32, k});   // and a 3-row tail
      out.push_back({d, 37, 192, k});  // prefill and MoE expert batches: many 4-row tiles
    }
  }
  return out;
}

TEST(QuantInterleave, EveryIsaMatchesTheCanonicalOrderBitwise) {
  ThreadPool pool(2);
  uint32_t seed = 400;
  for (const Problem& p : interleave_problems()) {
    const int64_t ldx = p.k + 5;
    const auto rows = quantize_matrix(p.dtype, random_values(p.n * p.k, seed++), p.n, p.k);
    const auto w = interleaved(p.dtype, rows, p.n, p.k);
    const auto x = random_values(p.t * ldx, seed++);
    const auto ref = interleaved_reference(p.dtype, rows, x, p, ldx);
    for (QuantIsa isa :
         {QuantIsa::kPortable, QuantIsa::kAvx2, QuantIsa::kAvxVnni, QuantIsa::kAvx512Vnni}) {
      if (!quant_isa_supported(isa)) {
        std::printf("skipping %s: not supported here\n", quant_isa_name(isa));
        continue;
      }
      const auto got = run(p, w, x, &pool, isa, ldx, WeightLayout::kInterleaved16);
      ASSERT_EQ(std::memcmp(ref.data(), got.data(), ref.size() * 4), 0)
          << quant_isa_name(isa) << " " << dtype_name(p.dtype) << " T=" << p.t << " N=" << p.n
          << " K=" << p.k;
    }
  }
}

// Every stored byte value (Q8_0's 0 is q = -128, the sign trick's one 128) against activations
// at +-127 in every block: the int16 sums of the AVX2 path are at their bound and stay exact.
TEST(QuantInterleave, ExtremeValuesExactOnEveryIsa) {
  ThreadPool pool(2);
  std::mt19937 rng(7);
  for (DType d : kTypes) {
    for (int64_t t : {1, 5}) {
      const Problem p{d, t, 32, 512};
      std::vector<std::byte> rows(dtype_row_bytes(d, p.k) * p.n);
      const size_t bb = dtype_row_bytes(d, dtype_block_elems(d));
      for (size_t i = 0; i < rows.size(); ++i) {
        const size_t in_block = i % bb, row = i / dtype_row_bytes(d, p.k);
        // Rows 0-3 all zero bits, all one bits, 0x0F, 0xF0; the rest random.
        const uint8_t fixed[] = {0x00, 0xFF, 0x0F, 0xF0};
        uint8_t v = row < 4 ? fixed[row] : static_cast<uint8_t>(rng());
        // Scales stay small and finite: f16 0x2000-0x23FF (about 0.008).
        if (in_block < (d == DType::kQ4_K ? 4u : 2u)) v = in_block % 2 ? 0x20 : v;
        rows[i] = std::byte{v};
      }
      const auto w = interleaved(d, rows, p.n, p.k);
      std::vector<float> x(p.t * p.k);
      for (size_t i = 0; i < x.size(); ++i) {
        const int64_t block = static_cast<int64_t>(i / 32) % 4;
        x[i] = block == 0 ? 1.0f : block == 1 ? -1.0f : (i % 2 ? 3.0f : -3.0f);
      }
      const auto ref = run(p, w, x, &pool, QuantIsa::kPortable, p.k, WeightLayout::kInterleaved16);
      for (QuantIsa isa : {QuantIsa::kAvx2, QuantIsa::kAvxVnni, QuantIsa::kAvx512Vnni}) {
        if (!quant_isa_supported(isa)) continue;
        const auto got = run(p, w, x, &pool, isa, p.k, WeightLayout::kInterleaved16);
        ASSERT_EQ(std::memcmp(ref.data(), got.data(), ref.size() * 4), 0)
            << quant_isa_name(isa) << " " << dtype_name(d) << " T=" << t;
      }
    }
  }
}

// How far ahead one-row products request their lines (MatmulArgs::prefetch_ahead: the next
// group, a few bytes, a group and more, past the matrix's end) never changes a bit.
TEST(QuantInterleave, RequestDistanceKeepsTheBits) {
  ThreadPool pool(2);
  uint32_t seed = 900;
  for (const Problem& p : interleave_problems()) {
    if (p.t != 1) continue;
    const auto rows = quantize_matrix(p.dtype, random_values(p.n * p.k, seed++), p.n, p.k);
    const auto w = interleaved(p.dtype, rows, p.n, p.k);
    const auto x = random_values(p.k, seed++);
    const auto ref = interleaved_reference(p.dtype, rows, x, p, p.k);
    for (int64_t ahead : {int64_t{-1}, int64_t{0}, int64_t{64}, int64_t{12288}, int64_t{1} << 20}) {
      const auto got =
          run(p, w, x, &pool, quant_best_isa(), p.k, WeightLayout::kInterleaved16, ahead);
      ASSERT_EQ(std::memcmp(ref.data(), got.data(), ref.size() * 4), 0)
          << "ahead " << ahead << " " << dtype_name(p.dtype) << " N=" << p.n << " K=" << p.k;
    }
  }
}

TEST(QuantInterleave, CloseToRowLayoutAndBatchInvariant) {
  ThreadPool pool2(2), pool3(3);
  uint32_t seed = 500;
  for (DType d : kTypes) {
    const int64_t n = 64, k = 1024, t_max = 11;  // 2 x 4-row tiles and a 3-row one
    const auto rows = quantize_matrix(d, random_values(n * k, seed++), n, k);
    const auto w = interleaved(d, rows, n, k);
    const auto x = random_values(t_max * k, seed++);
    const Problem full_p{d, t_max, n, k};
    const auto by_rows = run(full_p, rows, x, &pool2, quant_best_isa(), k);
    const auto full = run(full_p, w, x, &pool2, quant_best_isa(), k, WeightLayout::kInterleaved16);
    // Same integer block dots, only the float summation order differs.
    EXPECT_LT(relative_rms_error(by_rows, full), 1e-5) << dtype_name(d);
    for (int64_t t = 0; t < t_max; ++t) {
      std::vector<float> one_row(x.begin() + t * k, x.begin() + (t + 1) * k);
      for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool3}) {
        const auto single =
            run({d, 1, n, k}, w, one_row, pool, quant_best_isa(), k, WeightLayout::kInterleaved16);
        ASSERT_EQ(std::memcmp(single.data(), full.data() + t * (n + 3), n * 4), 0)
            << dtype_name(d) << " row " << t;
      }
    }
  }
}

TEST(QuantInterleave, RejectsWhatTheLayoutCannotHold) {
  std::vector<std::byte> src(40 * 34), dst(40 * 34);
  try {
    interleave_rows(DType::kQ8_0, src.data(), dst.data(), 40, 32, nullptr);
    FAIL() << "40 rows accepted";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(),
                 "interleave: a Q8_0 matrix of 40 x 32 cannot be interleaved (F32, BF16, Q8_0 or "
                 "Q4_0 with columns a multiple of 32, Q4_K of 256; rows a multiple of 16)");
  }
  EXPECT_THROW(interleave_rows(DType::kQ4_K, src.data(), dst.data(), 16, 96, nullptr), InputError);
  EXPECT_THROW(interleave_rows(DType::kF16, src.data(), dst.data(), 16, 32, nullptr), InputError);
  std::vector<float> x(32), y(24);
  MatmulArgs a;
  a.x = x.data();
  a.ldx = 32;
  a.w = src.data();
  a.w_dtype = DType::kQ8_0;
  a.w_layout = WeightLayout::kInterleaved16;
  a.y = y.data();
  a.ldy = 24;
  a.t = 1;
  a.k = 32;
  a.n = 24;
  try {
    quant_matmul(a, nullptr);
    FAIL() << "N = 24 accepted";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(),
                 "quant_matmul: interleaved Q8_0 weights with N = 24 (the layout needs Q8_0, "
                 "Q4_0 or Q4_K and N a multiple of 16)");
  }
  a.w_dtype = DType::kF16;
  try {
    matmul(a, nullptr);
    FAIL() << "interleaved f16 accepted";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(),
                 "matmul: the interleaved weight layout is for F32, BF16, Q8_0, Q4_0 and Q4_K");
  }
  a.w_dtype = DType::kBF16;
  try {
    matmul(a, nullptr);
    FAIL() << "interleaved bf16 with N = 24 accepted";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(),
                 "matmul: interleaved BF16 weights with N = 24, K = 32 (the layout needs N a "
                 "multiple of 16 and K of 32)");
  }
}

}  // namespace
}  // namespace gemmaserve::cpu
