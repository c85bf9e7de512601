// KvCacheManager: per-group block tables, sliding-window release, KV-shared layers, prefix hits
// across groups, counters, and capacity planning for the real Gemma 4 geometries.
#include "engine/kv_cache_manager.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <numeric>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/config.h"
#include "model/kv_cache.h"
#include "model/test_model_presets.h"

namespace gemmaserve {
namespace {

constexpr AttentionType kS = AttentionType::kSliding;
constexpr AttentionType kF = AttentionType::kFull;
constexpr int kSlidingIdx = static_cast<int>(kS);
constexpr int kFullIdx = static_cast<int>(kF);

// A TextConfig with derived layer specs, built the way config.cpp resolves them (spec §1, §3.6):
// KV-shared layers read the last non-shared layer of their own type.
TextConfig make_text_config(int num_layers, const std::vector<AttentionType>& pattern,
                            int sliding_kv_heads, int full_kv_heads, int sliding_head_dim,
                            int full_head_dim, int num_kv_shared, int window) {
  TextConfig c;
  c.num_hidden_layers = num_layers;
  c.num_kv_shared_layers = num_kv_shared;
  c.sliding_window = window;
  c.head_dim = sliding_head_dim;
  c.global_head_dim = full_head_dim;
  c.num_key_value_heads = sliding_kv_heads;
  const int first_shared = num_layers - num_kv_shared;
  for (int i = 0; i < num_layers; ++i) {
    const AttentionType type = pattern[static_cast<size_t>(i) % pattern.size()];
    c.layer_types.push_back(type);
    LayerSpec s;
    s.layer_index = i;
    s.type = type;
    s.head_dim = type == kS ? sliding_head_dim : full_head_dim;
    s.num_kv_heads = type == kS ? sliding_kv_heads : full_kv_heads;
    s.kv_source_layer = i;
    if (i >= first_shared) {
      for (int j = first_shared - 1; j >= 0; --j) {
        if (c.layers[static_cast<size_t>(j)].type == type) {
          s.kv_source_layer = j;
          break;
        }
      }
    }
    c.layers.push_back(s);
  }
  return c;
}

// The released sizes, from the spec's variant table (§1).
TextConfig preset_config(const std::string& name) {
  const std::vector<AttentionType> four_one = {kS, kS, kS, kS, kF};
  const std::vector<AttentionType> five_one = {kS, kS, kS, kS, kS, kF};
  if (name == "e2b") return make_text_config(35, four_one, 1, 1, 256, 512, 20, 512);
  if (name == "e4b") return make_text_config(42, five_one, 2, 2, 256, 512, 18, 512);
  if (name == "31b") return make_text_config(60, five_one, 16, 4, 256, 512, 0, 1024);
  if (name == "26b-a4b") return make_text_config(30, five_one, 8, 2, 256, 512, 0, 1024);
  throw std::invalid_argument(name);
}

// Small hybrid model: S S F S S F, the last two layers KV-shared; window 32, block size 4.
constexpr int kBlock = 4;
constexpr int kWindow = 32;
TextConfig small_hybrid() { return make_text_config(6, {kS, kS, kF}, 1, 1, 8, 16, 2, kWindow); }
TextConfig small_full_only() { return make_text_config(2, {kF}, 1, 1, 8, 16, 0, kWindow); }
TextConfig small_sliding_only() { return make_text_config(2, {kS}, 1, 1, 8, 16, 0, kWindow); }

int ceil_div(int a, int b) { return (a + b - 1) / b; }
// Most blocks a sliding group may hold between steps.
constexpr int kWindowBlocks = (kWindow - 1 + kBlock - 1) / kBlock + 1;  // ceil((W-1)/B) + 1

std::vector<int32_t> tokens_from(int n, int32_t first) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), first);
  return v;
}

std::vector<BlockHash> hashes_of(const std::vector<int32_t>& tokens) {
  std::vector<BlockHash> h;
  append_block_hashes(tokens, kBlock, {}, &h);
  return h;
}

