#include "core/python_text.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/utf8.h"

namespace gemmaserve {

std::string python_float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == 0) return std::signbit(v) ? "-0.0" : "0.0";
  // Shortest round-trip digits in scientific form: [-]d[.ddd]e(+|-)dd.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<size_t>(res.ptr - buf));
  std::string out;
  if (sci.front() == '-') {
    out += '-';
    sci.remove_prefix(1);
  }
  const size_t e_pos = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e_pos)) {
    if (c != '.') digits += c;
  }
  int exp = 0;
  std::string_view exp_text = sci.substr(e_pos + 1);
  if (exp_text.front() == '+') exp_text.remove_prefix(1);
  std::from_chars(exp_text.data(), exp_text.data() + exp_text.size(), exp);
  // Python switches to exponent notation below 1e-4 and from 1e16 on.
  if (exp >= -4 && exp < 16) {
    if (exp >= 0) {
      const size_t int_len = static_cast<size_t>(exp) + 1;
      if (digits.size() <= int_len) {
        out += digits + std::string(int_len - digits.size(), '0') + ".0";
      } else {
        out.append(digits, 0, int_len).append(".").append(digits, int_len);
      }
    } else {
      out.append("0.").append(static_cast<size_t>(-exp - 1), '0').append(digits);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out.append(".").append(digits, 1);
  char exp_buf[16];
  std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
  out += exp_buf;
  return out;
}

void append_python_json_escaped(std::string& out, std::string_view s, bool ensure_ascii) {
  char buf[16];
  for (size_t pos = 0; pos < s.size();) {
    const auto byte = static_cast<unsigned char>(s[pos]);
    if (byte < 0x80) {
      ++pos;
      switch (byte) {
        case '"':
          out += "\\\"";
          break;
        case '\\':
          out += "\\\\";
          break;
        case '\n':
          out += "\\n";
          break;
        case '\r':
          out += "\\r";
          break;
        case '\t':
          out += "\\t";
          break;
        case '\b':
          out += "\\b";
          break;
        case '\f':
          out += "\\f";
          break;
        default:
          if (byte < 0x20 || (ensure_ascii && byte == 0x7F)) {
            std::snprintf(buf, sizeof(buf), "\\u%04x", byte);
            out += buf;
          } else {
            out += static_cast<char>(byte);
          }
      }
      continue;
    }
    const size_t n = utf8::sequence_length(s, pos);
    if (!ensure_ascii) {
      if (n == 0) {
        out += utf8::kReplacementChar;
      } else {
        out.append(s, pos, n);
      }
    } else {
      const char32_t c = n ? utf8::decode_at(s, pos) : 0xFFFD;
      if (c >= 0x10000) {
        const char32_t v = c - 0x10000;
        std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 + (v >> 10)),
                      static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
      } else {
        std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
      }
      out += buf;
    }
    pos += n ? n : 1;
  }
}

std::string python_json_quote(std::string_view s, bool ensure_ascii) {
  std::string out = "\"";
  append_python_json_escaped(out, s, ensure_ascii);
  out += '"';
  return out;
}

}  // namespace gemmaserve
