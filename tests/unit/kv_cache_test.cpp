// KvCache: per-layer storage only for cache-owning layers, per-type block pools, slot layout.
#include "model/kv_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <set>
#include <vector>

#include "core/aligned.h"
#include "core/error.h"
#include "gemma4_golden_harness.h"
#include "model/config.h"
#include "test_support.h"

namespace gemmaserve {
namespace {

TextConfig dense_config() {
  return load_model_config(testing::source_dir() / "tests/data/golden/models/dense").text;
}

TEST(KvCache, OwnsStorageOnlyForNonSharedLayers) {
  // dense: 10 layers (s,s,s,s,f) x 2, last 4 KV-shared; sliding 1 KV head x 16, full 1 x 32.
  const TextConfig cfg = dense_config();
  ASSERT_EQ(cfg.first_kv_shared_layer(), 6);
  const size_t sliding = KvCache::bytes_per_token(cfg, AttentionType::kSliding);
  const size_t full = KvCache::bytes_per_token(cfg, AttentionType::kFull);
  EXPECT_EQ(sliding, 5u * 2 * 4 * 16);  // layers 0-3 and 5
  EXPECT_EQ(full, 1u * 2 * 4 * 32);     // layer 4
  KvCache cache(cfg, {7, 3}, 5);
  EXPECT_EQ(cache.block_size(), 5);
  EXPECT_EQ(cache.num_blocks(AttentionType::kSliding), 7);
  EXPECT_EQ(cache.num_blocks(AttentionType::kFull), 3);
  EXPECT_EQ(cache.total_bytes(), 7u * 5 * sliding + 3u * 5 * full);
}

// Whole-vector loads of a row must not straddle two cache lines (malloc's large blocks start
// 16 bytes past a page).
TEST(KvCache, StorageStartsOnACacheLine) {
  const TextConfig cfg = dense_config();
  KvCache cache(cfg, {7, 3}, 5);
  for (int l = 0; l < cfg.first_kv_shared_layer(); ++l) {
    const cpu::PagedKv kv = cache.paged(l);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(kv.k) % 64, 0u) << l;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(kv.v) % 64, 0u) << l;
  }
  for (size_t n : {1u, 100u, 1u << 20}) {
    AlignedVector<float> v(n);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data()) % 64, 0u) << n;
  }
}

TEST(KvCache, SlotsAreDistinctAndContiguous) {
  const TextConfig cfg = dense_config();
  KvCache cache(cfg, {4, 2}, 3);
  std::set<const uint8_t*> seen;
  for (int layer : {0, 4, 5}) {
    const int slot = cfg.layers[layer].num_kv_heads * cfg.layers[layer].head_dim;
    const int blocks = cache.num_blocks(cfg.layers[layer].type);
    std::vector<float> k(static_cast<size_t>(slot)), v(k.size());
    for (int b = 0; b < blocks; ++b) {
      for (int o = 0; o < 3; ++o) {
        const uint8_t* kb = cache.key_bytes(layer, b, o);
        const uint8_t* vb = cache.value_bytes(layer, b, o);
        EXPECT_TRUE(seen.insert(kb).second);
        EXPECT_TRUE(seen.insert(vb).second);
        // The slot (b, o) is row b * block_size + o of the layer's [slots, slot bytes] store.
        EXPECT_EQ(kb, cache.key_bytes(layer, 0, 0) + (b * 3 + o) * slot * sizeof(float));
        EXPECT_EQ(vb, cache.value_bytes(layer, 0, 0) + (b * 3 + o) * slot * sizeof(float));
        for (int i = 0; i < slot; ++i) {
          k[static_cast<size_t>(i)] = static_cast<float>(layer * 1000 + b * 10 + o);
          v[static_cast<size_t>(i)] = -k[static_cast<size_t>(i)];
        }
        cache.write(layer, b, o, k.data(), v.data());
      }
    }
  }
  std::vector<float> k(32), v(32);
  cache.read(4, 1, 2, k.data(), v.data());
  EXPECT_EQ(k[0], 4012.0f);
  cache.read(5, 3, 1, k.data(), v.data());
  EXPECT_EQ(v[15], -5031.0f);
  cache.read(0, 0, 0, k.data(), v.data());
  EXPECT_EQ(k[0], 0.0f);
  const cpu::PagedKv kv = cache.paged(4);
  EXPECT_EQ(kv.k, cache.key_bytes(4, 0, 0));
  EXPECT_EQ(kv.slot_bytes, 32 * 4);
  EXPECT_EQ(kv.num_blocks, 2);
  EXPECT_EQ(kv.dtype, cpu::KvDtype::kF32);
}

