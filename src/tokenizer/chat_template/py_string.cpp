#include "tokenizer/chat_template/py_string.h"

#include <algorithm>
#include <stdexcept>

#include "core/utf8.h"
#include "tokenizer/chat_template/value.h"

namespace gemmaserve::jinja {

std::u32string decode_utf8(std::string_view s) {
  charge_render_bytes(s.size());
  std::u32string out;
  out.reserve(s.size());
  for (size_t pos = 0; pos < s.size();) {
    size_t n = utf8::sequence_length(s, pos);
    if (n == 0) {
      // Stray bytes keep their value so that encode_utf8(decode_utf8(s)) round-trips ASCII.
      out.push_back(static_cast<unsigned char>(s[pos]) | 0xDC00u);
      ++pos;
      continue;
    }
    out.push_back(utf8::decode_at(s, pos));
    pos += n;
  }
  return out;
}

std::string encode_utf8(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) {
    if (c >= 0xDC80 && c <= 0xDCFF) {
      out.push_back(static_cast<char>(c & 0xFF));  // an undecodable byte kept as it was
    } else {
      utf8::append(out, c);
    }
  }
  return out;
}

size_t code_point_count(std::string_view s) {
  charge_render_bytes(s.size());
  size_t n = 0;
  for (size_t pos = 0; pos < s.size(); pos += utf8::char_length(s, pos)) ++n;
  return n;
}

bool is_py_space(char32_t c) { return (c >= 0x1C && c <= 0x1F) || utf8::is_whitespace(c); }

namespace {

// The parts of split/splitlines, each charged to the render's byte budget as the string value it
// becomes: splitting 60 MB on every byte would otherwise build 60 million strings unchecked.
struct PartsBuilder {
  std::vector<std::string> list;
  void charge(size_t bytes) {
    charge_render_bytes(bytes + sizeof(Value));
    check_list_size(list.size() + 1);
  }
  void emplace_back(std::string_view part) {
    charge(part.size());
    list.emplace_back(part);
  }
  void push_back(std::string part) {
    charge(part.size());
    list.push_back(std::move(part));
  }
};

// Simple one-to-one case pairs: ASCII, Latin-1, Latin Extended-A, Greek, Cyrillic.
char32_t upper_of(char32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c < 0x80) return c;
  if ((c >= 0xE0 && c <= 0xFE && c != 0xF7)) return c - 32;
  if (c == 0xFF) return 0x178;
  if (c == 0xB5) return 0x39C;
  if (c >= 0x100 && c <= 0x17F) {
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c % 2 == 0) ? c - 1 : c;
    if (c == 0x131) return 'I';
    if (c == 0x17F) return 'S';
    if (c == 0x138 || c == 0x149 || c == 0x130) return c;
    return (c % 2 == 1) ? c - 1 : c;
  }
  if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) return c - 32;
  if (c == 0x3C2) return 0x3A3;
  if (c >= 0x3AC && c <= 0x3AF) {
    static constexpr char32_t kMap[] = {0x386, 0x388, 0x389, 0x38A};
    return kMap[c - 0x3AC];
  }
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  return c;
}

char32_t lower_of(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c < 0x80) return c;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
  if (c == 0x178) return 0xFF;
  if (c >= 0x100 && c <= 0x17F) {
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c % 2 == 1) ? c + 1 : c;
    if (c == 0x130) return 'i';
    if (c == 0x131 || c == 0x138 || c == 0x149 || c == 0x17F) return c;
    return (c % 2 == 0) ? c + 1 : c;
  }
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
  if (c == 0x386) return 0x3AC;
  if (c >= 0x388 && c <= 0x38A) return c + 37;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  return c;
}

bool in_chars(char32_t c, const std::optional<std::u32string>& chars) {
  if (!chars) return is_py_space(c);
  return chars->find(c) != std::u32string::npos;
}

}  // namespace

char32_t to_upper(char32_t c) { return upper_of(c); }
char32_t to_lower(char32_t c) { return lower_of(c); }
bool is_cased_upper(char32_t c) { return lower_of(c) != c; }
bool is_cased_lower(char32_t c) { return upper_of(c) != c || c == 0xDF; }

std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                     bool right) {
  std::u32string text = decode_utf8(s);
  std::optional<std::u32string> set;
  if (chars) set = decode_utf8(*chars);
  size_t begin = 0;
  size_t end = text.size();
  if (left) {
    while (begin < end && in_chars(text[begin], set)) ++begin;
  }
  if (right) {
    while (end > begin && in_chars(text[end - 1], set)) --end;
  }
  return encode_utf8(std::u32string_view(text).substr(begin, end - begin));
}

std::string py_upper(std::string_view s) {
  std::u32string t;
  for (char32_t c : decode_utf8(s)) {
    if (c == 0xDF) {
      t += U"SS";  // the one common one-to-many mapping: ß
    } else {
      t.push_back(upper_of(c));
    }
  }
  return encode_utf8(t);
}

