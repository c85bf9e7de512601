#include "tokenizer/chat_template/lexer.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>

#include "tokenizer/chat_template/py_string.h"
#include "tokenizer/chat_template/value.h"
#include "core/utf8.h"

namespace gemmaserve::jinja {
namespace {

bool is_ascii_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
         static_cast<unsigned char>(c) >= 0x80;
}
bool is_name_char(char c) { return is_name_start(c) || is_ascii_digit(c); }

// Python's \s at s[pos]: returns the byte length of the whitespace character there, else 0.
size_t space_at(std::string_view s, size_t pos) {
  if (pos >= s.size()) return 0;
  unsigned char c = static_cast<unsigned char>(s[pos]);
  if (c < 0x80) return is_py_space(c) ? 1 : 0;
  size_t n = utf8::sequence_length(s, pos);
  if (n == 0) return 0;
  return is_py_space(utf8::decode_at(s, pos)) ? n : 0;
}

// Jinja's message: the character as Python's repr() shows it, and its offset.
std::string unexpected_char(char c, size_t pos) {
  std::string shown = c == '\'' ? "\"'\"" : "'" + std::string(1, c) + "'";
  return "unexpected char " + shown + " at " + std::to_string(pos);
}

size_t skip_spaces(std::string_view s, size_t pos) {
  while (size_t n = space_at(s, pos)) pos += n;
  return pos;
}

int count_newlines(std::string_view s) {
  return static_cast<int>(std::count(s.begin(), s.end(), '\n'));
}

// Python str.rstrip() on UTF-8.
std::string_view rstrip_view(std::string_view s) {
  std::string stripped = py_strip(s, std::nullopt, false, true);
  return s.substr(0, stripped.size());
}

// True when s is non-empty and all Python whitespace (Jinja's `\s+` fullmatch).
bool all_space(std::string_view s) {
  if (s.empty()) return false;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t n = space_at(s, pos);
    if (n == 0) return false;
    pos += n;
  }
  return true;
}

// Decodes the escapes Python's "unicode-escape" codec knows; unknown ones stay as written.
std::string unescape(std::string_view body, int line) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    char c = body[i];
    if (c != '\\' || i + 1 >= body.size()) {
      out += c;
      continue;
    }
    char e = body[++i];
    auto hex = [&](size_t digits) {
      if (i + digits >= body.size()) {
        throw TemplateError("truncated \\" + std::string(1, e) + " escape", line);
      }
      uint32_t cp = 0;
      for (size_t k = 1; k <= digits; ++k) {
        char h = body[i + k];
        int v = (h >= '0' && h <= '9')   ? h - '0'
                : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                         : -1;
        if (v < 0) throw TemplateError("truncated \\" + std::string(1, e) + " escape", line);
        cp = cp * 16 + static_cast<uint32_t>(v);
      }
      i += digits;
      if (cp > 0x10FFFF) throw TemplateError("illegal Unicode character", line);
      utf8::append(out, cp);
    };
    switch (e) {
      case '\n':
        break;
      case '\\':
        out += '\\';
        break;
      case '\'':
        out += '\'';
        break;
      case '"':
        out += '"';
        break;
      case 'a':
        out += '\a';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'v':
        out += '\v';
        break;
      case 'x':
        hex(2);
        break;
      case 'u':
        hex(4);
        break;
      case 'U':
        hex(8);
        break;
      default:
        if (e >= '0' && e <= '7') {
          uint32_t cp = static_cast<uint32_t>(e - '0');
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7';
               ++k) {
            cp = cp * 8 + static_cast<uint32_t>(body[++i] - '0');
          }
          utf8::append(out, cp);
        } else {
          out += '\\';
          out += e;
        }
    }
  }
  return out;
}

class Lexer {
 public:
  Lexer(std::string source, const LexerOptions& options)
      : src_(std::move(source)), options_(options) {}