// Every position the next token (at `next_pos`) attends to has a real block in every group.
void expect_window_present(const KvCacheManager& kv, const std::string& id, int next_pos) {
  const BlockTables t = kv.block_tables(id);
  if (kv.has_group(kS)) {
    for (int p = std::max(0, next_pos - kWindow + 1); p < next_pos; ++p) {
      ASSERT_LT(static_cast<size_t>(p / kBlock), t[kSlidingIdx].size());
      EXPECT_NE(t[kSlidingIdx][static_cast<size_t>(p / kBlock)], kNullBlock) << "pos " << p;
    }
  }
  if (kv.has_group(kF)) {
    for (int p = 0; p < next_pos; ++p) {
      EXPECT_NE(t[kFullIdx][static_cast<size_t>(p / kBlock)], kNullBlock) << "pos " << p;
    }
  }
}

// Prefills `tokens` (after `start` cached ones) in chunks, committing after each step.
void prefill(KvCacheManager& kv, const std::string& id, const std::vector<int32_t>& tokens,
             int chunk, int start = 0) {
  const std::vector<BlockHash> hashes = hashes_of(tokens);
  int done = start;
  const int total = static_cast<int>(tokens.size());
  while (done < total) {
    const int n = std::min(chunk, total - done);
    ASSERT_TRUE(kv.allocate_slots(id, done, n)) << "at " << done;
    done += n;
    kv.commit(id, hashes, done);
    if (kv.has_group(kS)) {
      EXPECT_LE(kv.num_held_blocks(id, kS), kWindowBlocks) << "after " << done;
    }
    expect_window_present(kv, id, done);
  }
}

// ---- Groups and KV sharing ---------------------------------------------------------------------

TEST(KvCacheManager, OneGroupPerAttentionTypeThatOwnsACache) {
  const KvCacheManager hybrid(small_hybrid(), {100, 100}, kBlock);
  EXPECT_TRUE(hybrid.has_group(kS));
  EXPECT_TRUE(hybrid.has_group(kF));
  EXPECT_EQ(hybrid.sliding_window(), kWindow);
  const KvCacheManager full_only(small_full_only(), {0, 100}, kBlock);
  EXPECT_FALSE(full_only.has_group(kS));
  EXPECT_EQ(full_only.pool(kS), nullptr);
  EXPECT_EQ(full_only.sliding_window(), 0);
  EXPECT_THROW(KvCacheManager(small_hybrid(), {0, 100}, kBlock), InputError);
  EXPECT_THROW(KvCacheManager(small_hybrid(), {10, 10}, 0), InputError);
}

TEST(KvCacheManager, KvSharedLayersCostNothing) {
  // The small hybrid's 4 cache-owning layers alone, and with 2 or 8 more KV-shared layers.
  const TextConfig owners_only = make_text_config(4, {kS, kS, kF}, 1, 1, 8, 16, 0, kWindow);
  const TextConfig two_shared = small_hybrid();
  const TextConfig eight_shared = make_text_config(12, {kS, kS, kF}, 1, 1, 8, 16, 8, kWindow);
  for (const TextConfig* c : {&two_shared, &eight_shared}) {
    for (AttentionType t : {kS, kF}) {
      EXPECT_EQ(kv_bytes_per_token(*c, t, cpu::KvDtype::kBF16),
                kv_bytes_per_token(owners_only, t, cpu::KvDtype::kBF16));
    }
    EXPECT_EQ(bytes_per_block(*c, 16, cpu::KvDtype::kBF16),
              bytes_per_block(owners_only, 16, cpu::KvDtype::kBF16));
    // The naive count pays for the shared layers.
    EXPECT_GT(kv_bytes_per_token_at(*c, 64, kBlock, cpu::KvDtype::kBF16).naive,
              kv_bytes_per_token_at(owners_only, 64, kBlock, cpu::KvDtype::kBF16).naive);
  }
  // 3 sliding layers x (K+V) x 1 head x 8 dims x 2 bytes; 1 full layer x 2 x 16 x 2.
  EXPECT_EQ(kv_bytes_per_token(owners_only, kS, cpu::KvDtype::kBF16), 3 * 2 * 8 * 2);
  EXPECT_EQ(kv_bytes_per_token(owners_only, kF, cpu::KvDtype::kBF16), 1 * 2 * 16 * 2);
  EXPECT_EQ(group_bytes_per_block(owners_only, kF, 16, cpu::KvDtype::kBF16), 16 * 2 * 16 * 2);
}