// Each dtype stores rows of its own size and reads back within its rounding.
TEST(KvCache, DtypesSizeAndRoundTrip) {
  const TextConfig cfg = dense_config();  // sliding head_dim 16, full 32, 1 KV head
  struct Case {
    cpu::KvDtype dtype;
    size_t row16, row32;  // bytes of a 16- and a 32-element row
    float rel_tol;
  };
  for (const Case& c :
       {Case{cpu::KvDtype::kF32, 64, 128, 0.0f}, Case{cpu::KvDtype::kBF16, 32, 64, 1.0f / 256},
        Case{cpu::KvDtype::kF16, 32, 64, 1.0f / 2048},
        Case{cpu::KvDtype::kFp8E4M3, 20, 36, 1.0f / 16},
        Case{cpu::KvDtype::kQ8_0, 18, 34, 1.0f / 127}}) {
    const char* name = cpu::kv_dtype_name(c.dtype);
    EXPECT_EQ(KvCache::bytes_per_token(cfg, AttentionType::kSliding, c.dtype), 5 * 2 * c.row16)
        << name;
    EXPECT_EQ(KvCache::bytes_per_token(cfg, AttentionType::kFull, c.dtype), 2 * c.row32) << name;
    KvCache cache(cfg, {3, 2}, 4, c.dtype);
    EXPECT_EQ(cache.dtype(), c.dtype);
    EXPECT_EQ(cache.total_bytes(), 3u * 4 * 5 * 2 * c.row16 + 2u * 4 * 2 * c.row32) << name;
    std::vector<float> k(32), v(32), k2(32), v2(32);
    for (int i = 0; i < 32; ++i) {
      k[static_cast<size_t>(i)] = std::sin(0.7f * static_cast<float>(i)) * 3.0f;
      v[static_cast<size_t>(i)] = std::cos(1.3f * static_cast<float>(i)) - 0.25f;
    }
    cache.write(4, 1, 3, k.data(), v.data());
    cache.read(4, 1, 3, k2.data(), v2.data());
    float kmax = 0.0f, vmax = 0.0f;
    for (int i = 0; i < 32; ++i) {
      kmax = std::max(kmax, std::fabs(k[static_cast<size_t>(i)]));
      vmax = std::max(vmax, std::fabs(v[static_cast<size_t>(i)]));
    }
    for (size_t i = 0; i < 32; ++i) {
      // Block / row scales make the error relative to the row's largest value.
      EXPECT_NEAR(k2[i], k[i], c.rel_tol * kmax) << name << " k " << i;
      EXPECT_NEAR(v2[i], v[i], c.rel_tol * vmax) << name << " v " << i;
    }
  }
}

TEST(KvCache, RejectsBadSizes) {
  const TextConfig cfg = dense_config();
  EXPECT_THROW(KvCache(cfg, {1, 1}, 0), InputError);
  EXPECT_THROW(KvCache(cfg, {-1, 1}, 4), InputError);
  KvCache empty(cfg, {0, 0}, 4);
  EXPECT_EQ(empty.total_bytes(), 0u);
}

// Teacher-forced quality of each KV dtype on the golden tiny models: one prefill over a
// 160-token prompt (10x the sliding window) with every position's logits, against f32 K/V.
// Reports the share of positions whose top-1 token agrees and the logit changes (the random
// tiny models have sharp logits: one flipped MoE route moves a row by several units).
TEST(KvCacheQuality, TopOneAgreementWithFloatKv) {
  struct Bound {
    cpu::KvDtype dtype;
    double min_agreement;
  };
  const Bound bounds[] = {{cpu::KvDtype::kBF16, 0.97},
                          {cpu::KvDtype::kF16, 0.99},
                          {cpu::KvDtype::kFp8E4M3, 0.85},
                          {cpu::KvDtype::kQ8_0, 0.95}};
  std::vector<int32_t> prompt = {2};
  for (int i = 1; i < 160; ++i) prompt.push_back(3 + (i * 37 + 11) % 480);
  for (const char* name : {"dense", "keqv", "moe"}) {
    auto model = golden::load_model(testing::source_dir() / "tests/data/golden/models" / name, 2);
    const int vocab = model->vocab_size();
    const int block = 16;
    const int blocks = static_cast<int>(prompt.size()) / block + 1;
    std::vector<int32_t> table(static_cast<size_t>(blocks));
    for (int b = 0; b < blocks; ++b) table[static_cast<size_t>(b)] = blocks - 1 - b;
    auto run = [&](cpu::KvDtype dtype) {
      KvCache cache(model->text_config(), {blocks, blocks}, block, dtype);
      SequenceInput in;
      in.tokens = prompt;
      in.block_tables = {table, table};
      in.logits = LogitsWanted::kAll;
      ForwardOutput out;
      model->forward(std::span(&in, 1), cache, &out);
      return out.logits;
    };
    const std::vector<float> base = run(cpu::KvDtype::kF32);
    for (const Bound& b : bounds) {
      const std::vector<float> got = run(b.dtype);
      int agree = 0;
      float worst = 0.0f;
      for (size_t p = 0; p < prompt.size(); ++p) {
        const float* x = &got[p * static_cast<size_t>(vocab)];
        const float* y = &base[p * static_cast<size_t>(vocab)];
        agree += golden::argmax(x, vocab) == golden::argmax(y, vocab);
        worst = std::max(worst, golden::max_abs_diff(x, y, static_cast<size_t>(vocab)));
      }
      const double share = static_cast<double>(agree) / static_cast<double>(prompt.size());
      std::cout << "[ quality  ] " << name << " " << cpu::kv_dtype_name(b.dtype)
                << ": top-1 agreement " << agree << "/" << prompt.size() << ", max |logit diff| "
                << worst << "\n";
      EXPECT_GE(share, b.min_agreement) << name << " " << cpu::kv_dtype_name(b.dtype);
    }
  }
}

}  // namespace
}  // namespace gemmaserve
