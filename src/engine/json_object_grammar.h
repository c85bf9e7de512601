// response_format {"type": "json_object"}: a byte-level recogniser of one JSON object (RFC 8259
// syntax; the top level must be an object) and the vocabulary as a byte trie, so a sampler can
// mask every token whose bytes would break the object. It opens with '{' itself; whitespace
// runs inside are capped (as
// llama.cpp's JSON grammar caps them) so a model cannot stall in blank space.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace gemmaserve {

class Tokenizer;

class JsonObjectMachine {
 public:
  static constexpr int kMaxDepth = 32;
  static constexpr int kMaxWhitespaceRun = 16;

  // Advances by one byte; false (state unchanged) when the byte cannot come next.
  bool feed(uint8_t c);
  // The top-level object is closed: only the end of generation (or blank space) may follow.
  bool done() const { return mode_ == Mode::kDone; }
  // Everything that decides which bytes may follow, as a cache key.
  std::string key() const;

 private:
  enum class Mode : uint8_t {
    kStart,        // the top-level '{' must come first
    kValue,        // a value must start (after ':' or ',' in an array)
    kArrayFirst,   // after '[': a value or ']'
    kObjectFirst,  // after '{': a key or '}'
    kKey,          // after ',' in an object: a key
    kColon,        // after a key
    kAfter,        // after a value: ',' or the container's closing bracket
    kString,
    kEscape,
    kHex,
    kNumber,
    kLiteral,
    kDone,
  };
  // Sub-states of a number (RFC 8259 grammar).
  enum class Num : uint8_t { kMinus, kZero, kInt, kDot, kFrac, kExp, kExpSign, kExpDigits };

  bool value_start(uint8_t c);
  bool close_value();  // a value ended: back to the container (or done)
  bool structural_whitespace(uint8_t c);
  bool number(uint8_t c);

  Mode mode_ = Mode::kStart;
  std::array<char, kMaxDepth> stack_{};  // 'o' object, 'a' array
  int depth_ = 0;
  bool key_string_ = false;  // the string being read is an object key
  Num num_ = Num::kMinus;
  const char* literal_ = nullptr;  // "true" / "false" / "null" being read
  int literal_pos_ = 0;
  int hex_left_ = 0;
  int whitespace_run_ = 0;
};

// The vocabulary's ordinary tokens (no special, control or marker tokens) as a byte trie.
class JsonTokenTrie {
 public:
  explicit JsonTokenTrie(const Tokenizer& tokenizer);
  // Tokens whose whole byte string `machine` accepts (sorted ids).
  std::vector<int32_t> allowed(const JsonObjectMachine& machine) const;
  // The bytes of an ordinary token (empty for the others).
  const std::string& bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }

  // The trie itself, for other byte automata (structured outputs): node 0 is the root, 0 also
  // ends a child list; a node's tokens are those whose bytes end there.
  static constexpr uint32_t kRoot = 0;
  uint32_t first_child(uint32_t node) const { return nodes_[node].first_child; }
  uint32_t next_sibling(uint32_t node) const { return nodes_[node].next_sibling; }
  uint8_t node_byte(uint32_t node) const { return nodes_[node].byte; }
  std::span<const int32_t> node_tokens(uint32_t node) const {
    return {token_ids_.data() + nodes_[node].tokens_begin,
            nodes_[node].tokens_end - nodes_[node].tokens_begin};
  }
  size_t node_count() const { return nodes_.size(); }

 private:
  struct Node {
    uint32_t first_child = 0;  // 0: none (the root is node 0 and nobody's child)
    uint32_t next_sibling = 0;
    uint32_t tokens_begin = 0;  // into token_ids_: the tokens that end here
    uint32_t tokens_end = 0;
    uint8_t byte = 0;
  };
  void visit(uint32_t node, const JsonObjectMachine& machine, std::vector<int32_t>* out) const;

  std::vector<Node> nodes_;
  std::vector<int32_t> token_ids_;
  std::vector<std::string> bytes_;
};

}  // namespace gemmaserve