// ---- Sliding-window release --------------------------------------------------------------------

TEST(KvCacheManager, SlidingGroupKeepsOnlyTheWindowDuringAChunkedPrompt) {
  KvCacheManager kv(small_hybrid(), {100, 100}, kBlock);
  const std::vector<int32_t> prompt = tokens_from(10 * kWindow, 1);
  prefill(kv, "a", prompt, 16);
  // The bound, and the tighter one the window allows.
  EXPECT_LE(kv.num_held_blocks("a", kS), ceil_div(kWindow, kBlock) + 1);
  EXPECT_EQ(kv.num_held_blocks("a", kS), kWindowBlocks - 1);  // 320 is block-aligned: 8
  EXPECT_EQ(kv.num_held_blocks("a", kF), 10 * kWindow / kBlock);
  EXPECT_EQ(kv.pool(kS)->num_free_blocks(), 100 - kv.num_held_blocks("a", kS));
  const BlockTables t = kv.block_tables("a");
  ASSERT_EQ(t[kSlidingIdx].size(), 80u);
  ASSERT_EQ(t[kFullIdx].size(), 80u);
  for (size_t i = 0; i < 72; ++i) EXPECT_EQ(t[kSlidingIdx][i], kNullBlock) << i;
  for (size_t i = 72; i < 80; ++i) EXPECT_NE(t[kSlidingIdx][i], kNullBlock) << i;
}

TEST(KvCacheManager, OneChunkPrefillHoldsTheChunkThenReleases) {
  KvCacheManager kv(small_hybrid(), {100, 100}, kBlock);
  const std::vector<int32_t> prompt = tokens_from(10 * kWindow, 1);
  ASSERT_TRUE(kv.allocate_slots("a", 0, 10 * kWindow));
  EXPECT_EQ(kv.num_held_blocks("a", kS), 80);  // the model writes every position of the chunk
  kv.commit("a", hashes_of(prompt), 10 * kWindow);
  EXPECT_LE(kv.num_held_blocks("a", kS), ceil_div(kWindow, kBlock) + 1);
  EXPECT_EQ(kv.pool(kS)->num_free_blocks(), 100 - kv.num_held_blocks("a", kS));
  expect_window_present(kv, "a", 10 * kWindow);
}

TEST(KvCacheManager, DecodingSlidesTheWindowBlockByBlock) {
  KvCacheManager kv(small_hybrid(), {100, 200}, kBlock);
  std::vector<int32_t> tokens = tokens_from(3 * kWindow + 1, 1);
  prefill(kv, "a", tokens, 64);
  for (int step = 0; step < 40; ++step) {
    // One decode: a sampled token joins, everything before it is computed.
    const int done = static_cast<int>(tokens.size());
    tokens.push_back(5000 + step);
    ASSERT_TRUE(kv.allocate_slots("a", done, 1));
    EXPECT_LE(kv.num_held_blocks("a", kS), kWindowBlocks);  // even mid-step
    kv.commit("a", hashes_of(tokens), done + 1);
    EXPECT_LE(kv.num_held_blocks("a", kS), kWindowBlocks);
    expect_window_present(kv, "a", done + 1);
  }
  EXPECT_EQ(kv.num_held_blocks("a", kF), ceil_div(static_cast<int>(tokens.size()), kBlock));
}

TEST(KvCacheManager, RefusedAllocationTakesNothing) {
  KvCacheManager kv(small_hybrid(), {12, 100}, kBlock);
  ASSERT_TRUE(kv.allocate_slots("a", 0, 40));  // 10 blocks per group
  const int free_s = kv.pool(kS)->num_free_blocks();
  const int free_f = kv.pool(kF)->num_free_blocks();
  EXPECT_FALSE(kv.allocate_slots("b", 0, 12));  // 3 sliding blocks, 2 free
  EXPECT_FALSE(kv.has_request("b"));
  EXPECT_EQ(kv.pool(kS)->num_free_blocks(), free_s);
  EXPECT_EQ(kv.pool(kF)->num_free_blocks(), free_f);  // the full group had room: still untouched
  // A running request that cannot grow keeps its table as it was.
  EXPECT_FALSE(kv.allocate_slots("a", 0, 52));
  EXPECT_EQ(kv.block_tables("a")[kFullIdx].size(), 10u);
  EXPECT_TRUE(kv.allocate_slots("a", 0, 48));
}

