#include "engine/structured/regex_compiler.h"

#include <algorithm>
#include <cctype>
#include <optional>
#include <string>

#include "core/error.h"
#include "core/utf8.h"

namespace gemmaserve::structured {

CodepointRanges normalize_ranges(CodepointRanges r) {
  std::sort(r.begin(), r.end());
  CodepointRanges out;
  for (const auto& [lo, hi] : r) {
    if (!out.empty() && lo <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, hi);
    } else {
      out.emplace_back(lo, hi);
    }
  }
  return out;
}

CodepointRanges complement_ranges(const CodepointRanges& r) {
  CodepointRanges out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : normalize_ranges(r)) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= 0x10FFFF) out.emplace_back(next, 0x10FFFF);
  return out;
}

namespace {

const CodepointRanges kDigit = {{'0', '9'}};
const CodepointRanges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const CodepointRanges kSpace = {{'\t', '\r'}, {' ', ' '}};

class RegexParser {
 public:
  RegexParser(Grammar* g, std::string_view pattern, bool json) : g_(*g), p_(pattern), json_(json) {}

  Grammar::Symbol parse() {
    Grammar::Symbol s = alternation(0);
    if (pos_ < p_.size()) fail("unbalanced ')'");
    return s;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw InputError("invalid regex at position " + std::to_string(pos_) + ": " + what);
  }
  bool at_end() const { return pos_ >= p_.size(); }
  char peek() const { return p_[pos_]; }

  uint32_t next_codepoint() {
    const size_t n = utf8::sequence_length(p_, pos_);
    if (n == 0) fail("the pattern is not valid UTF-8");
    const char32_t cp = utf8::decode_at(p_, pos_);
    pos_ += n;
    return static_cast<uint32_t>(cp);
  }

  Grammar::Symbol alternation(int depth) {
    if (depth > 64) fail("groups nested too deeply");
    std::vector<Grammar::Sequence> alts = {sequence(depth)};
    while (!at_end() && peek() == '|') {
      ++pos_;
      alts.push_back(sequence(depth));
    }
    return g_.choice(std::move(alts), "regex");
  }

  Grammar::Sequence sequence(int depth) {
    Grammar::Sequence seq;
    while (!at_end() && peek() != '|' && peek() != ')') {
      std::optional<Grammar::Sequence> a = atom(depth);
      if (!a) continue;  // an anchor
      quantified(std::move(*a), &seq);
    }
    return seq;
  }

  // The atom with its quantifier, appended to `seq`.
  void quantified(Grammar::Sequence atom, Grammar::Sequence* seq) {
    if (at_end()) {
      seq->insert(seq->end(), atom.begin(), atom.end());
      return;
    }
    int min = 1, max = 1;
    const char c = peek();
    if (c == '*' || c == '+' || c == '?') {
      ++pos_;
      min = c == '+' ? 1 : 0;
      max = c == '?' ? 1 : -1;
    } else if (c == '{' && counted(&min, &max)) {
    } else {
      seq->insert(seq->end(), atom.begin(), atom.end());
      return;
    }
    if (!at_end() && (peek() == '?' || peek() == '+')) ++pos_;  // lazy/possessive: same set
    if (!at_end() && (peek() == '*' || peek() == '+' || peek() == '?' || peek() == '{')) {
      if (peek() != '{' ||
          (pos_ + 1 < p_.size() && std::isdigit(static_cast<unsigned char>(p_[pos_ + 1])))) {
        fail("multiple repeat");
      }
    }
    seq->push_back(g_.repeat(std::move(atom), min, max));
  }

