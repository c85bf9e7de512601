// KV cache manager: which physical blocks each request holds in each KV cache group, prefix
// caching across groups, and capacity planning for the cache.
//
// Gemma 4 has one group per attention type that owns a cache (KV-shared layers own none and cost
// nothing):
//  - full attention: a request keeps every block of its sequence;
//  - sliding window W: a token at position q reads keys q-W+1..q, so once `n` tokens are
//    computed, blocks wholly before position n-W+1 are returned to the pool and replaced by
//    kNullBlock in the request's table (the model never reads them). A sequence then holds at
//    most ceil((W-1)/B)+1 blocks between steps, plus those a prefill chunk writes in its step.
//
// Pool split between groups. vLLM's hybrid allocator pads groups to the same layer count and
// lets every group draw from one pool, because its per-layer KV tensors are shared by all
// groups. Our KvCache gives each attention type its own storage (`num_blocks[type]`), so a block
// cannot move between groups and each group gets its own KvBlockPool. plan_kv_cache() splits the
// byte budget to lose as little as possible against a shared pool at every request length up to
// max_model_len: short requests need as many sliding as full blocks, long ones few sliding
// blocks, and the split equalises the two worst cases (see plan_kv_cache for the formula).
//
// Typical use by the scheduler, per request and step:
//   hit = find_prefix_hit(hashes, num_tokens)                  // new requests only
//   allocate_slots(id, num_computed, num_new, &hit)            // false: nothing allocated
//   ... model step writes the new tokens' K/V ...
//   commit(id, hashes, num_computed + num_new)                 // cache full blocks, slide window
//   free(id)                                                   // finished / preempted / aborted
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/block_hash.h"
#include "engine/block_pool.h"
#include "kernels/cpu/kv_format.h"
#include "model/config.h"

namespace gemmaserve {

using BlockTables = std::array<std::span<const int32_t>, kNumAttentionTypes>;

// Blocks a prefix-cache lookup found, ready to hand to allocate_slots().
struct PrefixHit {
  int num_tokens = 0;        // a multiple of the block size
  int num_query_tokens = 0;  // tokens looked up, for the hit/query counters
  // Per attention type: num_tokens / block_size entries; sliding groups hold kNullBlock for
  // blocks outside the window of the hit's end.
  std::array<std::vector<BlockId>, kNumAttentionTypes> blocks;
};

// Counters for the prefix-cache metrics, in tokens like vLLM's PrefixCacheStats.
struct PrefixCacheStats {
  uint64_t requests = 0;  // lookups
  uint64_t queries = 0;   // tokens looked up
  uint64_t hits = 0;      // tokens found
};

class KvCacheManager {
 public:
  // `num_blocks[t]`: pool size of the group of attention type t; ignored (may be 0) for types
  // without cache-owning layers, and must be > 0 for types with them.
  KvCacheManager(const TextConfig& config, std::array<int, kNumAttentionTypes> num_blocks,
                 int block_size, bool enable_prefix_caching = true);

  int block_size() const { return block_size_; }
  bool prefix_caching_enabled() const { return enable_prefix_caching_; }
  bool has_group(AttentionType t) const { return groups_[static_cast<int>(t)].has_value(); }
  // The window of the sliding group, 0 when there is none.
  int sliding_window() const;

  // Longest cached prefix of a request's tokens usable by every group: full groups need every
  // block of the prefix, sliding groups only the ceil((W-1)/B) blocks before its end (vLLM's
  // SlidingWindowManager rule). At most num_tokens-1 tokens, so the last token is always
  // computed and yields logits. `block_hashes` covers the full blocks of the request's tokens.
  // Empty when prefix caching is off. The hit is valid until the next call that changes a
  // pool: pass it to allocate_slots() right away, which counts it in prefix_cache_stats() once
  // it succeeds (so a request refused for lack of blocks is not counted at every retry).
  PrefixHit find_prefix_hit(std::span<const BlockHash> block_hashes, int num_tokens) const;

  // Gives request `request_id` slots for tokens [num_computed_tokens, num_computed_tokens +
  // num_new_tokens) in every group. A request seen for the first time may bring a prefix hit
  // (then num_computed_tokens == hit->num_tokens). First drops blocks that fell out of the
  // sliding window at num_computed_tokens. Returns false, allocating nothing, when some pool
  // lacks free blocks.
  bool allocate_slots(const std::string& request_id, int num_computed_tokens, int num_new_tokens,
                      const PrefixHit* hit = nullptr);

  // After a step computed the request's K/V up to `num_computed_tokens`: registers its newly
  // full blocks for prefix caching (block_hashes[i] is block i's hash; may be empty when
  // caching is off) and returns sliding-window blocks that fell out of the window.
  void commit(const std::string& request_id, std::span<const BlockHash> block_hashes,
              int num_computed_tokens);

  // Returns all of a request's blocks to the pools, last block first so a request's tail is
  // evicted before its (more shareable) head. Unknown ids are ignored.
  void free(const std::string& request_id);

  // Logical block -> physical block per attention type, as SequenceInput::block_tables wants.
  // Valid until the next call that changes this request. Empty spans for unknown ids.
  BlockTables block_tables(const std::string& request_id) const;
  bool has_request(const std::string& request_id) const;
  // Blocks (not kNullBlock entries) the request holds in group `t`.
  int num_held_blocks(const std::string& request_id, AttentionType t) const;

