// CPU kernels against plain double-precision references, plus the invariances the engine relies
// on: results independent of thread count and of the other rows/sequences in a call.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"

namespace gemmaserve::cpu {
namespace {

std::vector<float> random_vec(size_t n, std::mt19937& g, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

TEST(Convert, Bf16AllValues) {
  std::vector<uint16_t> src(65536);
  for (uint32_t i = 0; i < 65536; ++i) src[i] = static_cast<uint16_t>(i);
  std::vector<float> dst(65536);
  to_f32(DType::kBF16, src.data(), dst.data(), src.size());
  for (uint32_t i = 0; i < 65536; ++i) {
    const float ref = bf16_to_f32(src[i]);
    ASSERT_TRUE(same_bits(dst[i], ref) || (std::isnan(ref) && std::isnan(dst[i]))) << i;
  }
}

TEST(Convert, F16AllValues) {
  std::vector<uint16_t> src(65536);
  for (uint32_t i = 0; i < 65536; ++i) src[i] = static_cast<uint16_t>(i);
  std::vector<float> dst(65536);
  to_f32(DType::kF16, src.data(), dst.data(), src.size());
  for (uint32_t i = 0; i < 65536; ++i) {
    const float ref = f16_to_f32(src[i]);
    if (std::isnan(ref)) {
      ASSERT_TRUE(std::isnan(dst[i])) << i;
    } else {
      ASSERT_TRUE(same_bits(dst[i], ref)) << i << ": " << dst[i] << " vs " << ref;
    }
  }
}

// Weights in a given dtype plus their exact f32 values.
struct TestWeights {
  std::vector<uint16_t> half;
  std::vector<float> f32;  // the matrix as passed when dtype is F32, else the exact values
  DType dtype;
  const void* data() const {
    return dtype == DType::kF32 ? static_cast<const void*>(f32.data()) : half.data();
  }
};

TestWeights make_weights(DType dtype, size_t n, std::mt19937& g) {
  TestWeights w;
  w.dtype = dtype;
  w.f32 = random_vec(n, g);
  if (dtype != DType::kF32) {
    w.half.resize(n);
    for (size_t i = 0; i < n; ++i) {
      w.half[i] = dtype == DType::kBF16 ? f32_to_bf16(w.f32[i]) : f32_to_f16(w.f32[i]);
      w.f32[i] = dtype == DType::kBF16 ? bf16_to_f32(w.half[i]) : f16_to_f32(w.half[i]);
    }
  }
  return w;
}

TEST(Matmul, MatchesReferenceAcrossShapesAndDtypes) {
  std::mt19937 g(42);
  ThreadPool pool(2);
  const int64_t ts[] = {1, 3, 17};
  const int64_t ks[] = {1, 7, 64, 255, 1031};
  const int64_t ns[] = {1, 5, 33, 100};
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (int64_t t : ts) {
      for (int64_t k : ks) {
        for (int64_t n : ns) {
          const size_t ldx = static_cast<size_t>(k) + 3, ldy = static_cast<size_t>(n) + 2;
          std::vector<float> x = random_vec(static_cast<size_t>(t) * ldx, g);
          TestWeights w = make_weights(dt, static_cast<size_t>(n * k), g);
          std::vector<float> y(static_cast<size_t>(t) * ldy, -7.0f);
          MatmulArgs a{x.data(), ldx, w.data(), dt, y.data(), ldy, t, k, n};
          matmul(a, &pool);
          for (int64_t r = 0; r < t; ++r) {
            for (int64_t c = 0; c < n; ++c) {
              double ref = 0.0, mag = 0.0;
              for (int64_t i = 0; i < k; ++i) {
                const double p = static_cast<double>(x[r * ldx + i]) * w.f32[c * k + i];
                ref += p;
                mag += std::fabs(p);
              }
              ASSERT_NEAR(y[r * ldy + c], ref, 1e-6 * mag + 1e-30)
                  << dtype_name(dt) << " t=" << t << " k=" << k << " n=" << n;
            }
            for (size_t c = static_cast<size_t>(n); c < ldy; ++c) {
              ASSERT_EQ(y[r * ldy + c], -7.0f) << "wrote past N";
            }
          }
        }
      }
    }
  }
}

// Every output element is reduced in an order fixed by K alone: the thread count and the other
// rows of X never change a bit.
TEST(Matmul, BitwiseInvariantToThreadsAndBatch) {
  std::mt19937 g(7);
  const int64_t t = 23, k = 300, n = 517;
  std::vector<float> x = random_vec(static_cast<size_t>(t * k), g);
  TestWeights w = make_weights(DType::kBF16, static_cast<size_t>(n * k), g);
  std::vector<float> y1(static_cast<size_t>(t * n)), y2(y1.size()), y3(y1.size());
  MatmulArgs a{x.data(),  static_cast<size_t>(k), w.data(), w.dtype,
               y1.data(), static_cast<size_t>(n), t,        k,
               n};
  matmul(a, nullptr);
  ThreadPool p2(2), p3(3);
  a.y = y2.data();
  matmul(a, &p2);
  a.y = y3.data();
  matmul(a, &p3);
  ASSERT_EQ(0, std::memcmp(y1.data(), y2.data(), y1.size() * sizeof(float)));
  ASSERT_EQ(0, std::memcmp(y1.data(), y3.data(), y1.size() * sizeof(float)));
  for (int64_t r = 0; r < t; ++r) {
    std::vector<float> single(static_cast<size_t>(n));
    MatmulArgs one{x.data() + r * k,
                   static_cast<size_t>(k),
                   w.data(),
                   w.dtype,
                   single.data(),
                   static_cast<size_t>(n),
                   1,
                   k,
                   n};
    matmul(one, &p2);
    ASSERT_EQ(0, std::memcmp(single.data(), &y1[static_cast<size_t>(r * n)],
                             single.size() * sizeof(float)))
        << "row " << r;
  }
  EXPECT_TRUE(same_bits(dot_f32(x.data(), w.f32.data(), k), y1[0]));
}

TEST(Ops, RmsNormWithAndWithoutWeight) {
  std::mt19937 g(3);
  for (int64_t n : {1, 7, 64, 256, 513}) {
    std::vector<float> x = random_vec(static_cast<size_t>(n), g, -3.0f, 3.0f);
    std::vector<float> w = random_vec(static_cast<size_t>(n), g, 0.5f, 1.5f);
    double ms = 0.0;
    for (float v : x) ms += static_cast<double>(v) * v;
    const double inv = 1.0 / std::sqrt(ms / static_cast<double>(n) + 1e-6);
    std::vector<float> y(static_cast<size_t>(n));
    rms_norm(x.data(), w.data(), y.data(), n, 1e-6f);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_NEAR(y[i], x[i] * inv * w[i], 1e-6 * std::fabs(x[i] * inv * w[i]) + 1e-7);
    rms_norm(x.data(), nullptr, y.data(), n, 1e-6f);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_NEAR(y[i], x[i] * inv, 1e-6 * std::fabs(x[i] * inv) + 1e-7);
    std::vector<float> inplace = x;  // y may alias x
    rms_norm(inplace.data(), nullptr, inplace.data(), n, 1e-6f);
    ASSERT_EQ(0, std::memcmp(inplace.data(), y.data(), y.size() * sizeof(float)));
  }
  // Plain weight, not 1 + w: a zero weight zeroes the output.
  std::vector<float> x = {1.0f, 2.0f}, zero = {0.0f, 0.0f}, y(2);
  rms_norm(x.data(), zero.data(), y.data(), 2, 1e-6f);
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[1], 0.0f);
}

TEST(Ops, RopeInverseFrequencies) {
  std::vector<float> f(8);
  rope_inv_freq(16, 10000.0, 8, 1.0, f.data());  // default: all d/2 slots
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(f[i], std::pow(10000.0, -2.0 * i / 16), 1e-7 * f[0]);
  // Proportional, head_dim 512, factor 0.25: 64 slots with exponent denominator 512, then 0.
  std::vector<float> p(256);
  rope_inv_freq(512, 1e6, 64, 1.0, p.data());
  for (int i = 0; i < 64; ++i) EXPECT_NEAR(p[i], std::pow(1e6, -2.0 * i / 512), 1e-6 * p[i]);
  for (int i = 64; i < 256; ++i) EXPECT_EQ(p[i], 0.0f);
  rope_inv_freq(16, 10000.0, 8, 2.0, f.data());  // factor divides every frequency
  EXPECT_NEAR(f[1], std::pow(10000.0, -2.0 / 16) / 2.0, 1e-7);
}

void rope_reference(std::vector<double>& x, int head_dim, const std::vector<float>& freq,
                    int64_t pos) {
  const int half = head_dim / 2;
  for (int i = 0; i < half; ++i) {
    const double angle = static_cast<double>(static_cast<float>(pos) * freq[i]);
    const double a = x[i], b = x[i + half];
    x[i] = a * std::cos(angle) - b * std::sin(angle);
    x[i + half] = b * std::cos(angle) + a * std::sin(angle);
  }
}

TEST(Ops, ApplyRopeDefaultAndProportional) {
  std::mt19937 g(5);
  struct Case {
    int head_dim;
    double theta;
    int rotated;
  };
  for (const Case& c :
       {Case{16, 1e4, 8}, Case{32, 1e6, 4}, Case{256, 1e4, 128}, Case{512, 1e6, 64}}) {
    std::vector<float> freq(static_cast<size_t>(c.head_dim / 2));
    rope_inv_freq(c.head_dim, c.theta, c.rotated, 1.0, freq.data());
    for (int64_t pos : {0, 1, 17, 1000, 2084}) {
      std::vector<float> x = random_vec(static_cast<size_t>(c.head_dim), g);
      std::vector<double> ref(x.begin(), x.end());
      rope_reference(ref, c.head_dim, freq, pos);
      std::vector<float> cs(freq.size()), sn(freq.size());
      rope_cos_sin(pos, freq.data(), c.rotated, cs.data(), sn.data());
      std::vector<float> y = x;
      apply_rope(y.data(), c.head_dim, cs.data(), sn.data(), c.rotated);
      const int half = c.head_dim / 2;
      for (int i = 0; i < c.head_dim; ++i) {
        ASSERT_NEAR(y[i], ref[i], 2e-6) << "d=" << c.head_dim << " pos=" << pos << " i=" << i;
        if (i % half >= c.rotated) {
          ASSERT_TRUE(same_bits(y[i], x[i])) << "slot " << i << " moved";
        }
      }
    }
  }
}

TEST(Ops, GeluSoftcapSoftmax) {
  for (float x = -8.0f; x <= 8.0f; x += 0.37f) {
    const double xd = x;
    const double ref =
        0.5 * xd * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (xd + 0.044715 * xd * xd * xd)));
    ASSERT_NEAR(gelu_tanh(x), ref, 1e-6 + 1e-6 * std::fabs(ref)) << x;
  }
  std::vector<float> gate = {-1.0f, 0.5f, 2.0f}, up = {2.0f, 3.0f, -1.0f}, out(3);
  gelu_tanh_mul(gate.data(), up.data(), out.data(), 3);
  for (int i = 0; i < 3; ++i) EXPECT_FLOAT_EQ(out[i], gelu_tanh(gate[i]) * up[i]);

  std::vector<float> v = {-100.0f, -3.0f, 0.0f, 5.0f, 29.0f, 1000.0f};
  std::vector<float> capped = v;
  soft_cap(capped.data(), static_cast<int64_t>(capped.size()), 30.0f);
  for (size_t i = 0; i < v.size(); ++i) {
    ASSERT_NEAR(capped[i], 30.0 * std::tanh(v[i] / 30.0), 1e-5);
    ASSERT_LE(std::fabs(capped[i]), 30.0f);
  }

  std::mt19937 g(9);
  for (int64_t n : {1, 7, 8, 128, 131}) {
    std::vector<float> x = random_vec(static_cast<size_t>(n), g, -20.0f, 20.0f);
    double mx = -1e300, sum = 0.0;
    for (float e : x) mx = std::max(mx, static_cast<double>(e));
    for (float e : x) sum += std::exp(e - mx);
    std::vector<float> y = x;
    softmax(y.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(y[i], std::exp(x[i] - mx) / sum, 1e-6);
  }
}

