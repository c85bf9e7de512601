#include "tokenizer/tokenizer_json_tables.h"

#include <algorithm>
#include <span>

#include "core/utf8.h"
#include "tokenizer/piece_index.h"

namespace gemmaserve {

namespace {

// Deeper nesting than any tokenizer.json has; the general parser then reports what it finds.
constexpr int kMaxDepth = 256;

// JSON's one-character escapes (after the backslash) and the characters they stand for.
constexpr std::string_view kEscapes = "\"\\/bfnrt";
constexpr std::string_view kEscaped = "\"\\/\b\f\n\r\t";

bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A strict JSON reader over the text (RFC 8259, as nlohmann accepts it): every method returns
// false on anything it does not accept, and the caller gives up on the fast path.
class Scanner {
 public:
  explicit Scanner(std::string_view text) : s_(text) {}

  size_t pos() const { return pos_; }
  void seek(size_t pos) { pos_ = pos; }
  bool at_end() const { return pos_ == s_.size(); }
  void skip_ws() {
    while (pos_ < s_.size() && is_ws(s_[pos_])) ++pos_;
  }
  // Skips whitespace, then consumes `c` if it is next.
  bool consume(char c) {
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  char peek() {
    skip_ws();
    return pos_ < s_.size() ? s_[pos_] : '\0';
  }

  // A string's content: a view of the text when it has no escapes, else decoded into `scratch`.
  bool string(std::string_view& out, std::string& scratch) {
    if (!consume('"')) return false;
    const size_t begin = pos_;
    while (pos_ < s_.size()) {
      const auto c = static_cast<unsigned char>(s_[pos_]);
      if (c == '"') {
        out = s_.substr(begin, pos_ - begin);
        ++pos_;
        return true;
      }
      if (c == '\\') {
        scratch.assign(s_.substr(begin, pos_ - begin));
        if (!escaped_rest(scratch)) return false;
        out = scratch;
        return true;
      }
      if (!plain_char(c)) return false;
    }
    return false;
  }

  // A non-negative integer without fraction or exponent that fits in 31 bits.
  bool index(uint32_t& out) {
    skip_ws();
    const size_t begin = pos_;
    uint64_t v = 0;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9' && pos_ - begin < 10) {
      v = v * 10 + static_cast<uint64_t>(s_[pos_] - '0');
      ++pos_;
    }
    const size_t digits = pos_ - begin;
    if (digits == 0 || (digits > 1 && s_[begin] == '0') || v > INT32_MAX) return false;
    if (pos_ < s_.size() && (s_[pos_] == '.' || s_[pos_] == 'e' || s_[pos_] == 'E' ||
                             (s_[pos_] >= '0' && s_[pos_] <= '9'))) {
      return false;
    }
    out = static_cast<uint32_t>(v);
    return true;
  }

  bool skip_value(int depth = 0) {
    if (depth > kMaxDepth) return false;
    const char c = peek();
    std::string scratch;
    std::string_view ignored;
    if (c == '"') return string(ignored, scratch);
    if (c == '{') {
      ++pos_;
      if (consume('}')) return true;
      do {
        if (!string(ignored, scratch) || !consume(':') || !skip_value(depth + 1)) return false;
      } while (consume(','));
      return consume('}');
    }
    if (c == '[') {
      ++pos_;
      if (consume(']')) return true;
      do {
        if (!skip_value(depth + 1)) return false;
      } while (consume(','));
      return consume(']');
    }
    if (c == 't') return literal("true");
    if (c == 'f') return literal("false");
    if (c == 'n') return literal("null");
    return number();
  }

 private:
  // Advances over one unescaped character of a string: printable ASCII or well-formed UTF-8.
  bool plain_char(unsigned char c) {
    if (c < 0x20) return false;
    if (c < 0x80) {
      ++pos_;
      return true;
    }
    const size_t len = utf8::sequence_length(s_, pos_);
    pos_ += len;
    return len != 0;
  }

