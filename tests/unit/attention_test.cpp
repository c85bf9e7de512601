// Paged attention at every supported SIMD level and KV dtype against a double-precision
// reference reading the same (dequantized) cache; bitwise invariance to batch composition,
// query chunking and thread count.
#include "kernels/cpu/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/cpu/kv_format.h"

namespace gemmaserve::cpu {
namespace {

constexpr KvDtype kAllDtypes[] = {KvDtype::kF32, KvDtype::kBF16, KvDtype::kF16, KvDtype::kFp8E4M3,
                                  KvDtype::kQ8_0};

struct Geometry {
  int num_heads, num_kv_heads, head_dim, window, block_size;
};

// A sequence's queries and the logical -> physical table of its blocks.
struct SeqData {
  int32_t first_pos, num_queries;
  std::vector<int32_t> table;
  std::vector<float> q;  // [num_queries, num_heads * head_dim]
};

// Encoded K/V of every slot plus their decoded floats (what the reference reads).
struct Cache {
  KvDtype dtype = KvDtype::kF32;
  int64_t slot_bytes = 0, num_blocks = 0;
  std::vector<uint8_t> k, v;
  std::vector<float> k_dec, v_dec;  // [slot, num_kv_heads * head_dim]
  PagedKv view(int block_size) const {
    return PagedKv{k.data(), v.data(), block_size, slot_bytes, num_blocks, dtype};
  }
};

float uniform(std::mt19937& g, float lo, float hi) {
  return std::uniform_real_distribution<float>(lo, hi)(g);
}

// Random K/V (some rows scaled up so quantization scales vary) in scrambled physical blocks;
// blocks wholly before a sliding window get table entry -1 (never read).
Cache build_cache(const Geometry& geo, KvDtype dtype, std::vector<SeqData>& seqs, std::mt19937& g) {
  Cache c;
  c.dtype = dtype;
  const size_t row_bytes = kv_row_bytes(dtype, geo.head_dim);
  c.slot_bytes = static_cast<int64_t>(row_bytes) * geo.num_kv_heads;
  int64_t needed = 0;
  for (const SeqData& s : seqs) needed += (s.first_pos + s.num_queries) / geo.block_size + 1;
  c.num_blocks = needed;
  const size_t slots = static_cast<size_t>(needed * geo.block_size);
  const size_t slot_floats = static_cast<size_t>(geo.num_kv_heads) * geo.head_dim;
  c.k.resize(slots * static_cast<size_t>(c.slot_bytes));
  c.v.resize(c.k.size());
  c.k_dec.resize(slots * slot_floats);
  c.v_dec.resize(c.k_dec.size());
  std::vector<float> row(static_cast<size_t>(geo.head_dim));
  for (size_t s = 0; s < slots; ++s) {
    for (int h = 0; h < geo.num_kv_heads; ++h) {
      const size_t byte_off = s * static_cast<size_t>(c.slot_bytes) + h * row_bytes;
      const size_t float_off = s * slot_floats + static_cast<size_t>(h) * geo.head_dim;
      for (int pass = 0; pass < 2; ++pass) {
        const float amp = (s % 7 == 3) ? 6.0f : 1.0f;
        for (float& x : row) x = uniform(g, -amp, amp);
        std::vector<uint8_t>& bytes = pass == 0 ? c.k : c.v;
        std::vector<float>& dec = pass == 0 ? c.k_dec : c.v_dec;
        encode_kv_row(dtype, row.data(), geo.head_dim, &bytes[byte_off]);
        decode_kv_row(dtype, &bytes[byte_off], geo.head_dim, &dec[float_off]);
      }
    }
  }
  std::vector<int32_t> order(static_cast<size_t>(needed));
  for (int64_t b = 0; b < needed; ++b) order[static_cast<size_t>(b)] = static_cast<int32_t>(b);
  std::shuffle(order.begin(), order.end(), g);
  size_t next = 0;
  for (SeqData& s : seqs) {
    s.table.clear();
    const int32_t end = s.first_pos + s.num_queries;
    const int32_t first_read = geo.window > 0 ? std::max(0, s.first_pos - geo.window + 1) : 0;
    for (int32_t b = 0; b * geo.block_size < end; ++b) {
      const bool outside = (b + 1) * geo.block_size <= first_read;
      s.table.push_back(outside ? -1 : order[next++]);
    }
    s.q.resize(static_cast<size_t>(s.num_queries) * geo.num_heads * geo.head_dim);
    for (float& x : s.q) x = uniform(g, -1.0f, 1.0f);
  }
  return c;
}

std::vector<AttentionSeq> make_seqs(const std::vector<SeqData>& data) {
  std::vector<AttentionSeq> seqs;
  int64_t row = 0;
  for (const SeqData& s : data) {
    AttentionSeq a;
    a.q_row = row;
    a.num_queries = s.num_queries;
    a.first_pos = s.first_pos;
    a.block_table = s.table;
    seqs.push_back(a);
    row += s.num_queries;
  }
  return seqs;
}

std::vector<float> stack_q(const std::vector<SeqData>& data) {
  std::vector<float> q;
  for (const SeqData& s : data) q.insert(q.end(), s.q.begin(), s.q.end());
  return q;
}

// Double-precision attention of one (query, head) over the decoded cache.
std::vector<double> reference(const Geometry& geo, const Cache& c, const SeqData& s,
                              const AttentionShape& shape, int32_t qi, int head, KeyRange range) {
  const int hd = geo.head_dim;
  const int kvh = head / (geo.num_heads / geo.num_kv_heads);
  const size_t slot_floats = static_cast<size_t>(geo.num_kv_heads) * hd;
  auto row = [&](const std::vector<float>& dec, int32_t pos) {
    const int64_t block = s.table[static_cast<size_t>(pos / geo.block_size)];
    const size_t slot = static_cast<size_t>(block * geo.block_size + pos % geo.block_size);
    return &dec[slot * slot_floats + static_cast<size_t>(kvh) * hd];
  };
  const float* q = &s.q[(static_cast<size_t>(qi) * geo.num_heads + head) * hd];
  std::vector<double> scores;
  double mx = -1e300;
  for (int32_t p = range.begin; p < range.end; ++p) {
    const float* k = row(c.k_dec, p);
    double dot = 0.0;
    for (int i = 0; i < hd; ++i) dot += static_cast<double>(q[i]) * k[i];
    scores.push_back(dot * shape.scale);
    mx = std::max(mx, scores.back());
  }
  std::vector<double> out(static_cast<size_t>(hd), 0.0);
  double sum = 0.0;
  for (int32_t p = range.begin; p < range.end; ++p) {
    const double e = std::exp(scores[static_cast<size_t>(p - range.begin)] - mx);
    sum += e;
    const float* v = row(c.v_dec, p);
    for (int i = 0; i < hd; ++i) out[static_cast<size_t>(i)] += e * v[i];
  }
  for (double& x : out) x = sum > 0 ? x / sum : 0.0;
  return out;
}

std::string describe(const Geometry& geo, KvDtype dtype, SimdIsa isa) {
  return "heads " + std::to_string(geo.num_heads) + "/" + std::to_string(geo.num_kv_heads) +
         " hd " + std::to_string(geo.head_dim) + " window " + std::to_string(geo.window) +
         " block " + std::to_string(geo.block_size) + " " + kv_dtype_name(dtype) + " " +
         simd_isa_name(isa);
}

// Prefill from 0, a continuation chunk, and decode tokens far past any window (the last one
// over three key segments).
std::vector<SeqData> workload() {
  return {{0, 37, {}, {}}, {21, 9, {}, {}}, {140, 1, {}, {}}, {77, 1, {}, {}}, {300, 1, {}, {}}};
}

class AttentionGeometry : public ::testing::TestWithParam<Geometry> {};

TEST_P(AttentionGeometry, EveryIsaAndDtypeMatchesTheReference) {
  const Geometry geo = GetParam();
  std::mt19937 g(1234 + geo.head_dim + geo.num_heads * 7 + geo.block_size);
  const AttentionShape shape{geo.num_heads, geo.num_kv_heads, geo.head_dim, geo.window,
                             1.0f / std::sqrt(static_cast<float>(geo.head_dim)) * 4.0f};
  const size_t width = static_cast<size_t>(geo.num_heads) * geo.head_dim;
  ThreadPool pool(2);
  for (KvDtype dtype : kAllDtypes) {
    std::vector<SeqData> data = workload();
    const Cache cache = build_cache(geo, dtype, data, g);
    const PagedKv kv = cache.view(geo.block_size);
    const std::vector<AttentionSeq> seqs = make_seqs(data);
    ASSERT_TRUE(attention_blocks_valid(kv, shape, seqs));
    const std::vector<float> q = stack_q(data);
    const size_t rows = q.size() / width;
    for (SimdIsa isa : supported_simd_isas()) {
      const std::string where = describe(geo, dtype, isa);
      std::vector<float> out(rows * width, std::nanf(""));
      paged_attention(q.data(), width, kv, shape, seqs, out.data(), width, &pool, isa);
      double worst = 0.0;
      for (size_t si = 0; si < data.size(); ++si) {
        for (int32_t qi = 0; qi < data[si].num_queries; ++qi) {
          const KeyRange range = attention_key_range(seqs[si], shape, qi);
          for (int h = 0; h < geo.num_heads; ++h) {
            const std::vector<double> ref = reference(geo, cache, data[si], shape, qi, h, range);
            const float* got = &out[static_cast<size_t>(seqs[si].q_row + qi) * width +
                                    static_cast<size_t>(h) * geo.head_dim];
            for (int d = 0; d < geo.head_dim; ++d) {
              worst = std::max(worst, std::fabs(got[d] - ref[static_cast<size_t>(d)]));
            }
          }
        }
      }
      EXPECT_LT(worst, 3e-5) << where;
    }
  }
}

TEST_P(AttentionGeometry, BitwiseInvariantToBatchChunkingAndThreads) {
  const Geometry geo = GetParam();
  std::mt19937 g(99 + geo.head_dim);
  const AttentionShape shape{geo.num_heads, geo.num_kv_heads, geo.head_dim, geo.window, 1.0f};
  const size_t width = static_cast<size_t>(geo.num_heads) * geo.head_dim;
  for (KvDtype dtype : {KvDtype::kBF16, KvDtype::kQ8_0}) {
    std::vector<SeqData> data = workload();
    const Cache cache = build_cache(geo, dtype, data, g);
    const PagedKv kv = cache.view(geo.block_size);
    const std::vector<AttentionSeq> seqs = make_seqs(data);
    const std::vector<float> q = stack_q(data);
    const size_t rows = q.size() / width;
    for (SimdIsa isa : supported_simd_isas()) {
      const std::string where = describe(geo, dtype, isa);
      std::vector<float> base(rows * width);
      paged_attention(q.data(), width, kv, shape, seqs, base.data(), width, nullptr, isa);
      for (size_t threads : {2, 3, 5}) {
        ThreadPool pool(threads);
        std::vector<float> out(base.size());
        paged_attention(q.data(), width, kv, shape, seqs, out.data(), width, &pool, isa);
        ASSERT_EQ(0, std::memcmp(out.data(), base.data(), out.size() * sizeof(float)))
            << where << " threads " << threads;
      }
      // Each sequence alone (a decode row's key segments then spread over the threads), and
      // its queries split into two calls at every point.
      for (size_t si = 0; si < data.size(); ++si) {
        const SeqData& s = data[si];
        const float* expect = &base[static_cast<size_t>(seqs[si].q_row) * width];
        for (size_t threads : {2, 3}) {
          ThreadPool pool(threads);
          AttentionSeq alone = seqs[si];
          alone.q_row = 0;
          std::vector<float> out(static_cast<size_t>(s.num_queries) * width, std::nanf(""));
          paged_attention(s.q.data(), width, kv, shape, std::span(&alone, 1), out.data(), width,
                          &pool, isa);
          ASSERT_EQ(0, std::memcmp(out.data(), expect, out.size() * sizeof(float)))
              << where << " seq " << si << " alone, threads " << threads;
        }
        for (int32_t split = 0; split < s.num_queries; split += std::max(1, s.num_queries / 4)) {
          std::vector<float> out(static_cast<size_t>(s.num_queries) * width);
          AttentionSeq head = seqs[si], tail = seqs[si];
          head.q_row = 0;
          head.num_queries = split;
          tail.q_row = split;
          tail.num_queries = s.num_queries - split;
          tail.first_pos = s.first_pos + split;
          if (split > 0) {
            paged_attention(s.q.data(), width, kv, shape, std::span(&head, 1), out.data(), width,
                            nullptr, isa);
          }
          paged_attention(s.q.data(), width, kv, shape, std::span(&tail, 1), out.data(), width,
                          nullptr, isa);
          ASSERT_EQ(0, std::memcmp(out.data(), expect, out.size() * sizeof(float)))
              << where << " seq " << si << " split at " << split;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionGeometry,
    ::testing::Values(Geometry{8, 8, 256, 0, 16},   // GQA 1, full attention
                      Geometry{8, 4, 256, 24, 5},   // GQA 2, sliding window
                      Geometry{8, 1, 256, 40, 16},  // GQA 8 (E2B sliding)
                      Geometry{8, 1, 512, 0, 3},    // E2B global: head_dim 512
                      Geometry{16, 2, 512, 30, 5},  // GQA 8, sliding, head_dim 512
                      Geometry{12, 1, 48, 0, 3},    // GQA 12 (two head blocks), short q8 block
                      Geometry{6, 3, 40, 17, 5},    // head_dim 40: portable path everywhere
                      Geometry{4, 2, 17, 9, 3}),    // odd head_dim
    [](const ::testing::TestParamInfo<Geometry>& info) {
      const Geometry& g = info.param;
      return "h" + std::to_string(g.num_heads) + "kv" + std::to_string(g.num_kv_heads) + "d" +
             std::to_string(g.head_dim) + "w" + std::to_string(g.window) + "b" +
             std::to_string(g.block_size);
    });

// A query whose explicit key range is empty gets zeros, with or without its keys split over
// threads (its neighbour still gets its attention).
TEST(Attention, EmptyKeyRangeGivesZeros) {
  const Geometry geo{4, 1, 32, 0, 5};
  std::mt19937 g(6);
  std::vector<SeqData> data = {{0, 2, {}, {}}};
  const Cache cache = build_cache(geo, KvDtype::kF32, data, g);
  std::vector<AttentionSeq> seqs = make_seqs(data);
  const std::vector<KeyRange> ranges = {{1, 1}, {0, 2}};
  seqs[0].key_ranges = ranges;
  const AttentionShape shape{geo.num_heads, geo.num_kv_heads, geo.head_dim, 0, 1.0f};
  const PagedKv kv = cache.view(geo.block_size);
  ASSERT_TRUE(attention_blocks_valid(kv, shape, seqs));
  const size_t width = static_cast<size_t>(geo.num_heads) * geo.head_dim;
  ThreadPool pool(2);
  for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
    std::vector<float> out(2 * width, std::nanf(""));
    paged_attention(data[0].q.data(), width, kv, shape, seqs, out.data(), width, p);
    for (size_t i = 0; i < width; ++i) ASSERT_EQ(out[i], 0.0f) << i;
    for (int h = 0; h < geo.num_heads; ++h) {
      const std::vector<double> ref = reference(geo, cache, data[0], shape, 1, h, ranges[1]);
      for (int d = 0; d < geo.head_dim; ++d) {
        ASSERT_NEAR(out[width + static_cast<size_t>(h) * geo.head_dim + d],
                    ref[static_cast<size_t>(d)], 3e-5);
      }
    }
  }
}

// Explicit per-query key ranges (bidirectional image spans) at every level.
TEST(Attention, ExplicitKeyRangesAtEveryLevel) {
  const Geometry geo{4, 2, 256, 0, 5};
  std::mt19937 g(5);
  std::vector<SeqData> data = {{0, 20, {}, {}}};
  const Cache cache = build_cache(geo, KvDtype::kBF16, data, g);
  std::vector<AttentionSeq> seqs = make_seqs(data);
  std::vector<KeyRange> ranges;
  for (int32_t i = 0; i < 20; ++i) {
    ranges.push_back(i >= 4 && i < 15 ? KeyRange{0, 15} : KeyRange{0, i + 1});
  }
  seqs[0].key_ranges = ranges;
  const AttentionShape shape{geo.num_heads, geo.num_kv_heads, geo.head_dim, 0, 1.0f};
  const PagedKv kv = cache.view(geo.block_size);
  ASSERT_TRUE(attention_blocks_valid(kv, shape, seqs));
  const size_t width = static_cast<size_t>(geo.num_heads) * geo.head_dim;
  for (SimdIsa isa : supported_simd_isas()) {
    std::vector<float> out(20 * width);
    paged_attention(data[0].q.data(), width, kv, shape, seqs, out.data(), width, nullptr, isa);
    for (int32_t qi = 0; qi < 20; ++qi) {
      for (int h = 0; h < geo.num_heads; ++h) {
        const std::vector<double> ref =
            reference(geo, cache, data[0], shape, qi, h, ranges[static_cast<size_t>(qi)]);
        for (int d = 0; d < geo.head_dim; ++d) {
          ASSERT_NEAR(out[static_cast<size_t>(qi) * width + h * geo.head_dim + d],
                      ref[static_cast<size_t>(d)], 3e-5)
              << simd_isa_name(isa) << " q " << qi << " head " << h;
        }
      }
    }
  }
}

TEST(KvFormat, E4m3CodesRoundTripAndRoundToNearestEven) {
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7f) == 0x7f) continue;  // NaN
    const float x = e4m3_to_f32(static_cast<uint8_t>(code));
    EXPECT_EQ(f32_to_e4m3(x), code) << code;
  }
  EXPECT_EQ(e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(e4m3_to_f32(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(f32_to_e4m3(1e6f), 0x7e);                  // saturates
  EXPECT_EQ(f32_to_e4m3(-1e6f), 0xfe);
  // 1.0625 lies halfway between 1.0 (0x38) and 1.125 (0x39): ties to even.
  EXPECT_EQ(f32_to_e4m3(1.0625f), 0x38);
  EXPECT_EQ(f32_to_e4m3(1.1875f), 0x3a);
  EXPECT_EQ(f32_to_e4m3(std::ldexp(1.0f, -10)), 0x00);  // half the smallest subnormal: even
}

TEST(KvFormat, RowBytesAndParse) {
  EXPECT_EQ(kv_row_bytes(KvDtype::kF32, 256), 1024u);
  EXPECT_EQ(kv_row_bytes(KvDtype::kBF16, 256), 512u);
  EXPECT_EQ(kv_row_bytes(KvDtype::kFp8E4M3, 256), 260u);
  EXPECT_EQ(kv_row_bytes(KvDtype::kQ8_0, 256), 272u);  // 8 blocks of 34 bytes
  EXPECT_EQ(kv_row_bytes(KvDtype::kQ8_0, 40), 44u);    // a full and a short block
  EXPECT_EQ(parse_kv_dtype("auto", DType::kBF16), KvDtype::kBF16);
  EXPECT_EQ(parse_kv_dtype("auto", DType::kF32), KvDtype::kF32);
  EXPECT_EQ(parse_kv_dtype("auto", DType::kF16), KvDtype::kF16);
  EXPECT_EQ(parse_kv_dtype("fp8", DType::kBF16), KvDtype::kFp8E4M3);
  EXPECT_EQ(parse_kv_dtype("fp8_e4m3", DType::kBF16), KvDtype::kFp8E4M3);
  EXPECT_EQ(parse_kv_dtype("bfloat16", DType::kF32), KvDtype::kBF16);
  EXPECT_EQ(parse_kv_dtype("q8_0", DType::kBF16), KvDtype::kQ8_0);
  EXPECT_THROW(parse_kv_dtype("fp8_e5m2", DType::kBF16), InputError);
  EXPECT_THROW(parse_kv_dtype("int4", DType::kBF16), InputError);
}

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// Not run by default (timings): decode over long contexts and a prefill, per ISA and dtype.
//   attention_test --gtest_also_run_disabled_tests --gtest_filter='AttentionBench.*'
// Decode prints the K/V bytes read per second (memory-bound when near the machine's bandwidth).
TEST(AttentionBench, DISABLED_DecodeAndPrefill) {
  struct Case {
    const char* name;
    Geometry geo;
    int32_t context;  // decode: keys per query; prefill: prompt tokens
    int num_seqs;
    bool prefill;
  };
  const Case cases[] = {
      {"31B global decode", {32, 4, 512, 0, 16}, 16384, 2, false},
      {"31B sliding decode", {32, 16, 256, 1024, 16}, 16384, 2, false},
      {"E2B global decode", {8, 1, 512, 0, 16}, 32768, 4, false},
      {"E2B sliding prefill", {8, 1, 256, 512, 16}, 2048, 1, true},
      {"31B global prefill", {32, 4, 512, 0, 16}, 1024, 1, true},
      {"26B-A4B sliding prefill", {16, 8, 256, 1024, 16}, 512, 1, true},
  };
  ThreadPool pool(0);
  for (const Case& c : cases) {
    for (KvDtype dtype : {KvDtype::kF32, KvDtype::kBF16, KvDtype::kFp8E4M3, KvDtype::kQ8_0}) {
      // GS_ATTN_BENCH=substring runs only the matching "case dtype isa" lines (for profiling).
      const char* only = std::getenv("GS_ATTN_BENCH");
      const std::string base = std::string(c.name) + " " + kv_dtype_name(dtype);
      if (only != nullptr && base.find(only) == std::string::npos &&
          std::string(only).find(base) == std::string::npos) {
        continue;
      }
      const Geometry& geo = c.geo;
      const size_t row_bytes = kv_row_bytes(dtype, geo.head_dim);
      const int64_t slot_bytes = static_cast<int64_t>(row_bytes) * geo.num_kv_heads;
      const int32_t blocks_per_seq = c.context / geo.block_size + 1;
      const int64_t num_blocks = int64_t{blocks_per_seq} * c.num_seqs;
      std::vector<uint8_t> k(static_cast<size_t>(num_blocks * geo.block_size * slot_bytes));
      std::vector<uint8_t> v(k.size());
      std::vector<float> row(static_cast<size_t>(geo.head_dim));
      uint32_t state = 12345;
      for (size_t off = 0; off < k.size(); off += row_bytes) {
        for (float& x : row) {
          state = state * 1664525u + 1013904223u;
          x = static_cast<float>(static_cast<int32_t>(state >> 8) - (1 << 23)) * 0x1p-23f;
        }
        encode_kv_row(dtype, row.data(), geo.head_dim, &k[off]);
        encode_kv_row(dtype, row.data(), geo.head_dim, &v[off]);
      }
      const PagedKv kv{k.data(), v.data(), geo.block_size, slot_bytes, num_blocks, dtype};
      std::vector<std::vector<int32_t>> tables(static_cast<size_t>(c.num_seqs));
      std::vector<AttentionSeq> seqs;
      int64_t rows = 0;
      int64_t keys_read = 0;
      for (int s = 0; s < c.num_seqs; ++s) {
        for (int32_t b = 0; b < blocks_per_seq; ++b) {
          // Interleave sequences' blocks so a sequence's blocks are not contiguous.
          tables[static_cast<size_t>(s)].push_back(b * c.num_seqs + s);
        }
        AttentionSeq a;
        a.q_row = rows;
        a.num_queries = c.prefill ? c.context : 1;
        a.first_pos = c.prefill ? 0 : c.context - 1;
        a.block_table = tables[static_cast<size_t>(s)];
        seqs.push_back(a);
        rows += a.num_queries;
        const AttentionShape shape{geo.num_heads, geo.num_kv_heads, geo.head_dim, geo.window, 1};
        for (int32_t i = 0; i < a.num_queries; ++i) {
          const KeyRange r = attention_key_range(a, shape, i);
          keys_read += r.end - r.begin;
        }
      }
      const AttentionShape shape{geo.num_heads, geo.num_kv_heads, geo.head_dim, geo.window, 1};
      const size_t width = static_cast<size_t>(geo.num_heads) * geo.head_dim;
      std::vector<float> q(static_cast<size_t>(rows) * width, 0.01f), out(q.size());
      for (SimdIsa isa : supported_simd_isas()) {
        const std::string label = base + " " + simd_isa_name(isa);
        if (only != nullptr && label.find(only) == std::string::npos) continue;
        paged_attention(q.data(), width, kv, shape, seqs, out.data(), width, &pool, isa);
        const int reps = c.prefill ? 3 : 5;
        const auto t0 = std::chrono::steady_clock::now();
        for (int r = 0; r < reps; ++r) {
          paged_attention(q.data(), width, kv, shape, seqs, out.data(), width, &pool, isa);
        }
        const double sec =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
        // One thread, timed by its own CPU clock: stable on a machine shared with builds.
        const double cpu_start = thread_cpu_seconds();
        for (int r = 0; r < reps; ++r) {
          paged_attention(q.data(), width, kv, shape, seqs, out.data(), width, nullptr, isa);
        }
        const double cpu_sec = (thread_cpu_seconds() - cpu_start) / reps;
        const double bytes = static_cast<double>(keys_read) * 2.0 * static_cast<double>(slot_bytes);
        std::cout << "[ bench    ] " << label << ": " << pool.size() << " threads " << sec * 1e3
                  << " ms wall; 1 thread " << cpu_sec * 1e3 << " ms CPU";
        if (!c.prefill) std::cout << " = " << bytes / cpu_sec / 1e9 << " GB/s of K/V per core";
        // Two FMAs (score, value) per key, head and head-dimension element.
        const double flops = 4.0 * static_cast<double>(keys_read) * geo.num_heads * geo.head_dim;
        if (c.prefill) std::cout << " = " << flops / cpu_sec / 1e9 << " GFLOP/s per core";
        std::cout << "\n";
      }
    }
  }
}

}  // namespace
}  // namespace gemmaserve::cpu