// ----- attention -------------------------------------------------------------------------

struct AttnSetup {
  AttentionShape shape;
  int block_size = 0;
  int64_t num_blocks = 0;
  std::vector<float> k, v;  // [num_blocks * block_size, nKV * hd]; block 0 is NaN poison
};

// Sequence data: absolute-position K/V rows plus a scrambled block table.
struct AttnSeqData {
  int32_t first_pos = 0;
  int32_t num_queries = 0;
  std::vector<int32_t> table;
  std::vector<float> q;  // [num_queries, nH * hd]
};

double ref_attention(const AttnSetup& s, const AttnSeqData& sd, int32_t qi, int head, int d,
                     KeyRange range) {
  const int hd = s.shape.head_dim;
  const int kvh = head / (s.shape.num_heads / s.shape.num_kv_heads);
  const int64_t stride = static_cast<int64_t>(s.shape.num_kv_heads) * hd;
  auto row = [&](const std::vector<float>& base, int32_t pos) {
    const int64_t blk = sd.table[static_cast<size_t>(pos / s.block_size)];
    return &base[static_cast<size_t>((blk * s.block_size + pos % s.block_size) * stride +
                                     kvh * hd)];
  };
  const float* q =
      &sd.q[static_cast<size_t>(qi) * s.shape.num_heads * hd + static_cast<size_t>(head) * hd];
  std::vector<double> sc;
  double mx = -1e300;
  for (int32_t p = range.begin; p < range.end; ++p) {
    double dot = 0.0;
    const float* kr = row(s.k, p);
    for (int i = 0; i < hd; ++i) dot += static_cast<double>(q[i]) * kr[i];
    dot *= s.shape.scale;
    sc.push_back(dot);
    mx = std::max(mx, dot);
  }
  double sum = 0.0, acc = 0.0;
  for (int32_t p = range.begin; p < range.end; ++p) {
    const double e = std::exp(sc[static_cast<size_t>(p - range.begin)] - mx);
    sum += e;
    acc += e * row(s.v, p)[d];
  }
  return acc / sum;
}

