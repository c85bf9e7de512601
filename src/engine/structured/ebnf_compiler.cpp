#include "engine/structured/ebnf_compiler.h"

#include <cctype>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/utf8.h"
#include "engine/structured/regex_compiler.h"

namespace gemmaserve::structured {

namespace {

bool name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
}

class EbnfParser {
 public:
  EbnfParser(Grammar* g, std::string_view text) : g_(*g), t_(text) {}

  void parse() {
    skip_space();
    while (!at_end()) {
      const std::string name = identifier();
      if (name.empty()) fail("expected a rule name");
      skip_space();
      if (t_.substr(pos_, 3) != "::=") fail("expected '::=' after rule name '" + name + "'");
      pos_ += 3;
      const uint32_t rule = rule_id(name);
      if (defined_[rule]) fail("rule '" + name + "' is defined twice");
      defined_[rule] = true;
      g_.set_alternatives(rule, alternatives(0));
      skip_space();
      if (!at_end() && t_[pos_] == ';') {
        ++pos_;
        skip_space();
      }
    }
    for (const auto& [name, id] : ids_) {
      if (!defined_[id]) throw InputError("invalid grammar: rule '" + name + "' is not defined");
    }
    const auto root = ids_.find("root");
    if (root == ids_.end()) throw InputError("invalid grammar: the grammar has no 'root' rule");
    g_.set_root(root->second);
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < pos_ && i < t_.size(); ++i) {
      if (t_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    throw InputError("invalid grammar at line " + std::to_string(line) + ", column " +
                     std::to_string(col) + ": " + what);
  }
  bool at_end() const { return pos_ >= t_.size(); }

  void skip_space() {
    while (!at_end()) {
      if (std::isspace(static_cast<unsigned char>(t_[pos_]))) {
        ++pos_;
      } else if (t_[pos_] == '#') {
        while (!at_end() && t_[pos_] != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  std::string identifier() {
    const size_t start = pos_;
    while (!at_end() && name_char(t_[pos_])) ++pos_;
    return std::string(t_.substr(start, pos_ - start));
  }

  // Whether the next thing is `name ::=` (the next rule begins).
  bool at_rule_start() {
    const size_t saved = pos_;
    const bool named = !identifier().empty();
    skip_space();
    const bool yes = named && t_.substr(pos_, 3) == "::=";
    pos_ = saved;
    return yes;
  }

  uint32_t rule_id(const std::string& name) {
    const auto it = ids_.find(name);
    if (it != ids_.end()) return it->second;
    const uint32_t id = g_.add_rule(name);
    ids_.emplace(name, id);
    if (defined_.size() <= id) defined_.resize(id + 1, false);
    return id;
  }

  std::vector<Grammar::Sequence> alternatives(int depth) {
    if (depth > 64) fail("groups nested too deeply");
    std::vector<Grammar::Sequence> alts = {sequence(depth)};
    for (;;) {
      skip_space();
      if (at_end() || t_[pos_] != '|') return alts;
      ++pos_;
      alts.push_back(sequence(depth));
    }
  }

  Grammar::Sequence sequence(int depth) {
    Grammar::Sequence seq;
    for (;;) {
      skip_space();
      if (at_end()) break;
      const char c = t_[pos_];
      if (c == '|' || c == ')' || c == ';') break;
      if (name_char(c) && at_rule_start()) break;
      Grammar::Sequence atom = element(depth);
      skip_space();
      int min = 1, max = 1;
      if (!at_end() && (t_[pos_] == '*' || t_[pos_] == '+' || t_[pos_] == '?')) {
        min = t_[pos_] == '+' ? 1 : 0;
        max = t_[pos_] == '?' ? 1 : -1;
        ++pos_;
      } else if (!at_end() && t_[pos_] == '{') {
        braces(&min, &max);
      } else {
        seq.insert(seq.end(), atom.begin(), atom.end());
        continue;
      }
      seq.push_back(g_.repeat(std::move(atom), min, max));
    }
    return seq;
  }

  void braces(int* min, int* max) {
    ++pos_;
    auto number = [&]() {
      skip_space();
      const size_t start = pos_;
      long v = 0;
      while (!at_end() && std::isdigit(static_cast<unsigned char>(t_[pos_]))) {
        v = std::min<long>(v * 10 + (t_[pos_] - '0'), 1L << 30);
        ++pos_;
      }
      return pos_ > start ? v : -1L;
    };
    long lo = number(), hi = lo;
    if (lo < 0) fail("expected a repetition count");
    skip_space();
    if (!at_end() && t_[pos_] == ',') {
      ++pos_;
      hi = number();
    }
    skip_space();
    if (at_end() || t_[pos_] != '}') fail("expected '}'");
    ++pos_;
    if (hi >= 0 && hi < lo) fail("repetition bounds out of order");
    if (lo > 100000 || hi > 100000) fail("repetition count over 100000");
    *min = static_cast<int>(lo);
    *max = static_cast<int>(hi);
  }

  Grammar::Sequence element(int depth) {
    const char c = t_[pos_];
    if (c == '"' || c == '\'') return string_literal(c);
    if (c == '[') {
      const size_t start = pos_++;
      if (!at_end() && t_[pos_] == '^') ++pos_;
      if (!at_end() && t_[pos_] == ']') ++pos_;
      while (!at_end() && t_[pos_] != ']') pos_ += t_[pos_] == '\\' ? 2 : 1;
      if (at_end()) fail("unterminated character class");
      ++pos_;
      try {
        return {compile_regex(&g_, t_.substr(start, pos_ - start))};
      } catch (const InputError& e) {
        pos_ = start;
        fail(std::string("bad character class (") + e.what() + ")");
      }
    }
    if (c == '.') {
      ++pos_;
      return {g_.codepoints({{0, 0x10FFFF}})};
    }
    if (c == '(') {
      ++pos_;
      skip_space();
      if (!at_end() && t_[pos_] == '=') fail("lookahead assertions are not supported");
      std::vector<Grammar::Sequence> alts = alternatives(depth + 1);
      skip_space();
      if (at_end() || t_[pos_] != ')') fail("expected ')'");
      ++pos_;
      return {g_.choice(std::move(alts), "group")};
    }
    if (name_char(c)) return {Grammar::ref(rule_id(identifier()))};
    fail(std::string("unexpected character '") + c + "'");
  }

  Grammar::Sequence string_literal(char quote) {
    ++pos_;
    std::string bytes;
    for (;;) {
      if (at_end() || t_[pos_] == '\n') fail("unterminated string");
      const char c = t_[pos_];
      if (c == quote) break;
      if (c != '\\') {
        bytes.push_back(c);
        ++pos_;
        continue;
      }
      ++pos_;
      if (at_end()) fail("unterminated string");
      const char e = t_[pos_++];
      auto hex = [&](int digits) {
        uint32_t v = 0;
        for (int i = 0; i < digits; ++i) {
          if (at_end() || !std::isxdigit(static_cast<unsigned char>(t_[pos_]))) {
            fail("bad escape in string");
          }
          const char h = t_[pos_++];
          v = v * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h))
                                                 ? h - '0'
                                                 : std::tolower(h) - 'a' + 10);
        }
        return v;
      };
      switch (e) {
        case 'n':
          bytes.push_back('\n');
          break;
        case 't':
          bytes.push_back('\t');
          break;
        case 'r':
          bytes.push_back('\r');
          break;
        case '0':
          bytes.push_back('\0');
          break;
        case 'x':
          bytes.push_back(static_cast<char>(hex(2)));
          break;
        case 'u':
          utf8::append(bytes, static_cast<char32_t>(hex(4)));
          break;
        case 'U':
          utf8::append(bytes, static_cast<char32_t>(hex(8)));
          break;
        case '\\':
        case '"':
        case '\'':
        case '[':
        case ']':
          bytes.push_back(e);
          break;
        default:
          fail(std::string("unknown escape \\") + e + " in string");
      }
    }
    ++pos_;
    return g_.literal(bytes);
  }

  Grammar& g_;
  std::string_view t_;
  size_t pos_ = 0;
  std::map<std::string, uint32_t> ids_;
  std::vector<bool> defined_;
};

}  // namespace

void compile_ebnf(Grammar* g, std::string_view text) { EbnfParser(g, text).parse(); }

}  // namespace gemmaserve::structured