  std::vector<Token> run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < src_.size()) {
      size_t tag = find_tag(pos);
      if (tag == std::string_view::npos) {
        emit_data(std::string_view(src_).substr(pos));
        break;
      }
      char kind = src_[tag + 1];  // '{', '%' or '#'
      char sign = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      if (sign != '-' && sign != '+') sign = '\0';
      std::string_view text = std::string_view(src_).substr(pos, tag - pos);
      int stripped_newlines = 0;
      if (sign == '-') {
        std::string_view kept = rstrip_view(text);
        stripped_newlines = count_newlines(text.substr(kept.size()));
        text = kept;
      } else if (sign != '+' && options_.lstrip_blocks && kind != '{') {
        size_t l_pos = text.rfind('\n');
        l_pos = l_pos == std::string_view::npos ? 0 : l_pos + 1;
        if ((l_pos > 0 || line_starting) && all_space(text.substr(l_pos))) {
          text = text.substr(0, l_pos);
        }
      }
      emit_data(text);
      line_ += stripped_newlines;
      size_t after = tag + 2 + (sign ? 1 : 0);
      if (kind == '#') {
        pos = lex_comment(after, &line_starting);
      } else if (kind == '%' && is_raw(after)) {
        pos = lex_raw(after, &line_starting);
      } else {
        pos = lex_tag(after, kind == '%', &line_starting);
      }
    }
    tokens_.push_back(Token{TokenType::kEof, "", 0, 0, line_});
    return std::move(tokens_);
  }

 private:
  size_t find_tag(size_t pos) const {
    for (size_t i = src_.find('{', pos); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) {
        return i;
      }
    }
    return std::string::npos;
  }

  void emit_data(std::string_view text) {
    if (text.empty()) return;
    tokens_.push_back(Token{TokenType::kData, std::string(text), 0, 0, line_});
    line_ += count_newlines(text);
  }

  void push(TokenType type, std::string text) {
    tokens_.push_back(Token{type, std::move(text), 0, 0, line_});
  }

  // Matches "%}" after an optional '-'/'+' at pos; returns the end of the closing match or npos.
  size_t match_block_end(size_t pos, bool* line_starting) const {
    std::string_view s(src_);
    if (s.substr(pos, 3) == "+%}") {
      *line_starting = false;
      return pos + 3;
    }
    if (s.substr(pos, 3) == "-%}") {
      size_t end = skip_spaces(s, pos + 3);
      *line_starting = end > pos + 3 && s[end - 1] == '\n';
      return end;
    }
    if (s.substr(pos, 2) == "%}") {
      size_t end = pos + 2;
      if (options_.trim_blocks && end < s.size() && s[end] == '\n') ++end;
      *line_starting = s[end - 1] == '\n';
      return end;
    }
    return std::string::npos;
  }

  size_t lex_comment(size_t pos, bool* line_starting) {
    std::string_view s(src_);
    for (size_t i = pos; i < s.size(); ++i) {
      if (s[i] != '#' && s[i] != '-' && s[i] != '+') continue;
      size_t end = std::string::npos;
      if (s.substr(i, 3) == "+#}") {
        end = i + 3;
        *line_starting = false;
      } else if (s.substr(i, 3) == "-#}") {
        end = skip_spaces(s, i + 3);
        *line_starting = end > i + 3 && s[end - 1] == '\n';
      } else if (s.substr(i, 2) == "#}") {
        end = i + 2;
        if (options_.trim_blocks && end < s.size() && s[end] == '\n') ++end;
        *line_starting = s[end - 1] == '\n';
      }
      if (end != std::string::npos) {
        line_ += count_newlines(s.substr(pos, end - pos));
        return end;
      }
    }
    throw TemplateError("Missing end of comment tag", line_);
  }

  // "{%" already consumed; is this `raw` followed by the tag end?
  bool is_raw(size_t pos) const {
    std::string_view s(src_);
    size_t p = skip_spaces(s, pos);
    if (s.substr(p, 3) != "raw") return false;
    p = skip_spaces(s, p + 3);
    return s.substr(p, 3) == "-%}" || s.substr(p, 2) == "%}";
  }

  size_t lex_raw(size_t pos, bool* line_starting) {
    std::string_view s(src_);
    size_t p = skip_spaces(s, skip_spaces(s, pos) + 3);
    size_t body_start;
    if (s.substr(p, 1) == "-") {
      body_start = skip_spaces(s, p + 3);
    } else {
      body_start = p + 2;  // `{% raw %}` ignores trim_blocks
    }
    line_ += count_newlines(s.substr(pos, body_start - pos));
    bool starting = body_start > 0 && s[body_start - 1] == '\n';
    for (size_t i = s.find("{%", body_start); i != std::string::npos; i = s.find("{%", i + 1)) {
      size_t q = i + 2;
      char sign = q < s.size() && (s[q] == '-' || s[q] == '+') ? s[q] : '\0';
      if (sign) ++q;
      q = skip_spaces(s, q);
      if (s.substr(q, 6) != "endraw") continue;
      size_t end = match_block_end(skip_spaces(s, q + 6), line_starting);
      if (end == std::string::npos) continue;
      std::string_view text = s.substr(body_start, i - body_start);
      int stripped_newlines = 0;
      if (sign == '-') {
        std::string_view kept = rstrip_view(text);
        stripped_newlines = count_newlines(text.substr(kept.size()));
        text = kept;
      } else if (sign != '+' && options_.lstrip_blocks) {
        size_t l_pos = text.rfind('\n');
        l_pos = l_pos == std::string_view::npos ? 0 : l_pos + 1;
        if ((l_pos > 0 || starting) && all_space(text.substr(l_pos))) text = text.substr(0, l_pos);
      }
      emit_data(text);
      line_ += stripped_newlines + count_newlines(s.substr(i, end - i));
      return end;
    }
    throw TemplateError("Missing end of raw directive", line_);
  }

  size_t lex_tag(size_t pos, bool is_block, bool* line_starting) {
    std::string_view s(src_);
    push(is_block ? TokenType::kBlockBegin : TokenType::kVariableBegin, "");
    std::vector<char> balance;
    while (true) {
      if (pos >= s.size()) {
        throw TemplateError(is_block
                                ? "unexpected end of template, expected end of block"
                                : "unexpected end of template, expected end of print statement",
                            line_);
      }
      if (balance.empty()) {
        if (is_block) {
          size_t end = match_block_end(pos, line_starting);
          if (end != std::string::npos) {
            push(TokenType::kBlockEnd, "");
            line_ += count_newlines(s.substr(pos, end - pos));
            return end;
          }
        } else if (s.substr(pos, 3) == "-}}") {
          size_t end = skip_spaces(s, pos + 3);
          *line_starting = end > pos + 3 && s[end - 1] == '\n';
          push(TokenType::kVariableEnd, "");
          line_ += count_newlines(s.substr(pos, end - pos));
          return end;
        } else if (s.substr(pos, 2) == "}}") {
          *line_starting = false;
          push(TokenType::kVariableEnd, "");
          return pos + 2;
        }
      }
      if (size_t n = space_at(s, pos)) {
        size_t end = skip_spaces(s, pos + n);
        line_ += count_newlines(s.substr(pos, end - pos));
        pos = end;
        continue;
      }
      char c = s[pos];
      if (is_ascii_digit(c)) {
        pos = lex_number(pos);
        continue;
      }
      if (is_name_start(c)) {
        size_t end = pos;
        while (end < s.size() && is_name_char(s[end])) ++end;
        push(TokenType::kName, std::string(s.substr(pos, end - pos)));
        pos = end;
        continue;
      }
      if (c == '\'' || c == '"') {
        size_t end = pos + 1;
        while (end < s.size() && s[end] != c) end += s[end] == '\\' ? 2 : 1;
        if (end >= s.size()) throw TemplateError(unexpected_char(c, pos), line_);
        std::string body = std::string(s.substr(pos + 1, end - pos - 1));
        push(TokenType::kString, unescape(body, line_));
        line_ += count_newlines(body);
        pos = end + 1;
        continue;
      }
      static constexpr std::string_view kTwoChar[] = {"//", "**", "==", "!=", ">=", "<="};
      std::string op;
      for (std::string_view two : kTwoChar) {
        if (s.substr(pos, 2) == two) op = std::string(two);
      }
      if (op.empty() &&
          std::string_view("+-/*%~[](){}><=.:|,;").find(c) != std::string_view::npos) {
        op = std::string(1, c);
      }
      if (op.empty()) {
        throw TemplateError(unexpected_char(c, pos), line_);
      }
      if (op == "(" || op == "[" || op == "{") {
        balance.push_back(op == "(" ? ')' : op == "[" ? ']' : '}');
      } else if (op == ")" || op == "]" || op == "}") {
        if (balance.empty()) throw TemplateError("unexpected '" + op + "'", line_);
        if (balance.back() != op[0]) {
          throw TemplateError(
              "unexpected '" + op + "', expected '" + std::string(1, balance.back()) + "'", line_);
        }
        balance.pop_back();
      }
      push(TokenType::kOperator, op);
      pos += op.size();
    }
  }

  // Digits with '_' separators: an integer, or a float with a fraction and/or exponent.
  size_t lex_number(size_t pos) {
    std::string_view s(src_);
    auto digits = [&](size_t p) {
      size_t q = p;
      while (q < s.size() && (is_ascii_digit(s[q]) || (s[q] == '_' && q > p && q + 1 < s.size() &&
                                                       is_ascii_digit(s[q + 1]))))
        ++q;
      return q;
    };
    auto clean = [](std::string_view t) {
      std::string out;
      for (char c : t) {
        if (c != '_') out += c;
      }
      return out;
    };
    if (s[pos] == '0' && pos + 1 < s.size() &&
        std::string_view("bBoOxX").find(s[pos + 1]) != std::string_view::npos) {
      int base = (s[pos + 1] == 'b' || s[pos + 1] == 'B')   ? 2
                 : (s[pos + 1] == 'o' || s[pos + 1] == 'O') ? 8
                                                            : 16;
      size_t end = pos + 2;
      while (end < s.size() && (std::isxdigit(static_cast<unsigned char>(s[end])) || s[end] == '_'))
        ++end;
      Token t{TokenType::kInteger, std::string(s.substr(pos, end - pos)), 0, 0, line_};
      t.int_value = std::strtoll(clean(s.substr(pos + 2, end - pos - 2)).c_str(), nullptr, base);
      tokens_.push_back(t);
      return end;
    }
    size_t end = digits(pos);
    bool is_float = false;
    if (end + 1 < s.size() && s[end] == '.' && is_ascii_digit(s[end + 1])) {
      end = digits(end + 1);
      is_float = true;
    }
    if (end < s.size() && (s[end] == 'e' || s[end] == 'E')) {
      size_t q = end + 1;
      if (q < s.size() && (s[q] == '+' || s[q] == '-')) ++q;
      if (q < s.size() && is_ascii_digit(s[q])) {
        end = digits(q);
        is_float = true;
      }
    }
    std::string text = clean(s.substr(pos, end - pos));
    Token t{is_float ? TokenType::kFloat : TokenType::kInteger, text, 0, 0, line_};
    if (is_float) {
      t.float_value = std::strtod(text.c_str(), nullptr);
    } else {
      errno = 0;
      t.int_value = std::strtoll(text.c_str(), nullptr, 10);
      if (errno == ERANGE) throw TemplateError("integer literal too large: " + text, line_);
    }
    tokens_.push_back(t);
    return end;
  }

  std::string src_;
  LexerOptions options_;
  std::vector<Token> tokens_;
  int line_ = 1;
};

// Jinja turns \r\n and \r into \n and drops one trailing newline unless told to keep it.
std::string normalize_newlines(std::string_view source, bool keep_trailing_newline) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!keep_trailing_newline && !out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

}  // namespace

std::vector<Token> tokenize(std::string_view source, const LexerOptions& options) {
  return Lexer(normalize_newlines(source, options.keep_trailing_newline), options).run();
}

}  // namespace gemmaserve::jinja