// Builds a cache where every block a query may read is real and every block outside the
// window points at NaN-filled poison block 0 (or -1 when `invalid_outside`).
void build_case(AttnSetup& s, std::vector<AttnSeqData>& seqs, std::mt19937& g,
                bool invalid_outside) {
  const int hd = s.shape.head_dim;
  const int64_t stride = static_cast<int64_t>(s.shape.num_kv_heads) * hd;
  int64_t needed = 1;
  for (const AttnSeqData& sd : seqs) needed += (sd.first_pos + sd.num_queries) / s.block_size + 1;
  s.num_blocks = needed;
  const size_t floats = static_cast<size_t>(needed * s.block_size * stride);
  s.k = random_vec(floats, g);
  s.v = random_vec(floats, g);
  std::fill(s.k.begin(), s.k.begin() + s.block_size * stride, std::nanf(""));
  std::fill(s.v.begin(), s.v.begin() + s.block_size * stride, std::nanf(""));
  std::vector<int32_t> order;
  for (int64_t b = 1; b < needed; ++b) order.push_back(static_cast<int32_t>(b));
  std::shuffle(order.begin(), order.end(), g);
  size_t next = 0;
  for (AttnSeqData& sd : seqs) {
    const int32_t end = sd.first_pos + sd.num_queries;
    const int32_t first_read =
        s.shape.window > 0 ? std::max(0, sd.first_pos - s.shape.window + 1) : 0;
    for (int32_t b = 0; b * s.block_size < end; ++b) {
      const bool outside = (b + 1) * s.block_size <= first_read;
      sd.table.push_back(outside ? (invalid_outside ? -1 : 0) : order[next++]);
    }
    sd.q = random_vec(static_cast<size_t>(sd.num_queries) * s.shape.num_heads * hd, g, -2.0f, 2.0f);
  }
}

