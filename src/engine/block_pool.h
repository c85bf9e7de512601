// A pool of fixed-size KV blocks for one KV cache group (one attention type), with reference
// counts, an LRU free queue and the block-hash index of automatic prefix caching.
//
// Semantics follow vLLM v1's BlockPool / FreeKVCacheBlockQueue:
//  - Every block with ref count 0 sits in the free queue. allocate() takes blocks from the head;
//    free() appends blocks whose count drops to 0 at the tail, in the order given, so callers
//    free a request's blocks tail-first to have its last blocks evicted first.
//  - A freed block keeps its hash and stays findable by cached_block() until allocate() hands it
//    out again, which evicts it (drops the hash). touch() revives a cached free block for a
//    prefix hit: it leaves the free queue and its ref count goes up.
// Block ids are 0..num_blocks-1; kNullBlock marks table entries that own no block (sliding-window
// blocks that fell out of the window) and is ignored by free() and touch().
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/block_hash.h"

namespace gemmaserve {

using BlockId = int32_t;
constexpr BlockId kNullBlock = -1;

struct BlockPoolCounters {
  uint64_t allocated_blocks = 0;  // blocks handed out by allocate()
  uint64_t evicted_blocks = 0;    // cached blocks whose hash allocate() dropped
  uint64_t touched_blocks = 0;    // prefix-hit blocks revived or shared by touch()
};

class KvBlockPool {
 public:
  explicit KvBlockPool(int num_blocks);

  int num_blocks() const { return static_cast<int>(blocks_.size()); }
  // Blocks with ref count 0, cached or not: what allocate() can hand out.
  int num_free_blocks() const { return num_free_; }
  // Fraction of blocks in use (ref count > 0), as vLLM's kv_cache_usage.
  double usage() const;
  // Blocks in the free queue that still carry a hash.
  int num_cached_free_blocks() const { return num_cached_free_; }

  // Takes `n` blocks from the head of the free queue, evicting cached ones; each gets ref count
  // 1. Throws std::logic_error when fewer than n are free (callers check num_free_blocks()).
  std::vector<BlockId> allocate(int n);
  // Adds a reference to each block (a prefix hit); a block with count 0 leaves the free queue.
  void touch(std::span<const BlockId> blocks);
  // Drops one reference from each block, in order; blocks reaching 0 join the queue's tail.
  void free(std::span<const BlockId> blocks);

  // The block cached under `hash`, if any (free or in use).
  std::optional<BlockId> cached_block(const BlockHash& hash) const;
  // Registers a full, computed block under `hash`. Returns false (and changes nothing) when the
  // block already has a hash or another block is cached under this one (two requests computed
  // the same prefix at once: the first stays the cached copy).
  bool cache_block(BlockId block, const BlockHash& hash);
  // Drops every hash; only allowed when no block is in use (returns false otherwise).
  bool reset_prefix_cache();

  int ref_count(BlockId block) const;
  std::optional<BlockHash> block_hash(BlockId block) const;
  bool in_free_queue(BlockId block) const;
  // The free queue from head (next to allocate) to tail, for tests and debugging.
  std::vector<BlockId> free_queue() const;
  const BlockPoolCounters& counters() const { return counters_; }

 private:
  struct Block {
    int ref_count = 0;
    BlockId prev = kNullBlock;  // free-queue links; kNullBlock at the ends
    BlockId next = kNullBlock;
    bool queued = false;
    std::optional<BlockHash> hash;
  };
  void check_id(BlockId block) const;
  void queue_push_back(BlockId block);
  void queue_remove(BlockId block);

  std::vector<Block> blocks_;
  BlockId head_ = kNullBlock;
  BlockId tail_ = kNullBlock;
  int num_free_ = 0;
  int num_cached_free_ = 0;
  std::unordered_map<BlockHash, BlockId, BlockHashHasher> cached_;
  BlockPoolCounters counters_;
};

}  // namespace gemmaserve
