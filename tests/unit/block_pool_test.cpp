// KvBlockPool (ref counts, LRU free queue, prefix-cache index, eviction) and block hashing.
#include "engine/block_pool.h"

#include <gtest/gtest.h>

#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/block_hash.h"

namespace gemmaserve {
namespace {

std::string hex(const Sha256::Digest& d) { return BlockHash{d}.hex(); }

BlockHash hash_of(const std::string& text) { return BlockHash{Sha256::of(text)}; }

std::vector<int32_t> iota_tokens(int n, int32_t first = 0) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), first);
  return v;
}

// ---- SHA-256 (FIPS 180-4 test vectors) ---------------------------------------------------------

TEST(Sha256, KnownVectors) {
  EXPECT_EQ(hex(Sha256::of("")),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hex(Sha256::of("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hex(Sha256::of("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(Sha256, IncrementalUpdatesMatchOneShot) {
  // One million 'a' fed in uneven pieces crosses every buffer boundary case.
  Sha256 h;
  const std::string piece(997, 'a');
  size_t fed = 0;
  while (fed + piece.size() <= 1000000) {
    h.update(piece);
    fed += piece.size();
  }
  h.update(std::string(1000000 - fed, 'a'));
  EXPECT_EQ(hex(h.finish()), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// ---- Chained block hashes ----------------------------------------------------------------------

TEST(BlockHash, ChainCoversTheWholePrefix) {
  const BlockHashExtras none;
  const std::vector<int32_t> a = iota_tokens(48);
  std::vector<int32_t> b = a;
  b[3] = 999;  // differs in block 0 only
  std::vector<BlockHash> ha, hb;
  append_block_hashes(a, 16, none, &ha);
  append_block_hashes(b, 16, none, &hb);
  ASSERT_EQ(ha.size(), 3u);
  ASSERT_EQ(hb.size(), 3u);
  // Blocks 1 and 2 hold equal tokens but their parents differ, so every hash differs.
  for (int i = 0; i < 3; ++i) EXPECT_NE(ha[i], hb[i]) << i;
  // Same tokens, same chain.
  std::vector<BlockHash> again;
  append_block_hashes(a, 16, none, &again);
  EXPECT_EQ(ha, again);
}

TEST(BlockHash, OnlyFullBlocksAndIncremental) {
  const BlockHashExtras none;
  std::vector<int32_t> tokens = iota_tokens(37);
  std::vector<BlockHash> incremental;
  append_block_hashes(std::span<const int32_t>(tokens).first(15), 16, none, &incremental);
  EXPECT_TRUE(incremental.empty());  // a partial block has no hash
  append_block_hashes(std::span<const int32_t>(tokens).first(20), 16, none, &incremental);
  EXPECT_EQ(incremental.size(), 1u);
  append_block_hashes(tokens, 16, none, &incremental);
  EXPECT_EQ(incremental.size(), 2u);
  std::vector<BlockHash> at_once;
  append_block_hashes(tokens, 16, none, &at_once);
  EXPECT_EQ(incremental, at_once);
}

TEST(BlockHash, CacheSaltSeparatesTheWholeChain) {
  const std::vector<int32_t> tokens = iota_tokens(32);
  BlockHashExtras salted;
  salted.cache_salt = "tenant-a";
  BlockHashExtras other_salt;
  other_salt.cache_salt = "tenant-b";
  std::vector<BlockHash> plain, a, b, a2;
  append_block_hashes(tokens, 16, {}, &plain);
  append_block_hashes(tokens, 16, salted, &a);
  append_block_hashes(tokens, 16, other_salt, &b);
  append_block_hashes(tokens, 16, salted, &a2);
  EXPECT_EQ(a, a2);
  for (int i = 0; i < 2; ++i) {
    EXPECT_NE(plain[i], a[i]) << i;
    EXPECT_NE(a[i], b[i]) << i;
  }
  // The salt enters block 0 only; later blocks differ through their parent.
  const std::span<const int32_t> block1 = std::span<const int32_t>(tokens).subspan(16, 16);
  EXPECT_EQ(hash_block(a[0], block1, 16, salted), hash_block(a[0], block1, 16, {}));
  // An empty salt is still a salt.
  BlockHashExtras empty_salt;
  empty_salt.cache_salt = "";
  std::vector<BlockHash> e;
  append_block_hashes(tokens, 16, empty_salt, &e);
  EXPECT_NE(e[0], plain[0]);
}

TEST(BlockHash, MultimodalKeysTouchOnlyOverlappingBlocks) {
  const std::vector<int32_t> tokens(64, 7);  // placeholder-like repeated ids
  BlockHashExtras image_a;
  image_a.multimodal = {{20, 20, "image-a"}};  // tokens 20..39: blocks 1 and 2
  BlockHashExtras image_b = image_a;
  image_b.multimodal[0].content_hash = "image-b";
  BlockHashExtras shifted = image_a;
  shifted.multimodal[0].offset = 21;
  std::vector<BlockHash> plain, a, b, s;
  append_block_hashes(tokens, 16, {}, &plain);
  append_block_hashes(tokens, 16, image_a, &a);
  append_block_hashes(tokens, 16, image_b, &b);
  append_block_hashes(tokens, 16, shifted, &s);
  EXPECT_EQ(plain[0], a[0]);  // the image starts after block 0
  EXPECT_NE(plain[1], a[1]);
  EXPECT_NE(a[1], b[1]);  // same tokens, different image
  EXPECT_NE(a[1], s[1]);  // same image at another offset
  // Block 3 does not overlap the image, but its parent chain does.
  EXPECT_NE(plain[3], a[3]);
  const std::span<const int32_t> block3 = std::span<const int32_t>(tokens).subspan(48, 16);
  EXPECT_EQ(hash_block(a[2], block3, 48, image_a), hash_block(a[2], block3, 48, {}));
}

TEST(BlockHash, BadPlaceholdersAreInputErrors) {
  BlockHashExtras overlapping;
  overlapping.multimodal = {{0, 10, "x"}, {5, 10, "y"}};
  EXPECT_THROW(validate_block_hash_extras(overlapping), InputError);
  BlockHashExtras empty;
  empty.multimodal = {{3, 0, "x"}};
  EXPECT_THROW(validate_block_hash_extras(empty), InputError);
  BlockHashExtras fine;
  fine.multimodal = {{0, 10, "x"}, {10, 4, "y"}};
  EXPECT_NO_THROW(validate_block_hash_extras(fine));
}

// ---- KvBlockPool -------------------------------------------------------------------------------

TEST(KvBlockPool, AllocatesFromTheHeadWithRefCountOne) {
  KvBlockPool pool(8);
  EXPECT_EQ(pool.num_blocks(), 8);
  EXPECT_EQ(pool.num_free_blocks(), 8);
  EXPECT_EQ(pool.free_queue(), (std::vector<BlockId>{0, 1, 2, 3, 4, 5, 6, 7}));
  const std::vector<BlockId> got = pool.allocate(3);
  EXPECT_EQ(got, (std::vector<BlockId>{0, 1, 2}));
  for (BlockId b : got) {
    EXPECT_EQ(pool.ref_count(b), 1);
    EXPECT_FALSE(pool.in_free_queue(b));
  }
  EXPECT_EQ(pool.num_free_blocks(), 5);
  EXPECT_DOUBLE_EQ(pool.usage(), 3.0 / 8.0);
  EXPECT_EQ(pool.counters().allocated_blocks, 3u);
  EXPECT_THROW(pool.allocate(6), std::logic_error);
  EXPECT_EQ(pool.num_free_blocks(), 5);  // a refused allocation takes nothing
}

TEST(KvBlockPool, FreedBlocksGoToTheTailInTheGivenOrder) {
  KvBlockPool pool(6);
  const std::vector<BlockId> got = pool.allocate(4);  // 0 1 2 3
  // Freed tail-first, as the manager frees a request.
  const std::vector<BlockId> reversed(got.rbegin(), got.rend());
  pool.free(reversed);
  EXPECT_EQ(pool.free_queue(), (std::vector<BlockId>{4, 5, 3, 2, 1, 0}));
  EXPECT_DOUBLE_EQ(pool.usage(), 0.0);
  EXPECT_THROW(pool.free(std::vector<BlockId>{0}), std::logic_error);  // double free
  pool.free(std::vector<BlockId>{kNullBlock});                         // ignored
  EXPECT_EQ(pool.num_free_blocks(), 6);
}

TEST(KvBlockPool, SharedBlocksNeedEveryReferenceDropped) {
  KvBlockPool pool(4);
  const std::vector<BlockId> got = pool.allocate(2);
  pool.touch(got);  // a second request shares them
  EXPECT_EQ(pool.ref_count(got[0]), 2);
  pool.free(got);
  EXPECT_EQ(pool.ref_count(got[0]), 1);
  EXPECT_EQ(pool.num_free_blocks(), 2);
  pool.free(got);
  EXPECT_EQ(pool.ref_count(got[0]), 0);
  EXPECT_EQ(pool.num_free_blocks(), 4);
}

TEST(KvBlockPool, CachedBlocksStayFindableUntilEvicted) {
  KvBlockPool pool(4);
  const std::vector<BlockId> got = pool.allocate(2);  // 0 1
  ASSERT_TRUE(pool.cache_block(got[0], hash_of("h0")));
  ASSERT_TRUE(pool.cache_block(got[1], hash_of("h1")));
  EXPECT_FALSE(pool.cache_block(got[1], hash_of("other")));  // already hashed
  EXPECT_EQ(pool.cached_block(hash_of("h0")), got[0]);
  pool.free(std::vector<BlockId>{got[1], got[0]});
  EXPECT_EQ(pool.num_cached_free_blocks(), 2);
  // Free queue: 2 3 1 0 -> the next two allocations take the uncached blocks first.
  EXPECT_EQ(pool.allocate(2), (std::vector<BlockId>{2, 3}));
  EXPECT_EQ(pool.cached_block(hash_of("h1")), got[1]);
  EXPECT_EQ(pool.counters().evicted_blocks, 0u);
  // Then block 1 (least recently freed) is evicted: its hash is gone.
  EXPECT_EQ(pool.allocate(1), (std::vector<BlockId>{1}));
  EXPECT_EQ(pool.counters().evicted_blocks, 1u);
  EXPECT_FALSE(pool.cached_block(hash_of("h1")).has_value());
  EXPECT_FALSE(pool.block_hash(1).has_value());
  EXPECT_EQ(pool.cached_block(hash_of("h0")), got[0]);
  EXPECT_EQ(pool.num_cached_free_blocks(), 1);
}

TEST(KvBlockPool, TouchRevivesACachedFreeBlock) {
  KvBlockPool pool(5);
  const std::vector<BlockId> got = pool.allocate(3);  // 0 1 2
  pool.cache_block(got[1], hash_of("prefix"));
  pool.free(std::vector<BlockId>{got[2], got[1], got[0]});
  EXPECT_EQ(pool.free_queue(), (std::vector<BlockId>{3, 4, 2, 1, 0}));
  // A prefix hit on block 1 takes it out of the middle of the queue.
  const std::optional<BlockId> hit = pool.cached_block(hash_of("prefix"));
  ASSERT_EQ(hit, got[1]);
  pool.touch(std::vector<BlockId>{*hit});
  EXPECT_EQ(pool.ref_count(1), 1);
  EXPECT_FALSE(pool.in_free_queue(1));
  EXPECT_EQ(pool.free_queue(), (std::vector<BlockId>{3, 4, 2, 0}));
  EXPECT_EQ(pool.num_free_blocks(), 4);
  EXPECT_EQ(pool.num_cached_free_blocks(), 0);
  // Allocating everything else never evicts the touched block.
  pool.allocate(4);
  EXPECT_EQ(pool.cached_block(hash_of("prefix")), 1);
  EXPECT_EQ(pool.counters().touched_blocks, 1u);
}

TEST(KvBlockPool, LruOrderAcrossManyFrees) {
  KvBlockPool pool(6);
  std::vector<BlockId> all = pool.allocate(6);
  for (BlockId b : all) pool.cache_block(b, hash_of(std::to_string(b)));
  // Free in the order 4, 1, 5, 0, 3, 2: eviction must follow it.
  const std::vector<BlockId> order = {4, 1, 5, 0, 3, 2};
  for (BlockId b : order) pool.free(std::vector<BlockId>{b});
  for (BlockId expected : order) {
    EXPECT_EQ(pool.allocate(1), std::vector<BlockId>{expected});
    EXPECT_FALSE(pool.cached_block(hash_of(std::to_string(expected))).has_value());
  }
  EXPECT_EQ(pool.counters().evicted_blocks, 6u);
}

TEST(KvBlockPool, DuplicateHashKeepsTheFirstCopy) {
  KvBlockPool pool(4);
  const std::vector<BlockId> got = pool.allocate(2);
  EXPECT_TRUE(pool.cache_block(got[0], hash_of("same")));
  EXPECT_FALSE(pool.cache_block(got[1], hash_of("same")));
  EXPECT_EQ(pool.cached_block(hash_of("same")), got[0]);
  EXPECT_FALSE(pool.block_hash(got[1]).has_value());
}

TEST(KvBlockPool, ResetPrefixCacheOnlyWhenIdle) {
  KvBlockPool pool(3);
  const std::vector<BlockId> got = pool.allocate(1);
  pool.cache_block(got[0], hash_of("x"));
  EXPECT_FALSE(pool.reset_prefix_cache());
  pool.free(got);
  EXPECT_TRUE(pool.reset_prefix_cache());
  EXPECT_FALSE(pool.cached_block(hash_of("x")).has_value());
  EXPECT_EQ(pool.num_cached_free_blocks(), 0);
}

TEST(KvBlockPool, RejectsBadIds) {
  KvBlockPool pool(2);
  EXPECT_THROW(pool.touch(std::vector<BlockId>{2}), std::out_of_range);
  EXPECT_THROW(pool.ref_count(-2), std::out_of_range);
  EXPECT_THROW(KvBlockPool(-1), std::invalid_argument);
  KvBlockPool empty(0);
  EXPECT_EQ(empty.usage(), 0.0);
  EXPECT_TRUE(empty.allocate(0).empty());
}

}  // namespace
}  // namespace gemmaserve