std::vector<AttentionSeq> make_seqs(const std::vector<AttnSeqData>& data, int64_t* rows) {
  std::vector<AttentionSeq> seqs;
  int64_t row = 0;
  for (const AttnSeqData& sd : data) {
    AttentionSeq a;
    a.q_row = row;
    a.num_queries = sd.num_queries;
    a.first_pos = sd.first_pos;
    a.block_table = sd.table;
    seqs.push_back(a);
    row += sd.num_queries;
  }
  *rows = row;
  return seqs;
}

std::vector<float> stack_q(const std::vector<AttnSeqData>& data) {
  std::vector<float> q;
  for (const AttnSeqData& sd : data) q.insert(q.end(), sd.q.begin(), sd.q.end());
  return q;
}

TEST(Attention, MatchesReferenceWithPagingWindowsAndGqa) {
  std::mt19937 g(11);
  ThreadPool pool(2);
  struct Geo {
    int nh, nkv, hd, window, block;
  };
  for (const Geo& geo : {Geo{4, 1, 16, 0, 5}, Geo{4, 2, 32, 8, 16}, Geo{4, 4, 64, 12, 5},
                         Geo{8, 1, 256, 0, 16}, Geo{2, 1, 512, 7, 3}, Geo{16, 8, 256, 20, 16}}) {
    AttnSetup s;
    s.shape = {geo.nh, geo.nkv, geo.hd, geo.window, 1.0f};
    s.block_size = geo.block;
    // A prefill from 0, a continuation chunk, and a single decode token far past the window.
    std::vector<AttnSeqData> data = {{0, 29, {}, {}}, {13, 6, {}, {}}, {57, 1, {}, {}}};
    build_case(s, data, g, false);
    int64_t rows = 0;
    std::vector<AttentionSeq> seqs = make_seqs(data, &rows);
    PagedKv kv{s.k.data(), s.v.data(), s.block_size, static_cast<int64_t>(geo.nkv) * geo.hd * 4,
               s.num_blocks};
    ASSERT_TRUE(attention_blocks_valid(kv, s.shape, seqs));
    const std::vector<float> q = stack_q(data);
    const size_t width = static_cast<size_t>(geo.nh) * geo.hd;
    std::vector<float> out(static_cast<size_t>(rows) * width);
    paged_attention(q.data(), width, kv, s.shape, seqs, out.data(), width, &pool);
    for (size_t si = 0; si < data.size(); ++si) {
      for (int32_t qi = 0; qi < data[si].num_queries; ++qi) {
        const KeyRange range = attention_key_range(seqs[si], s.shape, qi);
        for (int h = 0; h < geo.nh; ++h) {
          for (int d = 0; d < geo.hd; d += (geo.hd > 64 ? 7 : 1)) {
            const double ref = ref_attention(s, data[si], qi, h, d, range);
            const float got = out[static_cast<size_t>(seqs[si].q_row + qi) * width +
                                  static_cast<size_t>(h) * geo.hd + d];
            ASSERT_NEAR(got, ref, 2e-5)
                << "hd=" << geo.hd << " seq " << si << " q " << qi << " head " << h << " d " << d;
          }
        }
      }
    }
    // Each sequence alone, and any thread count, gives the same bits (batch invariance).
    for (size_t si = 0; si < data.size(); ++si) {
      std::vector<AttnSeqData> one = {data[si]};
      int64_t r1 = 0;
      std::vector<AttentionSeq> s1 = make_seqs(one, &r1);
      std::vector<float> o1(static_cast<size_t>(r1) * width);
      paged_attention(one[0].q.data(), width, kv, s.shape, s1, o1.data(), width, nullptr);
      ASSERT_EQ(0, std::memcmp(o1.data(), &out[static_cast<size_t>(seqs[si].q_row) * width],
                               o1.size() * sizeof(float)))
          << "hd=" << geo.hd << " seq " << si << " differs when run alone";
    }
    ThreadPool pool3(3);
    std::vector<float> out3(out.size());
    paged_attention(q.data(), width, kv, s.shape, seqs, out3.data(), width, &pool3);
    ASSERT_EQ(0, std::memcmp(out.data(), out3.data(), out.size() * sizeof(float)));
  }
}