TEST(KvCacheManager, FreeReturnsBlocksTailFirst) {
  KvCacheManager kv(small_full_only(), {0, 8}, kBlock);
  ASSERT_TRUE(kv.allocate_slots("a", 0, 12));
  const std::vector<BlockId> table(kv.block_tables("a")[kFullIdx].begin(),
                                   kv.block_tables("a")[kFullIdx].end());
  ASSERT_EQ(table, (std::vector<BlockId>{0, 1, 2}));
  kv.free("a");
  EXPECT_FALSE(kv.has_request("a"));
  EXPECT_EQ(kv.pool(kF)->free_queue(), (std::vector<BlockId>{3, 4, 5, 6, 7, 2, 1, 0}));
  kv.free("a");  // unknown ids are ignored
}

// ---- Prefix caching ----------------------------------------------------------------------------

TEST(KvCacheManager, FullAttentionPrefixHitAndCounters) {
  KvCacheManager kv(small_full_only(), {0, 64}, kBlock);
  const std::vector<int32_t> prompt = tokens_from(42, 1);
  prefill(kv, "a", prompt, 16);
  const std::vector<BlockId> a_blocks(kv.block_tables("a")[kFullIdx].begin(),
                                      kv.block_tables("a")[kFullIdx].end());
  kv.free("a");

  const PrefixHit hit = kv.find_prefix_hit(hashes_of(prompt), 42);
  EXPECT_EQ(hit.num_tokens, 40);  // 10 full blocks; the last 2 tokens form no full block
  ASSERT_EQ(hit.blocks[kFullIdx].size(), 10u);
  for (size_t i = 0; i < 10; ++i) EXPECT_EQ(hit.blocks[kFullIdx][i], a_blocks[i]);
  EXPECT_EQ(kv.prefix_cache_stats().requests, 0u);  // counted once admitted
  ASSERT_TRUE(kv.allocate_slots("b", hit.num_tokens, 2, &hit));
  EXPECT_EQ(kv.prefix_cache_stats().requests, 1u);
  EXPECT_EQ(kv.prefix_cache_stats().queries, 42u);
  EXPECT_EQ(kv.prefix_cache_stats().hits, 40u);
  EXPECT_EQ(kv.pool(kF)->ref_count(a_blocks[0]), 1);
  EXPECT_EQ(kv.block_tables("b")[kFullIdx].size(), 11u);
}

TEST(KvCacheManager, HitAlwaysLeavesTheLastTokenToCompute) {
  KvCacheManager kv(small_full_only(), {0, 64}, kBlock);
  const std::vector<int32_t> prompt = tokens_from(32, 1);  // exactly 8 blocks
  prefill(kv, "a", prompt, 32);
  kv.free("a");
  EXPECT_EQ(kv.find_prefix_hit(hashes_of(prompt), 32).num_tokens, 28);
}

TEST(KvCacheManager, SharedPrefixBlocksAreRefCounted) {
  KvCacheManager kv(small_full_only(), {0, 64}, kBlock);
  const std::vector<int32_t> prompt = tokens_from(20, 1);
  prefill(kv, "a", prompt, 20);  // still running
  const PrefixHit hit = kv.find_prefix_hit(hashes_of(prompt), 20);
  ASSERT_EQ(hit.num_tokens, 16);
  ASSERT_TRUE(kv.allocate_slots("b", 16, 4, &hit));
  const BlockId first = kv.block_tables("a")[kFullIdx][0];
  EXPECT_EQ(kv.block_tables("b")[kFullIdx][0], first);
  EXPECT_EQ(kv.pool(kF)->ref_count(first), 2);
  kv.free("a");
  EXPECT_EQ(kv.pool(kF)->ref_count(first), 1);
  EXPECT_FALSE(kv.pool(kF)->in_free_queue(first));
}

