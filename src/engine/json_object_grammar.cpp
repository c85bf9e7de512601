#include "engine/json_object_grammar.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "engine/structured/grammar.h"
#include "tokenizer/tokenizer.h"

namespace gemmaserve {

namespace {

bool is_whitespace(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }
bool is_hex(uint8_t c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

}  // namespace

bool JsonObjectMachine::feed(uint8_t c) {
  const JsonObjectMachine saved = *this;
  bool ok = false;
  switch (mode_) {
    case Mode::kDone:  // blank space may pad a finished object (when nothing may stop it)
      ok = is_whitespace(c);
      break;
    case Mode::kStart:  // the answer opens with the object itself
      if (c == '{') ok = value_start(c);
      break;
    case Mode::kValue:
      ok = is_whitespace(c) ? structural_whitespace(c) : value_start(c);
      break;
    case Mode::kArrayFirst:
      if (is_whitespace(c)) {
        ok = structural_whitespace(c);
      } else if (c == ']') {
        --depth_;
        ok = close_value();
      } else {
        ok = value_start(c);
      }
      break;
    case Mode::kObjectFirst:
    case Mode::kKey:
      if (is_whitespace(c)) {
        ok = structural_whitespace(c);
      } else if (c == '}' && mode_ == Mode::kObjectFirst) {
        --depth_;
        ok = close_value();
      } else if (c == '"') {
        key_string_ = true;
        mode_ = Mode::kString;
        ok = true;
      }
      break;
    case Mode::kColon:
      if (is_whitespace(c)) {
        ok = structural_whitespace(c);
      } else if (c == ':') {
        mode_ = Mode::kValue;
        ok = true;
      }
      break;
    case Mode::kAfter: {
      const char top = stack_[static_cast<size_t>(depth_ - 1)];
      if (is_whitespace(c)) {
        ok = structural_whitespace(c);
      } else if (c == ',') {
        mode_ = top == 'o' ? Mode::kKey : Mode::kValue;
        ok = true;
      } else if ((c == '}' && top == 'o') || (c == ']' && top == 'a')) {
        --depth_;
        ok = close_value();
      }
      break;
    }
    case Mode::kString:
      if (c == '"') {
        if (key_string_) {
          key_string_ = false;
          mode_ = Mode::kColon;
          ok = true;
        } else {
          ok = close_value();
        }
      } else if (c == '\\') {
        mode_ = Mode::kEscape;
        ok = true;
      } else {
        ok = c >= 0x20;
      }
      break;
    case Mode::kEscape:
      if (c == 'u') {
        hex_left_ = 4;
        mode_ = Mode::kHex;
        ok = true;
      } else if (std::strchr("\"\\/bfnrt", c) != nullptr && c != 0) {
        mode_ = Mode::kString;
        ok = true;
      }
      break;
    case Mode::kHex:
      if (is_hex(c)) {
        if (--hex_left_ == 0) mode_ = Mode::kString;
        ok = true;
      }
      break;
    case Mode::kNumber:
      ok = number(c);
      break;
    case Mode::kLiteral:
      if (static_cast<char>(c) == literal_[literal_pos_]) {
        ++literal_pos_;
        ok = literal_[literal_pos_] == '\0' ? close_value() : true;
      }
      break;
  }
  if (!ok) {
    *this = saved;
  } else if (!is_whitespace(c)) {
    whitespace_run_ = 0;  // a run is consecutive blank bytes between tokens
  }
  return ok;
}

bool JsonObjectMachine::structural_whitespace(uint8_t) {
  if (whitespace_run_ >= kMaxWhitespaceRun) return false;
  ++whitespace_run_;
  return true;
}

bool JsonObjectMachine::value_start(uint8_t c) {
  whitespace_run_ = 0;
  switch (c) {
    case '{':
    case '[':
      if (depth_ == kMaxDepth) return false;
      stack_[static_cast<size_t>(depth_++)] = c == '{' ? 'o' : 'a';
      mode_ = c == '{' ? Mode::kObjectFirst : Mode::kArrayFirst;
      return true;
    case '"':
      key_string_ = false;
      mode_ = Mode::kString;
      return true;
    case '-':
      mode_ = Mode::kNumber;
      num_ = Num::kMinus;
      return true;
    case 't':
    case 'f':
    case 'n':
      literal_ = c == 't' ? "true" : c == 'f' ? "false" : "null";
      literal_pos_ = 1;
      mode_ = Mode::kLiteral;
      return true;
    default:
      if (!is_digit(c)) return false;
      mode_ = Mode::kNumber;
      num_ = c == '0' ? Num::kZero : Num::kInt;
      return true;
  }
}

bool JsonObjectMachine::close_value() {
  whitespace_run_ = 0;
  mode_ = depth_ == 0 ? Mode::kDone : Mode::kAfter;
  return true;
}

bool JsonObjectMachine::number(uint8_t c) {
  const bool digit = is_digit(c), exp = c == 'e' || c == 'E';
  switch (num_) {
    case Num::kMinus:
      if (!digit) return false;
      num_ = c == '0' ? Num::kZero : Num::kInt;
      return true;
    case Num::kZero:
    case Num::kInt:
      if (digit && num_ == Num::kInt) return true;
      if (c == '.') {
        num_ = Num::kDot;
        return true;
      }
      if (exp) {
        num_ = Num::kExp;
        return true;
      }
      break;  // the number ended: c belongs to what follows
    case Num::kDot:
      if (!digit) return false;
      num_ = Num::kFrac;
      return true;
    case Num::kFrac:
      if (digit) return true;
      if (exp) {
        num_ = Num::kExp;
        return true;
      }
      break;
    case Num::kExp:
      if (c == '+' || c == '-') {
        num_ = Num::kExpSign;
        return true;
      }
      if (!digit) return false;
      num_ = Num::kExpDigits;
      return true;
    case Num::kExpSign:
      if (!digit) return false;
      num_ = Num::kExpDigits;
      return true;
    case Num::kExpDigits:
      if (digit) return true;
      break;
  }
  close_value();  // numbers only occur inside the object, so this is kAfter
  return feed(c);
}

std::string JsonObjectMachine::key() const {
  std::string k;
  k.push_back(static_cast<char>(mode_));
  k.push_back(static_cast<char>(num_));
  k.push_back(key_string_ ? 'k' : 'v');
  k.push_back(static_cast<char>(literal_ == nullptr ? 0 : literal_[0]));
  k.push_back(static_cast<char>(literal_pos_));
  k.push_back(static_cast<char>(hex_left_));
  k.push_back(static_cast<char>(whitespace_run_));
  k.append(stack_.data(), static_cast<size_t>(depth_));
  return k;
}

JsonTokenTrie::JsonTokenTrie(const Tokenizer& tokenizer) {
  const auto vocab = static_cast<int32_t>(tokenizer.vocab_size());
  bytes_.resize(static_cast<size_t>(vocab));
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < vocab; ++id) {
    if (!tokenizer.contains(id) || tokenizer.is_special(id)) continue;
    const int32_t one[] = {id};
    std::string b = tokenizer.decode_bytes(one, /*skip_special=*/false);
    // Bytes 0xF8-0xFF never occur in UTF-8 text (their byte-fallback tokens never belong in an
    // answer), and grammars use them privately (Grammar::private_byte).
    if (b.empty() || std::any_of(b.begin(), b.end(), [](char c) {
          return static_cast<uint8_t>(c) >= structured::Grammar::kFirstPrivateByte;
        })) {
      continue;
    }
    bytes_[static_cast<size_t>(id)] = std::move(b);
    ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return std::make_pair(bytes_[static_cast<size_t>(a)], a) <
           std::make_pair(bytes_[static_cast<size_t>(b)], b);
  });
  // Sorted byte strings share prefixes with their predecessor: one walk builds the trie, each
  // node's children appended in byte order.
  nodes_.emplace_back();
  std::vector<uint32_t> last_child(1, 0), path = {0};
  const std::string* prev = nullptr;
  for (int32_t id : ids) {
    const std::string& s = bytes_[static_cast<size_t>(id)];
    size_t common = 0;
    if (prev != nullptr) {
      while (common < s.size() && common < prev->size() && s[common] == (*prev)[common]) ++common;
    }
    path.resize(common + 1);
    for (size_t d = common; d < s.size(); ++d) {
      const auto node = static_cast<uint32_t>(nodes_.size());
      nodes_.emplace_back();
      nodes_.back().byte = static_cast<uint8_t>(s[d]);
      last_child.push_back(0);
      const uint32_t parent = path.back();
      if (last_child[parent] == 0) {
        nodes_[parent].first_child = node;
      } else {
        nodes_[last_child[parent]].next_sibling = node;
      }
      last_child[parent] = node;
      path.push_back(node);
    }
    Node& end = nodes_[path.back()];
    if (end.tokens_begin == end.tokens_end) {
      end.tokens_begin = end.tokens_end = static_cast<uint32_t>(token_ids_.size());
    }
    token_ids_.push_back(id);
    ++end.tokens_end;
    prev = &s;
  }
}

std::vector<int32_t> JsonTokenTrie::allowed(const JsonObjectMachine& machine) const {
  std::vector<int32_t> out;
  visit(0, machine, &out);
  std::sort(out.begin(), out.end());
  return out;
}

void JsonTokenTrie::visit(uint32_t node, const JsonObjectMachine& machine,
                          std::vector<int32_t>* out) const {
  for (uint32_t c = nodes_[node].first_child; c != 0; c = nodes_[c].next_sibling) {
    JsonObjectMachine next = machine;
    if (!next.feed(nodes_[c].byte)) continue;
    const Node& n = nodes_[c];
    out->insert(out->end(), token_ids_.begin() + n.tokens_begin, token_ids_.begin() + n.tokens_end);
    visit(c, next, out);
  }
}

}  // namespace gemmaserve