TEST(Attention, SlidingWindowNeverReadsBlocksOutsideIt) {
  std::mt19937 g(13);
  AttnSetup s;
  s.shape = {4, 2, 32, 8, 1.0f};
  s.block_size = 4;
  std::vector<AttnSeqData> data = {{40, 1, {}, {}}, {30, 3, {}, {}}};
  build_case(s, data, g, /*invalid_outside=*/true);
  int64_t rows = 0;
  std::vector<AttentionSeq> seqs = make_seqs(data, &rows);
  PagedKv kv{s.k.data(), s.v.data(), s.block_size, 64 * 4, s.num_blocks};
  // -1 entries lie wholly before the window: valid, and never dereferenced.
  ASSERT_EQ(data[0].table.front(), -1);
  ASSERT_TRUE(attention_blocks_valid(kv, s.shape, seqs));
  std::vector<float> out(static_cast<size_t>(rows) * 128);
  const std::vector<float> q = stack_q(data);
  paged_attention(q.data(), 128, kv, s.shape, seqs, out.data(), 128, nullptr);
  for (float x : out) ASSERT_TRUE(std::isfinite(x));
  // A full-attention read of the same tables needs those blocks: reported invalid.
  AttentionShape full = s.shape;
  full.window = 0;
  EXPECT_FALSE(attention_blocks_valid(kv, full, seqs));
  // An in-window entry that is missing or out of range is reported too.
  std::vector<int32_t> broken = data[0].table;
  broken.back() = static_cast<int32_t>(s.num_blocks);
  AttentionSeq bad = seqs[0];
  bad.block_table = broken;
  EXPECT_FALSE(attention_blocks_valid(kv, s.shape, std::span<const AttentionSeq>(&bad, 1)));
  bad.block_table = std::span<const int32_t>(data[0].table).first(data[0].table.size() - 1);
  EXPECT_FALSE(attention_blocks_valid(kv, s.shape, std::span<const AttentionSeq>(&bad, 1)));
}