TEST(KvCacheManager, HybridHitNeedsOnlyTheWindowInSlidingGroups) {
  KvCacheManager kv(small_hybrid(), {100, 200}, kBlock);
  const std::vector<int32_t> prompt = tokens_from(10 * kWindow, 1);
  prefill(kv, "a", prompt, 16);
  kv.free("a");

  std::vector<int32_t> longer = prompt;
  for (int i = 0; i < 5; ++i) longer.push_back(9000 + i);
  const PrefixHit hit = kv.find_prefix_hit(hashes_of(longer), 325);
  EXPECT_EQ(hit.num_tokens, 320);
  ASSERT_EQ(hit.blocks[kSlidingIdx].size(), 80u);
  ASSERT_EQ(hit.blocks[kFullIdx].size(), 80u);
  // Sliding: only the ceil((W-1)/B) = 8 blocks before the hit's end are needed.
  for (size_t i = 0; i < 72; ++i) EXPECT_EQ(hit.blocks[kSlidingIdx][i], kNullBlock) << i;
  for (size_t i = 72; i < 80; ++i) EXPECT_NE(hit.blocks[kSlidingIdx][i], kNullBlock) << i;

  ASSERT_TRUE(kv.allocate_slots("b", hit.num_tokens, 5, &hit));
  EXPECT_EQ(kv.prefix_cache_stats().hits, 320u);
  EXPECT_EQ(kv.prefix_cache_stats().queries, 325u);
  expect_window_present(kv, "b", 320);
  kv.commit("b", hashes_of(longer), 325);
  EXPECT_LE(kv.num_held_blocks("b", kS), kWindowBlocks);
  expect_window_present(kv, "b", 325);
}

TEST(KvCacheManager, HitIsLimitedByTheGroupThatLostBlocks) {
  KvCacheManager kv(small_hybrid(), {40, 400}, kBlock);
  const std::vector<int32_t> prompt = tokens_from(10 * kWindow, 1);
  // D keeps the first 160 tokens (and its sliding window over them) in use.
  std::vector<int32_t> d(prompt.begin(), prompt.begin() + 162);
  prefill(kv, "d", d, 16);
  // A runs the whole prompt on top of D's prefix, then finishes.
  PrefixHit hit = kv.find_prefix_hit(hashes_of(prompt), 320);
  ASSERT_EQ(hit.num_tokens, 160);
  ASSERT_TRUE(kv.allocate_slots("a", 160, 16, &hit));
  kv.commit("a", hashes_of(prompt), 176);
  prefill(kv, "a", prompt, 16, 176);
  const BlockId last_sliding = kv.block_tables("a")[kSlidingIdx][79];
  kv.free("a");
  // Another request evicts A's sliding blocks up to its last one, in LRU order.
  const std::vector<BlockId> queue = kv.pool(kS)->free_queue();
  const int position =
      static_cast<int>(std::find(queue.begin(), queue.end(), last_sliding) - queue.begin());
  ASSERT_LT(position, static_cast<int>(queue.size()));
  ASSERT_TRUE(kv.allocate_slots("c", 0, (position + 1) * kBlock));
  EXPECT_FALSE(kv.pool(kS)->block_hash(last_sliding).has_value());

  std::vector<int32_t> longer = prompt;
  longer.push_back(777);
  hit = kv.find_prefix_hit(hashes_of(longer), 321);
  // The full group still holds all 80 blocks, but the only 8 contiguous sliding blocks left are
  // D's window ending at block 39: the hit stops there for every group.
  EXPECT_EQ(hit.num_tokens, 160);
  EXPECT_EQ(hit.blocks[kFullIdx].size(), 40u);
  EXPECT_EQ(hit.blocks[kSlidingIdx].size(), 40u);
  EXPECT_EQ(kv.find_prefix_hit(hashes_of(longer), 321).num_tokens, 160);
}