  // Decodes from the first backslash to the closing quote, appending to `out`.
  bool escaped_rest(std::string& out) {
    while (pos_ < s_.size()) {
      const auto c = static_cast<unsigned char>(s_[pos_]);
      if (c == '"') {
        ++pos_;
        return true;
      }
      if (c != '\\') {
        const size_t begin = pos_;
        if (!plain_char(c)) return false;
        out.append(s_.substr(begin, pos_ - begin));
        continue;
      }
      if (++pos_ >= s_.size()) return false;
      const char e = s_[pos_++];
      if (const size_t k = kEscapes.find(e); k != std::string_view::npos) {
        out += kEscaped[k];
        continue;
      }
      if (e != 'u') return false;
      char32_t cp = 0;
      if (!hex4(cp)) return false;
      if (cp >= 0xDC00 && cp <= 0xDFFF) return false;  // a lone low surrogate
      if (cp >= 0xD800 && cp <= 0xDBFF) {
        char32_t low = 0;
        if (pos_ + 2 > s_.size() || s_[pos_] != '\\' || s_[pos_ + 1] != 'u') return false;
        pos_ += 2;
        if (!hex4(low) || low < 0xDC00 || low > 0xDFFF) return false;
        cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
      }
      utf8::append(out, cp);
    }
    return false;
  }

  bool hex4(char32_t& out) {
    if (pos_ + 4 > s_.size()) return false;
    for (int i = 0; i < 4; ++i) {
      const int h = hex_value(s_[pos_++]);
      if (h < 0) return false;
      out = out * 16 + static_cast<char32_t>(h);
    }
    return true;
  }

