// Recognises a Grammar byte by byte as a set of pushdown stacks (each a path of positions in
// the flat rule layout, the top always at a byte set), and masks the vocabulary by walking its
// byte trie with that state. Right recursion is a tail call, so repetitions keep stacks flat;
// stack depth and count are capped so an ambiguous grammar cannot explode.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/structured/grammar.h"

namespace gemmaserve {
class JsonTokenTrie;
}

namespace gemmaserve::structured {

// The stacks a prefix leaves: [length, position bottom .. position top] one after another.
struct GrammarState {
  std::vector<uint32_t> words;
  bool dead() const { return words.empty(); }
  // The bytes so far are a whole sentence of the grammar.
  bool accepting() const;
  // Some byte may still follow.
  bool can_continue() const;
  // Everything that decides the future, as a cache key.
  std::string_view key() const {
    return {reinterpret_cast<const char*>(words.data()), words.size() * sizeof(uint32_t)};
  }
};

// A trie node where a cut-off stack ran out of its kept frames (see GrammarMatcher::truncate):
// what follows depends on the frames below, the original stacks `stacks`.
struct EscapeNode {
  uint32_t node;
  std::vector<uint32_t> stacks;
};

class GrammarMatcher {
 public:
  static constexpr size_t kMaxStackDepth = 512;
  static constexpr size_t kMaxStacks = 1024;
  // A position at or above this at a stack's top marks frames cut off below (stack index added).
  static constexpr uint32_t kCutBase = 0x80000000u;

  explicit GrammarMatcher(const Grammar& grammar) : g_(grammar) {}

  GrammarState initial();
  // The state after `byte`; false (and `to` dead) when no stack takes it.
  bool advance(const GrammarState& from, uint8_t byte, GrammarState* to);
  // Feeds every byte of `text`; false when one is refused (`state` is then dead).
  bool feed(GrammarState* state, std::string_view text);
  // Tokens of `trie` whose whole bytes `state` takes, appended in trie order.
  void allowed_tokens(const JsonTokenTrie& trie, const GrammarState& state,
                      std::vector<int32_t>* out);

  // The state with each stack cut to its top `keep` frames over a marker naming the stack: many
  // states share it (the same rule positions in different contexts), and so do its masks.
  static GrammarState truncate(const GrammarState& full, size_t keep);
  // Walks the trie from a truncated state: `certain` gets the tokens it takes without leaving
  // the kept frames (so any full state with them takes them too); `escapes` the nodes where a
  // cut stack ran out, whose subtrees depend on the frames below.
  void walk_truncated(const JsonTokenTrie& trie, const GrammarState& truncated,
                      std::vector<int32_t>* certain, std::vector<EscapeNode>* escapes);
  // The tokens below `escape` that `full` (the state `truncate` cut with `keep`) takes there.
  void walk_escape(const JsonTokenTrie& trie, const GrammarState& full, size_t keep,
                   const EscapeNode& escape, std::vector<int32_t>* out);

 private:
  void push(std::span<const uint32_t> stack);
  void close(GrammarState* to);  // expands the pending stacks until each tops at a byte set
  // Trie walks step a small DFA built as they go: states interned, transitions cached per byte
  // (a JSON string's content returns to one state after each character).
  static constexpr uint32_t kDead = UINT32_MAX;
  // Past either, the DFA starts over at the next walk (a state can be 2 MiB: 1024 stacks).
  static constexpr size_t kMaxInterned = 4096;
  static constexpr size_t kMaxDfaBytes = size_t{64} << 20;
  uint32_t intern(const GrammarState& s);
  uint32_t step(uint32_t state, uint8_t byte);
  void reset_dfa_if_large();
  void walk(const JsonTokenTrie& trie, uint32_t node, uint32_t state, std::vector<int32_t>* out,
            std::vector<EscapeNode>* escapes);

  const Grammar& g_;
  // Closure scratch: stacks waiting (flat, with their offsets), stacks seen (hash table of
  // offsets into seen_words_, so each distinct stack is expanded once).
  std::vector<uint32_t> pending_words_;
  std::vector<size_t> pending_;
  std::vector<uint32_t> seen_words_;
  std::vector<uint64_t> seen_table_;  // (offset + 1) or 0 for empty
  std::vector<size_t> seen_slots_;    // the table's used slots, cleared after each closure
  size_t seen_count_ = 0;
  std::vector<uint32_t> current_;
  GrammarState scratch_;
  std::vector<GrammarState> interned_;
  std::unordered_map<std::string, uint32_t> ids_;
  // Per state: 0 unknown, 1 dead, else the next state + 2, for each byte (allocated on use).
  std::vector<std::unique_ptr<std::array<uint32_t, 256>>> transitions_;
  std::vector<std::vector<uint32_t>> cut_of_;  // per state: the cut stacks that ran out
  size_t dfa_bytes_ = 0;                       // what interned_ ... cut_of_ hold, approximately
};

}  // namespace gemmaserve::structured