TEST(KvCacheManager, ShortHitNeedsSlidingBlocksFromTheStart) {
  KvCacheManager kv(small_hybrid(), {200, 400}, kBlock);
  const std::vector<int32_t> prompt = tokens_from(10 * kWindow, 1);
  prefill(kv, "a", prompt, 16);
  kv.free("a");
  // B shares only the first 5 blocks (20 tokens), fewer than the 8 the window needs: a hit from
  // block 0 is still valid since nothing precedes it.
  std::vector<int32_t> b(prompt.begin(), prompt.begin() + 20);
  for (int i = 0; i < 30; ++i) b.push_back(8000 + i);
  PrefixHit hit = kv.find_prefix_hit(hashes_of(b), static_cast<int>(b.size()));
  EXPECT_EQ(hit.num_tokens, 20);
  ASSERT_EQ(hit.blocks[kSlidingIdx].size(), 5u);
  for (BlockId id : hit.blocks[kSlidingIdx]) EXPECT_NE(id, kNullBlock);

  // Once A's sliding block 0 is evicted, the sliding group has no valid hit, so neither does B.
  const BlockId block0 = hit.blocks[kSlidingIdx][0];
  const std::vector<BlockId> queue = kv.pool(kS)->free_queue();
  const int position =
      static_cast<int>(std::find(queue.begin(), queue.end(), block0) - queue.begin());
  ASSERT_TRUE(kv.allocate_slots("c", 0, (position + 1) * kBlock));
  hit = kv.find_prefix_hit(hashes_of(b), static_cast<int>(b.size()));
  EXPECT_EQ(hit.num_tokens, 0);
  EXPECT_TRUE(hit.blocks[kFullIdx].empty());
}

TEST(KvCacheManager, SlidingOnlyModelHitsWithOnlyTheWindowCached) {
  KvCacheManager kv(small_sliding_only(), {60, 0}, kBlock);
  const std::vector<int32_t> prompt = tokens_from(10 * kWindow, 1);
  prefill(kv, "a", prompt, 16);
  const std::vector<BlockId> tail(kv.block_tables("a")[kSlidingIdx].begin() + 72,
                                  kv.block_tables("a")[kSlidingIdx].end());
  kv.free("a");
  // Evict everything in front of A's final window.
  const std::vector<BlockId> queue = kv.pool(kS)->free_queue();
  int evict = 0;
  while (std::find(tail.begin(), tail.end(), queue[static_cast<size_t>(evict)]) == tail.end()) {
    ++evict;
  }
  ASSERT_GT(evict, 8);
  ASSERT_TRUE(kv.allocate_slots("c", 0, evict * kBlock));
  for (BlockId b : tail) ASSERT_TRUE(kv.pool(kS)->block_hash(b).has_value());
  std::vector<int32_t> longer = prompt;
  longer.push_back(1);
  const PrefixHit hit = kv.find_prefix_hit(hashes_of(longer), 321);
  EXPECT_EQ(hit.num_tokens, 320);
}

TEST(KvCacheManager, PrefixCachingOff) {
  KvCacheManager kv(small_full_only(), {0, 64}, kBlock, /*enable_prefix_caching=*/false);
  const std::vector<int32_t> prompt = tokens_from(20, 1);
  prefill(kv, "a", prompt, 20);
  kv.free("a");
  EXPECT_EQ(kv.pool(kF)->num_cached_free_blocks(), 0);
  const PrefixHit hit = kv.find_prefix_hit(hashes_of(prompt), 20);
  EXPECT_EQ(hit.num_tokens, 0);
  ASSERT_TRUE(kv.allocate_slots("b", 0, 20, &hit));
  EXPECT_EQ(kv.prefix_cache_stats().requests, 0u);
}

TEST(KvCacheManager, ResetPrefixCacheOnlyWhenIdle) {
  KvCacheManager kv(small_hybrid(), {50, 50}, kBlock);
  const std::vector<int32_t> prompt = tokens_from(20, 1);
  prefill(kv, "a", prompt, 20);
  EXPECT_FALSE(kv.reset_prefix_cache());
  kv.free("a");
  EXPECT_TRUE(kv.reset_prefix_cache());
  EXPECT_EQ(kv.find_prefix_hit(hashes_of(prompt), 20).num_tokens, 0);
}

TEST(KvCacheManager, PeakBlocksAndFitsAlone) {
  const KvCacheManager kv(small_hybrid(), {20, 100}, kBlock);
  EXPECT_EQ(kv.peak_blocks_per_sequence(kF, 321, 16), 81);
  // Window of 31 keys before a chunk of 16, at any alignment: ceil(47/4) + 1.
  EXPECT_EQ(kv.peak_blocks_per_sequence(kS, 321, 16), 13);
  EXPECT_EQ(kv.peak_blocks_per_sequence(kS, 8, 16), 2);
  EXPECT_TRUE(kv.fits_alone(400, 16));
  EXPECT_FALSE(kv.fits_alone(401, 16));  // 101 full blocks
  EXPECT_FALSE(kv.fits_alone(100, 64));  // 25 sliding blocks
}