  // {m}, {m,}, {m,n}; false (nothing read) when the brace is a literal, as in Python.
  bool counted(int* min, int* max) {
    size_t q = pos_ + 1;
    auto number = [&](long* v) {
      const size_t start = q;
      *v = 0;
      while (q < p_.size() && std::isdigit(static_cast<unsigned char>(p_[q]))) {
        *v = std::min<long>(*v * 10 + (p_[q] - '0'), 1L << 30);
        ++q;
      }
      return q > start;
    };
    long lo = 0, hi = 0;
    if (!number(&lo)) return false;
    if (q < p_.size() && p_[q] == '}') {
      hi = lo;
    } else if (q < p_.size() && p_[q] == ',') {
      ++q;
      if (!number(&hi)) hi = -1;
      if (q >= p_.size() || p_[q] != '}') return false;
    } else {
      return false;
    }
    pos_ = q + 1;
    if (hi >= 0 && hi < lo) fail("min repeat greater than max repeat");
    constexpr long kMaxCount = 100000;
    if (lo > kMaxCount || hi > kMaxCount) {
      fail("repetition count over " + std::to_string(kMaxCount));
    }
    *min = static_cast<int>(lo);
    *max = static_cast<int>(hi);
    return true;
  }

  std::optional<Grammar::Sequence> atom(int depth) {
    const char c = peek();
    switch (c) {
      case '(': {
        ++pos_;
        if (!at_end() && peek() == '?') {
          ++pos_;
          if (!at_end() && peek() == ':') {
            ++pos_;
          } else if (!at_end() && (peek() == 'P' || peek() == '<') && p_.substr(pos_, 2) != "<=" &&
                     p_.substr(pos_, 2) != "<!") {
            const size_t close = p_.find('>', pos_);
            if (close == std::string_view::npos) fail("unterminated group name");
            pos_ = close + 1;
          } else {
            fail("lookaround and inline flags ('(?" + std::string(p_.substr(pos_, 1)) +
                 "') are not supported");
          }
        }
        Grammar::Symbol inner = alternation(depth + 1);
        if (at_end() || peek() != ')') fail("missing ), unterminated subpattern");
        ++pos_;
        return Grammar::Sequence{inner};
      }
      case '[':
        return Grammar::Sequence{chars(char_class())};
      case '.':
        ++pos_;
        return Grammar::Sequence{chars(complement_ranges({{'\n', '\n'}}))};
      case '^':
      case '$':
        ++pos_;  // the match is always whole
        return std::nullopt;
      case '*':
      case '+':
      case '?':
        fail("nothing to repeat");
      case '\\': {
        CodepointRanges r;
        if (escape(&r, /*in_class=*/false)) return Grammar::Sequence{chars(r)};
        return std::nullopt;
      }
      default: {
        const uint32_t cp = next_codepoint();
        return Grammar::Sequence{chars({{cp, cp}})};
      }
    }
  }

