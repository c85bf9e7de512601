// Structured outputs' compiled grammars: one per (kind, spec) text, kept in a bounded LRU by the
// engine's GrammarCompiler, each with a bounded LRU of token masks per recogniser state, shared
// by every request that uses it.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/structured/grammar.h"
#include "engine/structured/grammar_matcher.h"

namespace gemmaserve {
class JsonTokenTrie;
}

namespace gemmaserve::structured {

// A small least-recently-used map (not thread-safe; owners lock).
template <class V>
class LruCache {
 public:
  explicit LruCache(size_t capacity) : capacity_(capacity) {}
  const V* find(const std::string& key) {
    const auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    order_.splice(order_.begin(), order_, it->second);
    return &it->second->second;
  }
  void put(std::string key, V value) {
    if (find(key) != nullptr) return;
    order_.emplace_front(std::move(key), std::move(value));
    index_.emplace(order_.front().first, order_.begin());
    while (order_.size() > capacity_) {
      index_.erase(order_.back().first);
      order_.pop_back();
    }
  }
  size_t size() const { return order_.size(); }

 private:
  size_t capacity_;
  std::list<std::pair<std::string, V>> order_;
  std::unordered_map<std::string, typename std::list<std::pair<std::string, V>>::iterator> index_;
};

// One bit per vocabulary id: the tokens that keep the text inside the grammar.
using TokenBits = std::vector<uint64_t>;

class CompiledGrammar {
 public:
  static constexpr size_t kMaxCachedMasks = 2048;  // 32 KiB each at Gemma 4's vocabulary
  // Stacks are cut to their top frames for the shared part of a mask (GrammarMatcher::truncate):
  // three covers a JSON string's content, so every string in every context shares one walk.
  static constexpr size_t kKeptFrames = 3;

  explicit CompiledGrammar(Grammar grammar) : grammar_(std::move(grammar)) {}
  const Grammar& grammar() const { return grammar_; }

  // The tokens whose whole bytes `state` takes (not the stop tokens), from the cache or a walk
  // of `trie` with `matcher` (the caller's scratch over this grammar).
  std::shared_ptr<const TokenBits> allowed(const JsonTokenTrie& trie, int vocab_size,
                                           const GrammarState& state,
                                           GrammarMatcher* matcher) const;
  // The bytes the grammar reads for token `id`: its private byte, else its trie bytes.
  std::string_view token_bytes(const JsonTokenTrie& trie, int32_t id) const;

 private:
  // The part of a mask the kept frames decide, and where the rest must look below them.
  struct SharedMask {
    TokenBits certain;
    std::vector<EscapeNode> escapes;
  };
  Grammar grammar_;
  mutable std::mutex mutex_;
  mutable LruCache<std::shared_ptr<const TokenBits>> masks_{kMaxCachedMasks};
  mutable LruCache<std::shared_ptr<const SharedMask>> shared_{kMaxCachedMasks};
};

// Compiles structured-output specs, caching the results. Kinds: "json" (a JSON Schema's text),
// "regex", "choice" (a JSON array of strings), "grammar" (xgrammar's EBNF), "gemma4_tool_call"
// (gemma4_tool_call_grammar.h), "json_with_whitespace" ({"schema": TEXT, "any_whitespace": BOOL,
// "whitespace_pattern": REGEX or null}; the last two are the server's own kinds). Throws InputError
// for a spec it cannot compile or refuses (unsupported keyword, too large).
class GrammarCompiler {
 public:
  static constexpr size_t kMaxCachedGrammars = 32;
  std::shared_ptr<const CompiledGrammar> compile(std::string_view kind, std::string_view spec);

 private:
  std::mutex mutex_;
  LruCache<std::shared_ptr<const CompiledGrammar>> cache_{kMaxCachedGrammars};
};

// The grammar itself, uncached.
Grammar build_grammar(std::string_view kind, std::string_view spec);

}  // namespace gemmaserve::structured
