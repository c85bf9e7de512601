// KvCache: per-layer storage only for cache-owning layers, per-type block pools, slot layout.
#include "model/kv_cache.h"

#include <gtest/gtest.h>

#include <set>

#include "core/error.h"
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

TEST(KvCache, SlotsAreDistinctAndContiguous) {
  const TextConfig cfg = dense_config();
  KvCache cache(cfg, {4, 2}, 3);
  std::set<const float*> seen;
  for (int layer : {0, 4, 5}) {
    const int slot = cfg.layers[layer].num_kv_heads * cfg.layers[layer].head_dim;
    const int blocks = cache.num_blocks(cfg.layers[layer].type);
    for (int b = 0; b < blocks; ++b) {
      for (int o = 0; o < 3; ++o) {
        float* k = cache.key(layer, b, o);
        float* v = cache.value(layer, b, o);
        EXPECT_TRUE(seen.insert(k).second);
        EXPECT_TRUE(seen.insert(v).second);
        // The slot (b, o) is row b * block_size + o of the layer's [slots, slot floats] store.
        EXPECT_EQ(k, cache.key(layer, 0, 0) + (b * 3 + o) * slot);
        EXPECT_EQ(v, cache.value(layer, 0, 0) + (b * 3 + o) * slot);
        for (int i = 0; i < slot; ++i) {
          k[i] = static_cast<float>(layer * 1000 + b * 10 + o);
          v[i] = -k[i];
        }
      }
    }
  }
  const KvCache& ro = cache;
  EXPECT_EQ(ro.key(4, 1, 2)[0], 4012.0f);
  EXPECT_EQ(ro.value(5, 3, 1)[31 % 16], -5031.0f);
  EXPECT_EQ(ro.key(0, 0, 0)[0], 0.0f);
}

TEST(KvCache, RejectsBadSizes) {
  const TextConfig cfg = dense_config();
  EXPECT_THROW(KvCache(cfg, {1, 1}, 0), InputError);
  EXPECT_THROW(KvCache(cfg, {-1, 1}, 4), InputError);
  KvCache empty(cfg, {0, 0}, 4);
  EXPECT_EQ(empty.total_bytes(), 0u);
}

}  // namespace
}  // namespace gemmaserve