std::string py_lower(std::string_view s) {
  std::u32string t = decode_utf8(s);
  for (char32_t& c : t) c = lower_of(c);
  return encode_utf8(t);
}

std::string py_title(std::string_view s) {
  std::u32string t = decode_utf8(s);
  bool previous_cased = false;
  for (char32_t& c : t) {
    bool cased = is_cased_upper(c) || is_cased_lower(c);
    if (cased) {
      c = previous_cased ? lower_of(c) : upper_of(c);
    }
    previous_cased = cased;
  }
  return encode_utf8(t);
}

std::string py_capitalize(std::string_view s) {
  std::u32string t = decode_utf8(s);
  for (size_t i = 0; i < t.size(); ++i) t[i] = i == 0 ? upper_of(t[i]) : lower_of(t[i]);
  return encode_utf8(t);
}

std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep,
                                  int64_t maxsplit, bool from_right) {
  PartsBuilder parts;
  if (sep) {
    if (sep->empty()) throw std::invalid_argument("empty separator");
    if (!from_right) {
      size_t start = 0;
      while (maxsplit != 0) {
        size_t found = s.find(*sep, start);
        if (found == std::string_view::npos) break;
        parts.emplace_back(s.substr(start, found - start));
        start = found + sep->size();
        --maxsplit;
      }
      parts.emplace_back(s.substr(start));
    } else {
      size_t end = s.size();
      while (maxsplit != 0 && end >= sep->size()) {
        size_t found = s.rfind(*sep, end - sep->size());
        if (found == std::string_view::npos) break;
        parts.emplace_back(s.substr(found + sep->size(), end - found - sep->size()));
        end = found;
        --maxsplit;
      }
      parts.emplace_back(s.substr(0, end));
      std::reverse(parts.list.begin(), parts.list.end());
    }
    return std::move(parts.list);
  }
  std::u32string t = decode_utf8(s);
  if (!from_right) {
    size_t i = 0;
    while (true) {
      while (i < t.size() && is_py_space(t[i])) ++i;
      if (i >= t.size()) break;
      if (maxsplit == 0) {
        parts.push_back(encode_utf8(std::u32string_view(t).substr(i)));  // remainder kept as is
        break;
      }
      size_t j = i;
      while (j < t.size() && !is_py_space(t[j])) ++j;
      parts.push_back(encode_utf8(std::u32string_view(t).substr(i, j - i)));
      i = j;
      --maxsplit;
    }
  } else {
    size_t i = t.size();
    while (true) {
      while (i > 0 && is_py_space(t[i - 1])) --i;
      if (i == 0) break;
      if (maxsplit == 0) {
        parts.push_back(encode_utf8(std::u32string_view(t).substr(0, i)));  // remainder kept as is
        break;
      }
      size_t j = i;
      while (j > 0 && !is_py_space(t[j - 1])) --j;
      parts.push_back(encode_utf8(std::u32string_view(t).substr(j, i - j)));
      i = j;
      --maxsplit;
    }
    std::reverse(parts.list.begin(), parts.list.end());
  }
  return std::move(parts.list);
}

std::vector<std::string> py_splitlines(std::string_view s, bool keepends) {
  std::u32string t = decode_utf8(s);
  PartsBuilder lines;
  size_t start = 0;
  size_t i = 0;
  while (i < t.size()) {
    char32_t c = t[i];
    bool is_break = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D ||
                    c == 0x1E || c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!is_break) {
      ++i;
      continue;
    }
    size_t eol = i + 1;
    if (c == '\r' && eol < t.size() && t[eol] == '\n') ++eol;
    size_t end = keepends ? eol : i;
    lines.push_back(encode_utf8(std::u32string_view(t).substr(start, end - start)));
    start = i = eol;
  }
  if (start < t.size()) lines.push_back(encode_utf8(std::u32string_view(t).substr(start)));
  return std::move(lines.list);
}

std::string py_replace(std::string_view s, std::string_view old_text, std::string_view new_text,
                       int64_t count) {
  charge_render_bytes(s.size());
  std::string out;
  if (old_text.empty()) {
    // Python inserts `new` between every character (and at both ends).
    std::u32string t = decode_utf8(s);
    int64_t done = 0;
    for (size_t i = 0; i <= t.size(); ++i) {
      if (count < 0 || done < count) {
        out += new_text;
        ++done;
        check_text_size(out.size());
      }
      if (i < t.size()) out += encode_utf8(std::u32string_view(t).substr(i, 1));
    }
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t found = s.find(old_text, start);
    if (found == std::string_view::npos) break;
    out += s.substr(start, found - start);
    out += new_text;
    check_text_size(out.size());
    start = found + old_text.size();
    ++done;
  }
  out += s.substr(start);
  return out;
}

int64_t py_count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return static_cast<int64_t>(code_point_count(s)) + 1;
  charge_render_bytes(s.size());
  int64_t n = 0;
  for (size_t pos = s.find(sub); pos != std::string_view::npos; pos = s.find(sub, pos + sub.size()))
    ++n;
  return n;
}

}  // namespace gemmaserve::jinja