  // Most blocks a sequence of `num_tokens` holds in group `t` at once when a step adds up to
  // `max_chunk_tokens` tokens; 0 without that group.
  int peak_blocks_per_sequence(AttentionType t, int num_tokens, int max_chunk_tokens) const;
  // Whether a request of up to `num_tokens` tokens, prefilled in chunks of up to
  // `max_chunk_tokens`, could run with the whole cache to itself.
  bool fits_alone(int num_tokens, int max_chunk_tokens) const;

  // nullptr without a group of that type.
  const KvBlockPool* pool(AttentionType t) const;
  // Fraction of blocks in use in the fullest group (what limits admission).
  double usage() const;
  const PrefixCacheStats& prefix_cache_stats() const { return stats_; }
  // Forgets every cached hash; only when no request holds blocks (false otherwise).
  bool reset_prefix_cache();

 private:
  struct Group {
    AttentionType type;
    int sliding_window;  // 0 for full attention
    KvBlockPool pool;
  };
  struct RequestBlocks {
    std::array<std::vector<BlockId>, kNumAttentionTypes> tables;
    std::array<int, kNumAttentionTypes> num_cached_blocks{};  // blocks already hashed or hit
  };

  std::vector<BlockId> find_sliding_hit(const Group& g, std::span<const BlockHash> hashes,
                                        int max_blocks) const;
  void release_out_of_window(Group& g, std::vector<BlockId>* table, int num_computed_tokens);

  int block_size_;
  bool enable_prefix_caching_;
  std::array<std::optional<Group>, kNumAttentionTypes> groups_;
  std::unordered_map<std::string, RequestBlocks> requests_;
  PrefixCacheStats stats_;
};

// ---- Capacity planning -------------------------------------------------------------------------

// Bytes of K+V for one token in every cache-owning layer of type t (KV-shared layers excluded),
// stored as kv_dtype (KvCache::bytes_per_token).
int64_t kv_bytes_per_token(const TextConfig& config, AttentionType t, cpu::KvDtype kv_dtype);
// One block of `block_size` tokens in every cache-owning layer of type t.
int64_t group_bytes_per_block(const TextConfig& config, AttentionType t, int block_size,
                              cpu::KvDtype kv_dtype);
// One block in every cache-owning layer of the model (all groups).
int64_t bytes_per_block(const TextConfig& config, int block_size, cpu::KvDtype kv_dtype);

// Blocks one sequence of `num_tokens` holds in a group between steps: ceil(N/B) for full
// attention, min(ceil(N/B), ceil((W-1)/B)+1) for a sliding window W.
int steady_blocks_per_sequence(int num_tokens, int block_size, int sliding_window);

struct KvBytesPerToken {
  double ours = 0;    // what one sequence of the context length holds, per token
  int64_t naive = 0;  // every layer (shared ones too) keeping K/V of every token
};
// Per-token KV footprint of one sequence of `context_len` tokens, counting block rounding, the
// sliding window and KV sharing.
KvBytesPerToken kv_bytes_per_token_at(const TextConfig& config, int context_len, int block_size,
                                      cpu::KvDtype kv_dtype);

struct KvCachePlanOptions {
  int block_size = 16;
  cpu::KvDtype kv_dtype = cpu::KvDtype::kBF16;  // what KvCache stores (sets the bytes per row)
  int64_t memory_bytes = 0;
  int max_model_len = 0;
  int max_num_batched_tokens = 8192;  // largest prefill chunk, for the one-request check
};

struct KvCachePlan {
  int block_size = 0;
  cpu::KvDtype kv_dtype = cpu::KvDtype::kBF16;
  int max_model_len = 0;
  std::array<int, kNumAttentionTypes> num_blocks{};       // 0 for absent groups
  std::array<int64_t, kNumAttentionTypes> block_bytes{};  // bytes of one block per group
  int64_t total_bytes = 0;                                // sum of num_blocks * block_bytes
  int64_t num_tokens = 0;           // token slots of the full group (the sliding group when alone)
  double max_concurrency = 0;       // sequences of max_model_len tokens that fit at once
  KvBytesPerToken bytes_per_token;  // at max_model_len

  // Startup log lines: blocks, dtype, tokens, maximum concurrency, bytes per token ours vs
  // naive.
  std::vector<std::string> summary_lines() const;
};

// Splits `memory_bytes` into per-group block counts. With both groups present, let p_s, p_f be
// the block bytes, and a(N) = s(N)p_s / (s(N)p_s + f(N)p_f) the sliding share a sequence of N
// tokens needs (s, f: its steady blocks). a is largest (a_short, s = f) for short requests and
// smallest (a_long) at max_model_len. Giving the sliding group the share
// x = a_short / (a_short + 1 - a_long) makes the worst-case fraction of a shared pool's
// concurrency equal at both ends, 1 / (a_short + 1 - a_long), and no length does worse. x is
// then clamped so one max_model_len request (chunked by max_num_batched_tokens) fits.
// Throws InputError when the budget cannot hold one such request, naming the largest
// max_model_len that would fit.
KvCachePlan plan_kv_cache(const TextConfig& config, const KvCachePlanOptions& options);

}  // namespace gemmaserve
