// Structured outputs' compiled grammars: one per (kind, spec) text, kept by the engine's
// GrammarCompiler with their token masks per recogniser state (shared by every request that uses
// the grammar) in one least-recently-used cache bounded by bytes (--structured-outputs-cache-gb).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/byte_lru_cache.h"
#include "engine/structured/grammar.h"
#include "engine/structured/grammar_matcher.h"

namespace gemmaserve {
class JsonTokenTrie;
}

namespace gemmaserve::structured {

// --structured-outputs-cache-gb's default: 32768 masks at Gemma 4's vocabulary.
inline constexpr uint64_t kDefaultStructuredCacheBytes = uint64_t{1} << 30;

// What structured outputs keep between requests, under one byte budget: compiled grammars by
// (kind, spec) and their token masks by (grammar, state), least recently used out together, so
// many distinct large schemas or states evict the oldest instead of growing the process.
// Thread-safe. Values are typed by their key's first byte (see compiled_grammar.cpp).
class StructuredOutputCache {
 public:
  explicit StructuredOutputCache(uint64_t capacity_bytes) : lru_(capacity_bytes) {}
  template <class T>
  std::shared_ptr<const T> find(std::string_view key) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto* hit = lru_.find(key);
    return hit ? std::static_pointer_cast<const T>(*hit) : nullptr;
  }
  void put(std::string key, std::shared_ptr<const void> value, uint64_t value_bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    lru_.put(std::move(key), std::move(value), value_bytes);
  }
  uint64_t bytes() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return lru_.bytes();
  }
  size_t size() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return lru_.size();
  }
  // A new grammar's name in mask keys (an address could be reused by the next grammar).
  uint64_t next_grammar_id() {
    std::lock_guard<std::mutex> lock(mutex_);
    return next_grammar_id_++;
  }

 private:
  mutable std::mutex mutex_;
  ByteLruCache<std::shared_ptr<const void>> lru_;
  uint64_t next_grammar_id_ = 0;
};

// One bit per vocabulary id: the tokens that keep the text inside the grammar.
using TokenBits = std::vector<uint64_t>;

// The part of a mask a truncated state's kept frames decide, and where the rest must look below
// them (CompiledGrammar::allowed).
struct SharedMask {
  TokenBits certain;
  std::vector<EscapeNode> escapes;
};

class CompiledGrammar {
 public:
  // Stacks are cut to their top frames for the shared part of a mask (GrammarMatcher::truncate):
  // three covers a JSON string's content, so every string in every context shares one walk.
  static constexpr size_t kKeptFrames = 3;

  // Its masks go to `cache` (uncached once the cache is gone).
  CompiledGrammar(Grammar grammar, const std::shared_ptr<StructuredOutputCache>& cache)
      : grammar_(std::move(grammar)), cache_(cache), id_(cache->next_grammar_id()) {}
  // Standalone (tests, tools): its masks in a cache of its own.
  explicit CompiledGrammar(Grammar grammar)
      : own_cache_(std::make_shared<StructuredOutputCache>(kDefaultStructuredCacheBytes)),
        grammar_(std::move(grammar)),
        cache_(own_cache_),
        id_(own_cache_->next_grammar_id()) {}
  const Grammar& grammar() const { return grammar_; }

  // The tokens whose whole bytes `state` takes (not the stop tokens), from the cache or a walk
  // of `trie` with `matcher` (the caller's scratch over this grammar).
  std::shared_ptr<const TokenBits> allowed(const JsonTokenTrie& trie, int vocab_size,
                                           const GrammarState& state,
                                           GrammarMatcher* matcher) const;
  // The bytes the grammar reads for token `id`: its private byte, else its trie bytes.
  std::string_view token_bytes(const JsonTokenTrie& trie, int32_t id) const;

 private:
  // "M" (a whole mask) or "S" (a shared part), this grammar's id, then the state's key.
  std::string mask_key(char kind, std::string_view state_key) const;

  std::shared_ptr<StructuredOutputCache> own_cache_;  // standalone only
  Grammar grammar_;
  std::weak_ptr<StructuredOutputCache> cache_;  // the cache holds grammars: no cycle
  uint64_t id_;
};

// Compiles structured-output specs, caching the results. Kinds: "json" (a JSON Schema's text),
// "regex", "choice" (a JSON array of strings), "grammar" (xgrammar's EBNF), "gemma4_tool_call"
// (gemma4_tool_call_grammar.h), "json_with_whitespace" ({"schema": TEXT, "any_whitespace": BOOL,
// "whitespace_pattern": REGEX or null}; the last two are the server's own kinds). Throws InputError
// for a spec it cannot compile or refuses (unsupported keyword, too large).
class GrammarCompiler {
 public:
  explicit GrammarCompiler(uint64_t cache_bytes = kDefaultStructuredCacheBytes)
      : cache_(std::make_shared<StructuredOutputCache>(cache_bytes)) {}
  std::shared_ptr<const CompiledGrammar> compile(std::string_view kind, std::string_view spec);
  // The grammars and masks cached, and the bytes they hold.
  const StructuredOutputCache& cache() const { return *cache_; }

 private:
  std::shared_ptr<StructuredOutputCache> cache_;
};

// The grammar itself, uncached.
Grammar build_grammar(std::string_view kind, std::string_view spec);

}  // namespace gemmaserve::structured