// Explicit per-query key ranges (how bidirectional image blocks will be expressed).
TEST(Attention, ExplicitKeyRanges) {
  std::mt19937 g(17);
  AttnSetup s;
  s.shape = {2, 1, 16, 0, 1.0f};
  s.block_size = 5;
  std::vector<AttnSeqData> data = {{0, 12, {}, {}}};
  build_case(s, data, g, false);
  int64_t rows = 0;
  std::vector<AttentionSeq> seqs = make_seqs(data, &rows);
  std::vector<KeyRange> ranges;
  for (int32_t i = 0; i < 12; ++i)
    ranges.push_back(i >= 3 && i < 8 ? KeyRange{0, 8} : KeyRange{0, i + 1});
  seqs[0].key_ranges = ranges;
  PagedKv kv{s.k.data(), s.v.data(), s.block_size, 16 * 4, s.num_blocks};
  ASSERT_TRUE(attention_blocks_valid(kv, s.shape, seqs));
  std::vector<float> out(static_cast<size_t>(rows) * 32);
  paged_attention(data[0].q.data(), 32, kv, s.shape, seqs, out.data(), 32, nullptr);
  for (int32_t qi = 0; qi < 12; ++qi) {
    for (int h = 0; h < 2; ++h) {
      for (int d = 0; d < 16; ++d) {
        ASSERT_NEAR(out[static_cast<size_t>(qi) * 32 + h * 16 + d],
                    ref_attention(s, data[0], qi, h, d, ranges[static_cast<size_t>(qi)]), 2e-5);
      }
    }
  }
}

}  // namespace
}  // namespace gemmaserve::cpu
