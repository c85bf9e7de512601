// A context-free grammar over bytes: what JSON Schema, regex, choice and EBNF texts compile to
// for structured outputs. Rules hold alternatives of symbol sequences; a symbol is a byte from a
// set or a rule. Builders stop at a size budget (InputError), so no text can make compilation
// run long; finish() lays the rules out flat for GrammarMatcher and refuses left recursion.
#pragma once

#include <bitset>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gemmaserve::structured {

using ByteSet = std::bitset<256>;

// Inclusive Unicode code point ranges.
using CodepointRanges = std::vector<std::pair<uint32_t, uint32_t>>;

class Grammar {
 public:
  static constexpr size_t kMaxSymbols = 200000;  // all alternatives together
  static constexpr size_t kMaxRules = 50000;

  struct Symbol {
    bool is_rule = false;
    uint32_t index = 0;  // a rule, or a byte set
    bool operator==(const Symbol&) const = default;
  };
  using Sequence = std::vector<Symbol>;

  // --- building (each throws InputError past the budgets) ---
  uint32_t add_rule(std::string name);  // no alternatives yet: set them later (recursion)
  void set_alternatives(uint32_t rule, std::vector<Sequence> alternatives);
  void set_root(uint32_t rule) { root_ = rule; }
  static Symbol ref(uint32_t rule) { return {true, rule}; }
  Symbol bytes(const ByteSet& set);
  Symbol byte(uint8_t b);
  Sequence literal(std::string_view text);
  // A new rule with these alternatives.
  Symbol choice(std::vector<Sequence> alternatives, std::string name = "group");
  Symbol star(Sequence body);
  Symbol plus(Sequence body);
  Symbol optional(Sequence body);
  // body{min,max}; max = -1: unbounded.
  Symbol repeat(Sequence body, int min, int max);
  // Exactly one of `texts`, as a prefix tree of rules: one stack however many texts share a
  // prefix (alternatives of whole literals would keep a stack per text).
  Symbol one_of(std::vector<std::string> texts);
  // One UTF-8 encoded character from `ranges` (surrogates excluded).
  Symbol codepoints(const CodepointRanges& ranges);

  // A byte only vocabulary token `token` writes: one of 0xF8-0xFF, which never occur in UTF-8
  // text and so in no token of the vocabulary trie. Its text spelled by other tokens is then no
  // match (Gemma 4's tool-call markers: only the marker token may write them). The same token
  // gets the same byte; InputError past eight tokens.
  static constexpr uint8_t kFirstPrivateByte = 0xF8;
  uint8_t private_byte(int32_t token);
  // (token, its one private byte as a string), for masks and feeding.
  const std::vector<std::pair<int32_t, std::string>>& private_tokens() const {
    return private_tokens_;
  }

  // Lays the rules out for matching; throws InputError for an undefined root, a rule without
  // alternatives or left recursion (a rule reaching itself before any byte on a path that grows
  // the stack).
  void finish();

  // --- the flat layout (valid after finish) ---
  // Element words: kind in the top two bits, an index below.
  static constexpr uint32_t kBytesTag = 0u << 30, kRuleTag = 1u << 30, kEndTag = 2u << 30;
  static constexpr uint32_t kTagMask = 3u << 30;
  const std::vector<uint32_t>& elements() const { return elements_; }
  const std::vector<uint32_t>& rule_starts(uint32_t rule) const { return starts_[rule]; }
  const ByteSet& byte_set(uint32_t index) const { return byte_sets_[index]; }
  uint32_t root() const { return root_; }
  size_t rule_count() const { return names_.size(); }
  const std::string& rule_name(uint32_t rule) const { return names_[rule]; }
  // Heap bytes held (vector capacities, names, the object), for the cache's byte budget.
  uint64_t memory_bytes() const;

 private:
  void charge(size_t symbols);

  std::vector<std::string> names_;
  std::vector<std::vector<Sequence>> rules_;
  std::vector<ByteSet> byte_sets_;
  size_t symbols_ = 0;
  uint32_t root_ = UINT32_MAX;
  std::vector<std::pair<int32_t, std::string>> private_tokens_;
  std::vector<uint32_t> elements_;
  std::vector<std::vector<uint32_t>> starts_;
};

}  // namespace gemmaserve::structured
