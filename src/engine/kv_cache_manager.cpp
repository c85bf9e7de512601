#include "engine/kv_cache_manager.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "core/error.h"
#include "model/kv_cache.h"

namespace gemmaserve {
namespace {

int ceil_div(int64_t a, int64_t b) { return static_cast<int>((a + b - 1) / b); }

int type_index(AttentionType t) { return static_cast<int>(t); }

bool has_cache_owning_layer(const TextConfig& config, AttentionType t) {
  for (const LayerSpec& spec : config.layers) {
    if (!spec.kv_shared() && spec.type == t) return true;
  }
  return false;
}

const char* group_name(AttentionType t) {
  return t == AttentionType::kFull ? "full-attention" : "sliding-window";
}

// 1234567 -> "1,234,567", as vLLM prints token counts.
std::string with_commas(int64_t v) {
  std::string digits = std::to_string(v < 0 ? -v : v);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return v < 0 ? "-" + out : out;
}

std::string mib(int64_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}

}  // namespace

// ---- KvCacheManager ----------------------------------------------------------------------------

KvCacheManager::KvCacheManager(const TextConfig& config,
                               std::array<int, kNumAttentionTypes> num_blocks, int block_size,
                               bool enable_prefix_caching)
    : block_size_(block_size), enable_prefix_caching_(enable_prefix_caching) {
  if (block_size <= 0) {
    throw InputError("--block-size must be positive, got " + std::to_string(block_size));
  }
  for (int t = 0; t < kNumAttentionTypes; ++t) {
    const auto type = static_cast<AttentionType>(t);
    if (!has_cache_owning_layer(config, type)) continue;
    if (num_blocks[t] <= 0) {
      throw InputError(std::string("the KV cache needs at least one block for the ") +
                       group_name(type) + " layers, got " + std::to_string(num_blocks[t]));
    }
    int window = 0;
    if (type == AttentionType::kSliding) {
      if (config.sliding_window <= 0) {
        throw InputError("sliding_window must be positive for sliding-window layers, got " +
                         std::to_string(config.sliding_window));
      }
      window = config.sliding_window;
    }
    groups_[t].emplace(Group{type, window, KvBlockPool(num_blocks[t])});
  }
  if (!groups_[0] && !groups_[1]) {
    throw InputError("the model has no layer that owns a KV cache");
  }
}

int KvCacheManager::sliding_window() const {
  const auto& g = groups_[type_index(AttentionType::kSliding)];
  return g ? g->sliding_window : 0;
}

std::vector<BlockId> KvCacheManager::find_sliding_hit(const Group& g,
                                                      std::span<const BlockHash> hashes,
                                                      int max_blocks) const {
  // Blocks holding the W-1 keys before the first uncached token; -1 since that token's own key
  // is computed with it.
  const int needed = ceil_div(g.sliding_window - 1, block_size_);
  std::vector<BlockId> blocks(static_cast<size_t>(max_blocks), kNullBlock);
  if (needed == 0) return blocks;
  int contiguous = 0;
  // Right to left: the first run of `needed` cached blocks ends the longest valid hit.
  for (int i = max_blocks - 1; i >= 0; --i) {
    const std::optional<BlockId> cached = g.pool.cached_block(hashes[static_cast<size_t>(i)]);
    if (!cached) {
      contiguous = 0;
      continue;
    }
    blocks[static_cast<size_t>(i)] = *cached;
    if (++contiguous >= needed) {
      blocks.resize(static_cast<size_t>(i + contiguous));
      return blocks;
    }
  }
  // A run shorter than `needed` still counts when it starts at block 0: nothing precedes it.
  blocks.resize(static_cast<size_t>(contiguous));
  return blocks;
}

PrefixHit KvCacheManager::find_prefix_hit(std::span<const BlockHash> block_hashes,
                                          int num_tokens) const {
  PrefixHit hit;
  hit.num_query_tokens = std::max(num_tokens, 0);
  if (!enable_prefix_caching_ || num_tokens <= 1) return hit;
  int max_blocks =
      std::min<int>((num_tokens - 1) / block_size_, static_cast<int>(block_hashes.size()));

  // Full attention first: it is downward closed, so its hit bounds the sliding search.
  const auto& full = groups_[type_index(AttentionType::kFull)];
  if (full) {
    std::vector<BlockId>& blocks = hit.blocks[type_index(AttentionType::kFull)];
    for (int i = 0; i < max_blocks; ++i) {
      const std::optional<BlockId> cached =
          full->pool.cached_block(block_hashes[static_cast<size_t>(i)]);
      if (!cached) break;
      blocks.push_back(*cached);
    }
    max_blocks = static_cast<int>(blocks.size());
  }
  const auto& sliding = groups_[type_index(AttentionType::kSliding)];
  if (sliding) {
    std::vector<BlockId>& blocks = hit.blocks[type_index(AttentionType::kSliding)];
    blocks = find_sliding_hit(*sliding, block_hashes, max_blocks);
    max_blocks = static_cast<int>(blocks.size());
  }
  if (full) hit.blocks[type_index(AttentionType::kFull)].resize(static_cast<size_t>(max_blocks));

  hit.num_tokens = max_blocks * block_size_;
  return hit;
}

void KvCacheManager::release_out_of_window(Group& g, std::vector<BlockId>* table,
                                           int num_computed_tokens) {
  if (g.sliding_window == 0) return;
  // The next token (position num_computed_tokens) reads keys from num_computed - W + 1 on.
  const int skipped_tokens = std::max(0, num_computed_tokens - g.sliding_window + 1);
  const int skipped_blocks =
      std::min(skipped_tokens / block_size_, static_cast<int>(table->size()));
  std::vector<BlockId> released;
  for (int i = skipped_blocks - 1; i >= 0; --i) {
    BlockId& entry = (*table)[static_cast<size_t>(i)];
    if (entry == kNullBlock) break;  // everything before was released by an earlier call
    released.push_back(entry);
    entry = kNullBlock;
  }
  g.pool.free(released);
}

bool KvCacheManager::allocate_slots(const std::string& request_id, int num_computed_tokens,
                                    int num_new_tokens, const PrefixHit* hit) {
  if (num_computed_tokens < 0 || num_new_tokens < 0) {
    throw std::invalid_argument("allocate_slots: negative token count");
  }
  auto it = requests_.find(request_id);
  const bool is_new = it == requests_.end();
  const bool has_hit = hit != nullptr && hit->num_tokens > 0;
  if (has_hit && (!is_new || hit->num_tokens != num_computed_tokens)) {
    throw std::logic_error("allocate_slots: a prefix hit only starts a new request at its end");
  }
  const int needed_blocks = ceil_div(num_computed_tokens + num_new_tokens, block_size_);

  // A new request's hit, with sliding blocks already out of the window left out (not touched).
  std::array<std::vector<BlockId>, kNumAttentionTypes> prefix;
  for (auto& g : groups_) {
    if (!g) continue;
    const int t = type_index(g->type);
    if (!is_new) {
      release_out_of_window(*g, &it->second.tables[t], num_computed_tokens);
      continue;
    }
    if (!has_hit) continue;
    prefix[t] = hit->blocks[t];
    if (g->sliding_window > 0) {
      const int skipped_tokens = std::max(0, num_computed_tokens - g->sliding_window + 1);
      const size_t skipped = std::min(prefix[t].size(), size_t(skipped_tokens / block_size_));
      std::fill(prefix[t].begin(), prefix[t].begin() + static_cast<ptrdiff_t>(skipped), kNullBlock);
    }
  }

  // Check every group before changing any, so a refusal allocates nothing.
  std::array<int, kNumAttentionTypes> new_blocks{};
  for (auto& g : groups_) {
    if (!g) continue;
    const int t = type_index(g->type);
    const size_t have = is_new ? prefix[t].size() : it->second.tables[t].size();
    new_blocks[t] = std::max(0, needed_blocks - static_cast<int>(have));
    // Hit blocks sitting in the free queue leave it when touched, like new blocks.
    int revived = 0;
    for (BlockId b : prefix[t]) {
      if (b != kNullBlock && g->pool.ref_count(b) == 0) ++revived;
    }
    if (new_blocks[t] + revived > g->pool.num_free_blocks()) return false;
  }

  if (is_new && hit != nullptr && enable_prefix_caching_) {
    ++stats_.requests;
    stats_.queries += static_cast<uint64_t>(hit->num_query_tokens);
    stats_.hits += static_cast<uint64_t>(hit->num_tokens);
  }
  if (is_new) {
    it = requests_.emplace(request_id, RequestBlocks{}).first;
    for (auto& g : groups_) {
      if (!g) continue;
      const int t = type_index(g->type);
      g->pool.touch(prefix[t]);
      it->second.num_cached_blocks[t] = static_cast<int>(prefix[t].size());
      it->second.tables[t] = std::move(prefix[t]);
    }
  }
  for (auto& g : groups_) {
    if (!g || new_blocks[type_index(g->type)] == 0) continue;
    const int t = type_index(g->type);
    const std::vector<BlockId> fresh = g->pool.allocate(new_blocks[t]);
    it->second.tables[t].insert(it->second.tables[t].end(), fresh.begin(), fresh.end());
  }
  return true;
}

void KvCacheManager::commit(const std::string& request_id, std::span<const BlockHash> block_hashes,
                            int num_computed_tokens) {
  auto it = requests_.find(request_id);
  if (it == requests_.end()) {
    throw std::logic_error("commit: unknown request " + request_id);
  }
  RequestBlocks& req = it->second;
  for (auto& g : groups_) {
    if (!g) continue;
    const int t = type_index(g->type);
    std::vector<BlockId>& table = req.tables[t];
    if (enable_prefix_caching_) {
      const int full_blocks =
          std::min({num_computed_tokens / block_size_, static_cast<int>(block_hashes.size()),
                    static_cast<int>(table.size())});
      for (int i = req.num_cached_blocks[t]; i < full_blocks; ++i) {
        const BlockId b = table[static_cast<size_t>(i)];
        if (b != kNullBlock) g->pool.cache_block(b, block_hashes[static_cast<size_t>(i)]);
      }
      req.num_cached_blocks[t] = std::max(req.num_cached_blocks[t], full_blocks);
    }
    // After caching, so released blocks stay findable until evicted.
    release_out_of_window(*g, &table, num_computed_tokens);
  }
}

void KvCacheManager::free(const std::string& request_id) {
  auto it = requests_.find(request_id);
  if (it == requests_.end()) return;
  for (auto& g : groups_) {
    if (!g) continue;
    std::vector<BlockId>& table = it->second.tables[type_index(g->type)];
    std::reverse(table.begin(), table.end());
    g->pool.free(table);
  }
  requests_.erase(it);
}

BlockTables KvCacheManager::block_tables(const std::string& request_id) const {
  BlockTables tables;
  auto it = requests_.find(request_id);
  if (it == requests_.end()) return tables;
  for (int t = 0; t < kNumAttentionTypes; ++t) tables[t] = it->second.tables[t];
  return tables;
}

bool KvCacheManager::has_request(const std::string& request_id) const {
  return requests_.count(request_id) > 0;
}

int KvCacheManager::num_held_blocks(const std::string& request_id, AttentionType t) const {
  auto it = requests_.find(request_id);
  if (it == requests_.end()) return 0;
  const std::vector<BlockId>& table = it->second.tables[type_index(t)];
  return static_cast<int>(
      std::count_if(table.begin(), table.end(), [](BlockId b) { return b != kNullBlock; }));
}

int KvCacheManager::peak_blocks_per_sequence(AttentionType t, int num_tokens,
                                             int max_chunk_tokens) const {
  const auto& g = groups_[type_index(t)];
  if (!g) return 0;
  const int all = ceil_div(num_tokens, block_size_);
  if (g->sliding_window == 0) return all;
  // The window before a chunk plus the chunk, at any alignment.
  const int windowed =
      ceil_div(g->sliding_window - 1 + std::max(1, max_chunk_tokens), block_size_) + 1;
  return std::min(all, windowed);
}

bool KvCacheManager::fits_alone(int num_tokens, int max_chunk_tokens) const {
  for (const auto& g : groups_) {
    if (!g) continue;
    if (peak_blocks_per_sequence(g->type, num_tokens, max_chunk_tokens) > g->pool.num_blocks()) {
      return false;
    }
  }
  return true;
}

const KvBlockPool* KvCacheManager::pool(AttentionType t) const {
  const auto& g = groups_[type_index(t)];
  return g ? &g->pool : nullptr;
}

double KvCacheManager::usage() const {
  double u = 0;
  for (const auto& g : groups_) {
    if (g) u = std::max(u, g->pool.usage());
  }
  return u;
}

bool KvCacheManager::reset_prefix_cache() {
  if (!requests_.empty()) return false;
  for (auto& g : groups_) {
    if (g && !g->pool.reset_prefix_cache()) return false;
  }
  return true;
}

// ---- Capacity planning -------------------------------------------------------------------------

int64_t kv_bytes_per_token(const TextConfig& config, AttentionType t, cpu::KvDtype kv_dtype) {
  return static_cast<int64_t>(KvCache::bytes_per_token(config, t, kv_dtype));
}

int64_t group_bytes_per_block(const TextConfig& config, AttentionType t, int block_size,
                              cpu::KvDtype kv_dtype) {
  return kv_bytes_per_token(config, t, kv_dtype) * block_size;
}

int64_t bytes_per_block(const TextConfig& config, int block_size, cpu::KvDtype kv_dtype) {
  int64_t bytes = 0;
  for (int t = 0; t < kNumAttentionTypes; ++t) {
    bytes += group_bytes_per_block(config, static_cast<AttentionType>(t), block_size, kv_dtype);
  }
  return bytes;
}

int steady_blocks_per_sequence(int num_tokens, int block_size, int sliding_window) {
  const int all = ceil_div(num_tokens, block_size);
  if (sliding_window <= 0) return all;
  return std::min(all, ceil_div(sliding_window - 1, block_size) + 1);
}

KvBytesPerToken kv_bytes_per_token_at(const TextConfig& config, int context_len, int block_size,
                                      cpu::KvDtype kv_dtype) {
  KvBytesPerToken out;
  for (const LayerSpec& spec : config.layers) {
    out.naive += int64_t{2} * spec.num_kv_heads *
                 static_cast<int64_t>(cpu::kv_row_bytes(kv_dtype, spec.head_dim));
  }
  if (context_len <= 0) return out;
  int64_t sequence_bytes = 0;
  for (int t = 0; t < kNumAttentionTypes; ++t) {
    const auto type = static_cast<AttentionType>(t);
    const int window = type == AttentionType::kSliding ? config.sliding_window : 0;
    sequence_bytes += int64_t{steady_blocks_per_sequence(context_len, block_size, window)} *
                      group_bytes_per_block(config, type, block_size, kv_dtype);
  }
  out.ours = static_cast<double>(sequence_bytes) / context_len;
  return out;
}

namespace {

// Block counts per group for a byte budget, or nullopt when one request of `max_model_len`
// (prefilled in chunks of `chunk`) does not fit.
std::optional<std::array<int, kNumAttentionTypes>> split_budget(const TextConfig& config,
                                                                const KvCachePlanOptions& o,
                                                                int max_model_len) {
  const int B = o.block_size;
  const int64_t M = o.memory_bytes;
  const int sliding = type_index(AttentionType::kSliding);
  const int full = type_index(AttentionType::kFull);
  std::array<int64_t, kNumAttentionTypes> page{};
  std::array<int, kNumAttentionTypes> steady{}, peak{};
  for (int t = 0; t < kNumAttentionTypes; ++t) {
    const auto type = static_cast<AttentionType>(t);
    page[t] = has_cache_owning_layer(config, type)
                  ? group_bytes_per_block(config, type, B, o.kv_dtype)
                  : 0;
    const int window = type == AttentionType::kSliding ? config.sliding_window : 0;
    steady[t] = steady_blocks_per_sequence(max_model_len, B, window);
    const int all = ceil_div(max_model_len, B);
    peak[t] =
        window > 0
            ? std::min(all, ceil_div(window - 1 + std::max(1, o.max_num_batched_tokens), B) + 1)
            : all;
  }
  std::array<int, kNumAttentionTypes> blocks{};
  if (page[sliding] == 0 || page[full] == 0) {
    const int t = page[sliding] > 0 ? sliding : full;
    const int64_t n = std::min<int64_t>(M / page[t], INT32_MAX);
    if (n < peak[t]) return std::nullopt;
    blocks[t] = static_cast<int>(n);
    return blocks;
  }
  const double ps = static_cast<double>(page[sliding]);
  const double pf = static_cast<double>(page[full]);
  const double a_short = ps / (ps + pf);
  const double a_long = steady[sliding] * ps / (steady[sliding] * ps + steady[full] * pf);
  double x = a_short / (a_short + 1.0 - a_long);
  // Keep room for one request at max_model_len in each group.
  const int64_t min_sliding_bytes = int64_t{peak[sliding]} * page[sliding];
  const int64_t min_full_bytes = int64_t{peak[full]} * page[full];
  if (min_sliding_bytes + min_full_bytes > M) return std::nullopt;
  int64_t sliding_bytes = static_cast<int64_t>(x * static_cast<double>(M));
  sliding_bytes = std::clamp(sliding_bytes, min_sliding_bytes, M - min_full_bytes);
  blocks[sliding] = static_cast<int>(std::min<int64_t>(sliding_bytes / page[sliding], INT32_MAX));
  blocks[full] = static_cast<int>(
      std::min<int64_t>((M - int64_t{blocks[sliding]} * page[sliding]) / page[full], INT32_MAX));
  if (blocks[full] < peak[full] || blocks[sliding] < peak[sliding]) return std::nullopt;
  return blocks;
}

}  // namespace

KvCachePlan plan_kv_cache(const TextConfig& config, const KvCachePlanOptions& options) {
  if (options.block_size <= 0) {
    throw InputError("--block-size must be positive, got " + std::to_string(options.block_size));
  }
  if (options.memory_bytes <= 0) {
    throw InputError("--kv-cache-memory-bytes must be positive, got " +
                     std::to_string(options.memory_bytes));
  }
  if (options.max_model_len <= 0) {
    throw InputError("--max-model-len must be positive, got " +
                     std::to_string(options.max_model_len));
  }
  if (!has_cache_owning_layer(config, AttentionType::kSliding) &&
      !has_cache_owning_layer(config, AttentionType::kFull)) {
    throw InputError("the model has no layer that owns a KV cache");
  }

  const std::optional<std::array<int, kNumAttentionTypes>> blocks =
      split_budget(config, options, options.max_model_len);
  if (!blocks) {
    // Largest length that fits, by bisection (fitting is monotone in the length).
    int lo = 0, hi = options.max_model_len;
    while (lo < hi) {
      const int mid = lo + (hi - lo + 1) / 2;
      if (split_budget(config, options, mid)) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    const KvBytesPerToken per_token =
        kv_bytes_per_token_at(config, options.max_model_len, options.block_size, options.kv_dtype);
    throw InputError(
        "--kv-cache-memory-bytes " + std::to_string(options.memory_bytes) +
        " is too small to serve one request of --max-model-len " +
        std::to_string(options.max_model_len) + " tokens (it needs about " +
        std::to_string(static_cast<int64_t>(per_token.ours * options.max_model_len)) +
        " bytes of KV cache). Based on the available memory, the estimated maximum model "
        "length is " +
        std::to_string(lo) + ". Raise --kv-cache-memory-bytes or lower --max-model-len.");
  }

  KvCachePlan plan;
  plan.block_size = options.block_size;
  plan.kv_dtype = options.kv_dtype;
  plan.max_model_len = options.max_model_len;
  plan.num_blocks = *blocks;
  plan.max_concurrency = -1;
  for (int t = 0; t < kNumAttentionTypes; ++t) {
    const auto type = static_cast<AttentionType>(t);
    if (plan.num_blocks[t] == 0) continue;
    plan.block_bytes[t] = group_bytes_per_block(config, type, options.block_size, options.kv_dtype);
    plan.total_bytes += plan.block_bytes[t] * plan.num_blocks[t];
    const int window = type == AttentionType::kSliding ? config.sliding_window : 0;
    const double per_request =
        steady_blocks_per_sequence(options.max_model_len, options.block_size, window);
    const double concurrency = plan.num_blocks[t] / per_request;
    if (plan.max_concurrency < 0 || concurrency < plan.max_concurrency) {
      plan.max_concurrency = concurrency;
    }
  }
  const int tokens_group = plan.num_blocks[type_index(AttentionType::kFull)] > 0
                               ? type_index(AttentionType::kFull)
                               : type_index(AttentionType::kSliding);
  plan.num_tokens = int64_t{plan.num_blocks[tokens_group]} * options.block_size;
  plan.bytes_per_token =
      kv_bytes_per_token_at(config, options.max_model_len, options.block_size, options.kv_dtype);
  return plan;
}

std::vector<std::string> KvCachePlan::summary_lines() const {
  std::vector<std::string> lines;
  std::string blocks_line =
      "KV cache: " + mib(total_bytes) + " in blocks of " + std::to_string(block_size) + " tokens:";
  bool first = true;
  for (int t = kNumAttentionTypes - 1; t >= 0; --t) {  // full attention first
    if (num_blocks[t] == 0) continue;
    blocks_line += std::string(first ? " " : ", ") + with_commas(num_blocks[t]) + " for " +
                   group_name(static_cast<AttentionType>(t)) + " layers (" +
                   mib(int64_t{num_blocks[t]} * block_bytes[t]) + ")";
    first = false;
  }
  lines.push_back(blocks_line);
  lines.push_back(std::string("KV cache dtype: ") + cpu::kv_dtype_name(kv_dtype));
  lines.push_back("KV cache size: " + with_commas(num_tokens) + " tokens");
  char buf[160];
  std::snprintf(buf, sizeof(buf), "Maximum concurrency for %s tokens per request: %.2fx",
                with_commas(max_model_len).c_str(), max_concurrency);
  lines.push_back(buf);
  std::snprintf(
      buf, sizeof(buf), "KV bytes per token at %s tokens: %s (every layer keeping every token: %s)",
      with_commas(max_model_len).c_str(), with_commas(std::llround(bytes_per_token.ours)).c_str(),
      with_commas(bytes_per_token.naive).c_str());
  lines.push_back(buf);
  return lines;
}

}  // namespace gemmaserve