  bool literal(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  bool digits() {
    const size_t begin = pos_;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
    return pos_ > begin;
  }

  // -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
  bool number() {
    if (pos_ < s_.size() && s_[pos_] == '-') ++pos_;
    if (pos_ >= s_.size()) return false;
    if (s_[pos_] == '0') {
      ++pos_;
    } else if (!digits()) {
      return false;
    }
    if (pos_ < s_.size() && s_[pos_] == '.') {
      ++pos_;
      if (!digits()) return false;
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (!digits()) return false;
    }
    return true;
  }

  std::string_view s_;
  size_t pos_ = 0;
};

// {"piece": id, ...} with ids 0..N-1, each once.
bool read_vocab(Scanner& in, std::vector<std::string>& vocab) {
  if (!in.consume('{')) return false;
  std::vector<std::string> pieces;
  std::vector<uint32_t> ids;
  std::string scratch;
  if (!in.consume('}')) {
    do {
      std::string_view piece;
      uint32_t id = 0;
      if (!in.string(piece, scratch) || !in.consume(':') || !in.index(id)) return false;
      pieces.emplace_back(piece);
      ids.push_back(id);
    } while (in.consume(','));
    if (!in.consume('}')) return false;
  }
  bool in_order = true;
  for (size_t i = 0; i < ids.size() && in_order; ++i) in_order = ids[i] == i;
  if (in_order) {
    vocab = std::move(pieces);
    return true;
  }
  vocab.assign(pieces.size(), std::string());
  std::vector<bool> seen(pieces.size(), false);
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (ids[i] >= pieces.size() || seen[ids[i]]) return false;
    seen[ids[i]] = true;
    vocab[ids[i]] = std::move(pieces[i]);
  }
  return true;
}

// One merge, "a b" or ["a", "b"]: its two pieces appended to `pieces`, decoded into `scratch_a`
// and `scratch_b` when they hold escapes.
bool read_merge(Scanner& in, std::vector<std::string_view>& pieces, std::string& scratch_a,
                std::string& scratch_b) {
  std::string_view a;
  std::string_view b;
  const char c = in.peek();
  if (c == '"') {
    std::string_view both;
    if (!in.string(both, scratch_a)) return false;
    const size_t space = both.find(' ');
    if (space == std::string_view::npos || both.find(' ', space + 1) != std::string_view::npos) {
      return false;
    }
    a = both.substr(0, space);
    b = both.substr(space + 1);
  } else if (c == '[') {
    in.consume('[');
    if (!in.string(a, scratch_a) || !in.consume(',') || !in.string(b, scratch_b) ||
        !in.consume(']')) {
      return false;
    }
  } else {
    return false;
  }
  pieces.push_back(a);
  pieces.push_back(b);
  return true;
}

// ["a b", ...] or [["a", "b"], ...], each piece in the vocabulary; looked up a batch at a time.
bool read_merges(Scanner& in, const PieceIndex& index,
                 std::vector<std::pair<int32_t, int32_t>>& merges) {
  if (!in.consume('[')) return false;
  if (in.consume(']')) return true;
  constexpr size_t kBatch = 512;
  std::vector<std::string_view> pieces;
  pieces.reserve(2 * kBatch);
  std::vector<int32_t> ids(2 * kBatch);
  // Decoded pieces of the batch, one fixed string per piece so that views into them stay valid.
  std::vector<std::string> decoded(2 * kBatch);
  auto resolve = [&] {
    index.find_all(pieces, std::span(ids).first(pieces.size()));
    for (size_t k = 0; k < pieces.size(); k += 2) {
      if (ids[k] < 0 || ids[k + 1] < 0) return false;
      merges.emplace_back(ids[k], ids[k + 1]);
    }
    pieces.clear();
    return true;
  };
  do {
    const size_t k = pieces.size();
    if (!read_merge(in, pieces, decoded[k], decoded[k + 1])) return false;
    if (pieces.size() == 2 * kBatch && !resolve()) return false;
  } while (in.consume(','));
  return resolve() && in.consume(']');
}

struct Span {
  size_t begin = 0;
  size_t end = 0;
};

}  // namespace

std::optional<TokenizerJsonTables> scan_tokenizer_json_tables(std::string_view text) {
  TokenizerJsonTables t;
  Scanner in(text);
  std::string scratch;
  std::string_view key;
  std::optional<Span> vocab_span;
  std::optional<Span> merges_span;
  std::optional<PieceIndex> index;
  bool merges_read = false;
  bool seen_model = false;

  auto index_vocab = [&]() -> bool {
    index.emplace(t.vocab);
    for (size_t i = 0; i < t.vocab.size(); ++i) {
      if (!index->insert(static_cast<int32_t>(i))) return false;
    }
    return true;
  };
  auto read_model = [&]() -> bool {
    if (!in.consume('{')) return false;
    if (in.consume('}')) return true;
    do {
      if (!in.string(key, scratch) || !in.consume(':')) return false;
      in.skip_ws();
      const size_t begin = in.pos();
      if (key == "vocab") {
        if (vocab_span || !read_vocab(in, t.vocab) || !index_vocab()) return false;
        vocab_span = Span{begin, in.pos()};
      } else if (key == "merges") {
        if (merges_span) return false;
        // Merges before the vocabulary (never so in files tokenizers writes) are read at the end.
        merges_read = index.has_value();
        if (!(merges_read ? read_merges(in, *index, t.merges) : in.skip_value())) return false;
        merges_span = Span{begin, in.pos()};
      } else if (!in.skip_value()) {
        return false;
      }
    } while (in.consume(','));
    return in.consume('}');
  };

  if (!in.consume('{')) return std::nullopt;
  if (!in.consume('}')) {
    do {
      if (!in.string(key, scratch) || !in.consume(':')) return std::nullopt;
      if (key == "model") {
        if (seen_model || !read_model()) return std::nullopt;
        seen_model = true;
      } else if (!in.skip_value()) {
        return std::nullopt;
      }
    } while (in.consume(','));
    if (!in.consume('}')) return std::nullopt;
  }
  in.skip_ws();
  if (!in.at_end() || !vocab_span || !merges_span) return std::nullopt;
  if (!merges_read) {
    Scanner merges_in(text);
    merges_in.seek(merges_span->begin);
    if (!read_merges(merges_in, *index, t.merges)) return std::nullopt;
  }

  const bool vocab_first = vocab_span->begin < merges_span->begin;
  const Span first = vocab_first ? *vocab_span : *merges_span;
  const Span second = vocab_first ? *merges_span : *vocab_span;
  t.rest.reserve(text.size() - (first.end - first.begin) - (second.end - second.begin) + 4);
  t.rest.append(text.substr(0, first.begin)).append(vocab_first ? "{}" : "[]");
  t.rest.append(text.substr(first.end, second.begin - first.end));
  t.rest.append(vocab_first ? "[]" : "{}").append(text.substr(second.end));
  return t;
}

}  // namespace gemmaserve
