#include "core/utf8.h"

#include <cstdint>

namespace gemmaserve::utf8 {

size_t sequence_length(std::string_view s, size_t pos) {
  const auto b0 = static_cast<uint8_t>(s[pos]);
  if (b0 < 0x80) return 1;
  size_t n = 0;
  uint8_t lo = 0x80;  // allowed range of the second byte (RFC 3629 table)
  uint8_t hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 == 0xE0) {
    n = 3;
    lo = 0xA0;
  } else if ((b0 >= 0xE1 && b0 <= 0xEC) || b0 == 0xEE || b0 == 0xEF) {
    n = 3;
  } else if (b0 == 0xED) {
    n = 3;
    hi = 0x9F;
  } else if (b0 == 0xF0) {
    n = 4;
    lo = 0x90;
  } else if (b0 >= 0xF1 && b0 <= 0xF3) {
    n = 4;
  } else if (b0 == 0xF4) {
    n = 4;
    hi = 0x8F;
  } else {
    return 0;
  }
  if (pos + n > s.size()) return 0;
  const auto b1 = static_cast<uint8_t>(s[pos + 1]);
  if (b1 < lo || b1 > hi) return 0;
  for (size_t i = 2; i < n; ++i) {
    const auto b = static_cast<uint8_t>(s[pos + i]);
    if (b < 0x80 || b > 0xBF) return 0;
  }
  return n;
}

bool is_valid(std::string_view s) {
  for (size_t pos = 0; pos < s.size();) {
    size_t n = sequence_length(s, pos);
    if (n == 0) return false;
    pos += n;
  }
  return true;
}

char32_t decode_at(std::string_view s, size_t pos) {
  const auto b0 = static_cast<uint8_t>(s[pos]);
  if (b0 < 0x80) return b0;
  auto cont = [&](size_t i) {
    return static_cast<char32_t>(static_cast<uint8_t>(s[pos + i]) & 0x3F);
  };
  if (b0 < 0xE0) return (static_cast<char32_t>(b0 & 0x1F) << 6) | cont(1);
  if (b0 < 0xF0) return (static_cast<char32_t>(b0 & 0x0F) << 12) | (cont(1) << 6) | cont(2);
  return (static_cast<char32_t>(b0 & 0x07) << 18) | (cont(1) << 12) | (cont(2) << 6) | cont(3);
}

void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool is_whitespace(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

}  // namespace gemmaserve::utf8
