// A walk over the RIFF chunks up to "data", reading the block align of "fmt " on the way.
#include "io/audio/riff_wave.h"

#include <algorithm>
#include <string_view>

namespace gemmaserve::audio::detail {

namespace {

std::uint32_t read_u32le(const std::uint8_t* p) {
  return std::uint32_t{p[0]} | std::uint32_t{p[1]} << 8 | std::uint32_t{p[2]} << 16 |
         std::uint32_t{p[3]} << 24;
}

bool is_id(const std::uint8_t* p, std::string_view id) {
  return std::equal(id.begin(), id.end(), p,
                    [](char c, std::uint8_t b) { return static_cast<std::uint8_t>(c) == b; });
}

// Writers that cannot seek back leave 0 or a size near 2^31 or 2^32 in the data chunk.
bool is_placeholder(std::uint32_t size) { return size == 0 || size >= 0x7FFF'F000u; }

}  // namespace

std::optional<std::int64_t> riff_wave_promised_frames(std::span<const std::uint8_t> b) {
  if (b.size() < 12 || !is_id(b.data(), "RIFF") || !is_id(b.data() + 8, "WAVE")) {
    return std::nullopt;
  }
  std::uint32_t block_align = 0;
  std::uint64_t at = 12;
  while (at + 8 <= b.size()) {
    const std::uint8_t* chunk = b.data() + at;
    const std::uint32_t size = read_u32le(chunk + 4);
    if (is_id(chunk, "fmt ") && size >= 14 && at + 8 + 14 <= b.size()) {
      block_align = std::uint32_t{chunk[8 + 12]} | std::uint32_t{chunk[8 + 13]} << 8;
    }
    if (is_id(chunk, "data")) {
      if (block_align == 0 || is_placeholder(size)) return std::nullopt;
      return static_cast<std::int64_t>(size / block_align);
    }
    at += 8 + std::uint64_t{size} + (size & 1);  // chunks are padded to even sizes
  }
  return std::nullopt;
}

}  // namespace gemmaserve::audio::detail
