#include "io/media/base64.h"

namespace gemmaserve::media {
namespace {

int sextet(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

}  // namespace

std::optional<std::vector<std::uint8_t>> decode_base64(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  size_t padding = 0;
  if (!text.empty() && text.back() == '=')
    padding = text.size() >= 2 && text[text.size() - 2] == '=' ? 2 : 1;
  std::vector<std::uint8_t> out;
  out.reserve(text.size() / 4 * 3);
  const size_t data_chars = text.size() - padding;
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < data_chars; ++i) {
    const int v = sextet(text[i]);
    if (v < 0) return std::nullopt;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<std::uint8_t>((acc >> bits) & 0xFF));
    }
  }
  // The bits padding leaves over must be zero in canonical base64; Python accepts them, so do we.
  return out;
}

}  // namespace gemmaserve::media