  // After '\': a class or one code point into `r`; false for an ignored anchor (\A, \Z).
  bool escape(CodepointRanges* r, bool in_class) {
    ++pos_;
    if (at_end()) fail("bad escape (end of pattern)");
    const char c = peek();
    ++pos_;
    auto add = [&](const CodepointRanges& x) { r->insert(r->end(), x.begin(), x.end()); };
    auto hex = [&](int digits) {
      uint32_t v = 0;
      for (int i = 0; i < digits; ++i) {
        if (at_end() || !std::isxdigit(static_cast<unsigned char>(peek()))) {
          fail(std::string("incomplete escape \\") + c);
        }
        const char h = peek();
        v = v * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h))
                                               ? h - '0'
                                               : (std::tolower(h) - 'a' + 10));
        ++pos_;
      }
      return v;
    };
    uint32_t cp = 0;
    switch (c) {
      case 'd':
        add(kDigit);
        return true;
      case 'D':
        add(complement_ranges(kDigit));
        return true;
      case 'w':
        add(kWord);
        return true;
      case 'W':
        add(complement_ranges(kWord));
        return true;
      case 's':
        add(kSpace);
        return true;
      case 'S':
        add(complement_ranges(kSpace));
        return true;
      case 'n':
        cp = '\n';
        break;
      case 't':
        cp = '\t';
        break;
      case 'r':
        cp = '\r';
        break;
      case 'f':
        cp = '\f';
        break;
      case 'v':
        cp = '\v';
        break;
      case '0':
        cp = 0;
        break;
      case 'x':
        cp = hex(2);
        break;
      case 'u':
        cp = hex(4);
        break;
      case 'U':
        cp = hex(8);
        break;
      case 'A':
      case 'Z':
        if (in_class) fail(std::string("bad escape \\") + c);
        return false;
      default:
        if (std::isalnum(static_cast<unsigned char>(c))) {
          --pos_;
          fail(std::string("unsupported escape \\") + c +
               " (backreferences, word boundaries and \\p classes are not supported)");
        }
        --pos_;
        cp = next_codepoint();
    }
    if (cp > 0x10FFFF) fail("escape outside Unicode");
    r->emplace_back(cp, cp);
    return true;
  }

  CodepointRanges char_class() {
    ++pos_;  // '['
    bool negate = false;
    if (!at_end() && peek() == '^') {
      negate = true;
      ++pos_;
    }
    CodepointRanges r;
    bool first = true;
    for (;;) {
      if (at_end()) fail("unterminated character set");
      if (peek() == ']' && !first) break;
      first = false;
      if (p_.substr(pos_, 2) == "[:") fail("POSIX character classes are not supported");
      CodepointRanges one;
      if (peek() == '\\') {
        escape(&one, /*in_class=*/true);
      } else {
        const uint32_t cp = next_codepoint();
        one.emplace_back(cp, cp);
      }
      const bool single = one.size() == 1 && one[0].first == one[0].second;
      if (single && pos_ + 1 < p_.size() && peek() == '-' && p_[pos_ + 1] != ']') {
        ++pos_;
        CodepointRanges hi_one;
        if (peek() == '\\') {
          escape(&hi_one, true);
        } else {
          const uint32_t cp = next_codepoint();
          hi_one.emplace_back(cp, cp);
        }
        if (hi_one.size() != 1 || hi_one[0].first != hi_one[0].second) fail("bad character range");
        if (hi_one[0].first < one[0].first) fail("bad character range");
        one[0].second = hi_one[0].first;
      }
      r.insert(r.end(), one.begin(), one.end());
    }
    ++pos_;  // ']'
    return negate ? complement_ranges(r) : normalize_ranges(r);
  }

  // One character from `r`, as JSON string content when asked.
  Grammar::Symbol chars(CodepointRanges r) {
    if (!json_) {
      if (r.empty()) fail("empty character set");
      return g_.codepoints(r);
    }
    // Plain characters stand for themselves; '"', '\' and controls need their escapes.
    const CodepointRanges raw_ok = complement_ranges({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}});
    CodepointRanges plain;
    std::vector<Grammar::Sequence> alts;
    for (const auto& [lo, hi] : normalize_ranges(r)) {
      for (const auto& [a, b] : raw_ok) {
        const uint32_t l = std::max(lo, a), h = std::min(hi, b);
        if (l <= h) plain.emplace_back(l, h);
      }
      for (uint32_t cp : {static_cast<uint32_t>('"'), static_cast<uint32_t>('\\')}) {
        if (lo <= cp && cp <= hi) alts.push_back(g_.literal(std::string("\\") + char(cp)));
      }
      for (uint32_t cp = lo; cp <= std::min<uint32_t>(hi, 0x1F); ++cp) {
        static constexpr char kHex[] = "0123456789abcdef";
        alts.push_back(g_.literal(std::string("\\u00") + kHex[cp >> 4] + kHex[cp & 15]));
      }
    }
    if (!plain.empty()) alts.push_back({g_.codepoints(plain)});
    if (alts.empty()) fail("empty character set");
    if (alts.size() == 1 && alts[0].size() == 1) return alts[0][0];
    return g_.choice(std::move(alts), "json_char");
  }

  Grammar& g_;
  std::string_view p_;
  bool json_;
  size_t pos_ = 0;
};

}  // namespace

Grammar::Symbol compile_regex(Grammar* g, std::string_view pattern, bool inside_json_string) {
  return RegexParser(g, pattern, inside_json_string).parse();
}

}  // namespace gemmaserve::structured