// ---- Capacity planning -------------------------------------------------------------------------

TEST(KvCachePlanning, HandBuiltPresetsMatchTheProjectPresets) {
  for (const std::string name : {"e2b", "e4b", "31b", "26b-a4b"}) {
    const TextConfig mine = preset_config(name);
    const TextConfig theirs = parse_model_config(test_model_config(name), name).text;
    ASSERT_EQ(mine.layers.size(), theirs.layers.size()) << name;
    EXPECT_EQ(mine.sliding_window, theirs.sliding_window) << name;
    for (size_t i = 0; i < mine.layers.size(); ++i) {
      EXPECT_EQ(mine.layers[i].type, theirs.layers[i].type) << name << " layer " << i;
      EXPECT_EQ(mine.layers[i].head_dim, theirs.layers[i].head_dim) << name << " layer " << i;
      EXPECT_EQ(mine.layers[i].num_kv_heads, theirs.layers[i].num_kv_heads)
          << name << " layer " << i;
      EXPECT_EQ(mine.layers[i].kv_source_layer, theirs.layers[i].kv_source_layer)
          << name << " layer " << i;
    }
  }
}

// Assumption: bf16 K and V (2 bytes per element), block size 16, one sequence of 4096 tokens;
// "ours" counts every block that sequence holds (sliding groups: ceil((W-1)/16)+1 blocks),
// "naive" keeps K/V of every token in every layer (KV-shared ones too) at its own geometry.
TEST(KvCachePlanning, BytesPerTokenOfTheReleasedModels) {
  struct Expected {
    const char* name;
    int64_t ours;
    int64_t naive;
  };
  const Expected expected[] = {{"e2b", 7728, 43008},
                               {"e4b", 21664, 100352},
                               {"31b", 289920, 901120},
                               {"26b-a4b", 72480, 225280}};
  for (const Expected& e : expected) {
    const KvBytesPerToken b =
        kv_bytes_per_token_at(preset_config(e.name), 4096, 16, cpu::KvDtype::kBF16);
    std::cout << "BYTES_PER_TOKEN " << e.name << " ours=" << std::llround(b.ours)
              << " naive=" << b.naive << "\n";
    EXPECT_DOUBLE_EQ(b.ours, static_cast<double>(e.ours)) << e.name;
    EXPECT_EQ(b.naive, e.naive) << e.name;
  }
}

TEST(KvCachePlanning, PlanReportsBlocksTokensAndConcurrency) {
  const TextConfig e2b = preset_config("e2b");
  KvCachePlanOptions o;
  o.block_size = 16;
  o.kv_dtype = cpu::KvDtype::kBF16;
  o.memory_bytes = int64_t{1} << 30;
  o.max_model_len = 4096;
  const KvCachePlan plan = plan_kv_cache(e2b, o);
  for (const std::string& line : plan.summary_lines()) std::cout << "PLAN e2b " << line << "\n";
  ASSERT_GT(plan.num_blocks[kSlidingIdx], 0);
  ASSERT_GT(plan.num_blocks[kFullIdx], 0);
  EXPECT_LE(plan.total_bytes, o.memory_bytes);
  // Less than one block of either group left over.
  EXPECT_LT(o.memory_bytes - plan.total_bytes,
            std::max(plan.block_bytes[kSlidingIdx], plan.block_bytes[kFullIdx]));
  EXPECT_EQ(plan.block_bytes[kSlidingIdx], 12 * 2 * 256 * 2 * 16);
  EXPECT_EQ(plan.block_bytes[kFullIdx], 3 * 2 * 512 * 2 * 16);
  EXPECT_EQ(plan.num_tokens, int64_t{plan.num_blocks[kFullIdx]} * 16);
  const double expected_concurrency =
      std::min(plan.num_blocks[kSlidingIdx] / 33.0, plan.num_blocks[kFullIdx] / 256.0);
  EXPECT_DOUBLE_EQ(plan.max_concurrency, expected_concurrency);
  EXPECT_DOUBLE_EQ(plan.bytes_per_token.ours, 7728.0);

  // The split loses the same fraction against a shared pool for short and for max-length
  // requests: 1 / (a_short + 1 - a_long).
  const double ps = static_cast<double>(plan.block_bytes[kSlidingIdx]);
  const double pf = static_cast<double>(plan.block_bytes[kFullIdx]);
  const double a_short = ps / (ps + pf);
  const double a_long = 33 * ps / (33 * ps + 256 * pf);
  const double efficiency = 1.0 / (a_short + 1.0 - a_long);
  const double m = static_cast<double>(o.memory_bytes);
  const double long_eff = plan.max_concurrency / (m / (33 * ps + 256 * pf));
  const double short_concurrency =
      std::min(plan.num_blocks[kSlidingIdx] / 7.0, plan.num_blocks[kFullIdx] / 7.0);
  const double short_eff = short_concurrency / (m / (7 * ps + 7 * pf));
  EXPECT_NEAR(long_eff, efficiency, 0.01);
  EXPECT_NEAR(short_eff, efficiency, 0.01);
  // The plan's counts build a working manager that fits a max-length request.
  const KvCacheManager kv(e2b, plan.num_blocks, 16);
  EXPECT_TRUE(kv.fits_alone(4096, o.max_num_batched_tokens));
}

TEST(KvCachePlanning, PlanMatchesTheModelsFloatKvCache) {
  // The CPU KvCache stores floats: planned with 4-byte elements, its size is the plan's.
  const TextConfig config = small_hybrid();
  KvCachePlanOptions o;
  o.block_size = kBlock;
  o.kv_dtype = cpu::KvDtype::kF32;
  o.memory_bytes = 1 << 20;
  o.max_model_len = 256;
  o.max_num_batched_tokens = 64;
  const KvCachePlan plan = plan_kv_cache(config, o);
  const KvCache cache(config, plan.num_blocks, kBlock);
  EXPECT_EQ(static_cast<int64_t>(cache.total_bytes()), plan.total_bytes);
  EXPECT_EQ(static_cast<int64_t>(KvCache::bytes_per_token(config, kS)),
            kv_bytes_per_token(config, kS, cpu::KvDtype::kF32));
}

TEST(KvCachePlanning, SingleGroupModelsGetTheWholeBudget) {
  const TextConfig full_only = small_full_only();
  KvCachePlanOptions o;
  o.block_size = 4;
  o.memory_bytes = 10000;
  o.max_model_len = 64;
  const KvCachePlan plan = plan_kv_cache(full_only, o);
  const int64_t page = group_bytes_per_block(full_only, kF, 4, cpu::KvDtype::kBF16);
  EXPECT_EQ(plan.num_blocks[kSlidingIdx], 0);
  EXPECT_EQ(plan.num_blocks[kFullIdx], 10000 / page);
  EXPECT_DOUBLE_EQ(plan.max_concurrency, static_cast<double>(10000 / page) / 16.0);
}

TEST(KvCachePlanning, TooSmallABudgetNamesTheLengthThatFits) {
  KvCachePlanOptions o;
  o.block_size = 16;
  o.memory_bytes = 8 << 20;  // 8 MiB
  o.max_model_len = 4096;
  try {
    plan_kv_cache(preset_config("e2b"), o);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("--kv-cache-memory-bytes 8388608 is too small"), std::string::npos) << msg;
    EXPECT_NE(msg.find("estimated maximum model length is "), std::string::npos) << msg;
  }
  o.memory_bytes = 0;
  EXPECT_THROW(plan_kv_cache(preset_config("e2b"), o), InputError);
}

TEST(KvCachePlanning, SteadyBlocksPerSequence) {
  EXPECT_EQ(steady_blocks_per_sequence(4096, 16, 0), 256);
  EXPECT_EQ(steady_blocks_per_sequence(4096, 16, 512), 33);
  EXPECT_EQ(steady_blocks_per_sequence(100, 16, 512), 7);
  EXPECT_EQ(steady_blocks_per_sequence(4096, 16, 1024), 65);
}

}  // namespace
}  // namespace gemmaserve
