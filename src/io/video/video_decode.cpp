// The public entry points: byte limits, container sniffing, truncation seen in the container's
// own sizes, vLLM's frame sampling and the wording of every refusal.
#include "io/video/video_decode.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>

#include "core/error.h"
#include "io/video/video_formats.h"

namespace gemmaserve::video {

namespace detail {

namespace {

bool starts_with(std::span<const std::uint8_t> bytes, std::string_view magic,
                 std::size_t offset = 0) {
  if (bytes.size() < offset + magic.size()) return false;
  return std::equal(magic.begin(), magic.end(), bytes.begin() + offset,
                    [](char m, std::uint8_t b) { return static_cast<std::uint8_t>(m) == b; });
}

std::uint64_t read_be(std::span<const std::uint8_t> bytes, std::size_t offset, int count) {
  std::uint64_t value = 0;
  for (int i = 0; i < count; ++i) value = value << 8 | bytes[offset + i];
  return value;
}

std::uint32_t read_le32(std::span<const std::uint8_t> bytes, std::size_t offset) {
  return std::uint32_t{bytes[offset]} | std::uint32_t{bytes[offset + 1]} << 8 |
         std::uint32_t{bytes[offset + 2]} << 16 | std::uint32_t{bytes[offset + 3]} << 24;
}

// MP4 / QuickTime: a first box libavformat's mov demuxer starts from. HEIF and AVIF stills share
// the ftyp box and are told apart by their major brand.
bool looks_like_mp4(std::span<const std::uint8_t> bytes) {
  static constexpr std::array<std::string_view, 6> kFirstBoxes = {"ftyp", "moov", "mdat",
                                                                  "wide", "free", "skip"};
  static constexpr std::array<std::string_view, 8> kStillBrands = {"heic", "heix", "hevc", "hevx",
                                                                   "mif1", "msf1", "avif", "avis"};
  if (bytes.size() < 12) return false;
  const bool known_box =
      std::any_of(kFirstBoxes.begin(), kFirstBoxes.end(),
                  [&](std::string_view box) { return starts_with(bytes, box, 4); });
  if (!known_box) return false;
  if (!starts_with(bytes, "ftyp", 4)) return true;
  return std::none_of(kStillBrands.begin(), kStillBrands.end(),
                      [&](std::string_view brand) { return starts_with(bytes, brand, 8); });
}

// A WebP whose VP8X header sets the animation flag.
bool looks_like_animated_webp(std::span<const std::uint8_t> bytes) {
  return bytes.size() >= 21 && starts_with(bytes, "RIFF") && starts_with(bytes, "WEBP", 8) &&
         starts_with(bytes, "VP8X", 12) && (bytes[20] & 0x02) != 0;
}

[[noreturn]] void throw_truncated(const std::string& what, std::uint64_t end, std::size_t size) {
  throw InputError("The video is truncated or corrupt: its " + what + " ends at byte " +
                   std::to_string(end) + " but the file has " + std::to_string(size) + " bytes");
}

// The top-level MP4 boxes holding the media (the index, the samples, fragments) must fit the
// file: a cut-off download fails here with a clear message rather than as a missing moov box or
// frames that never arrive. Other boxes may be padding or junk libavformat skips.
void check_mp4_boxes(std::span<const std::uint8_t> bytes) {
  static constexpr std::array<std::string_view, 3> kMediaBoxes = {"moov", "mdat", "moof"};
  std::uint64_t offset = 0;
  while (offset + 8 <= bytes.size()) {
    std::uint64_t size = read_be(bytes, offset, 4);
    std::uint64_t header = 8;
    if (size == 1) {
      if (offset + 16 > bytes.size()) return;
      size = read_be(bytes, offset + 8, 8);
      header = 16;
    }
    if (size == 0) return;      // the box runs to the end of the file
    if (size < header) return;  // not a box structure: libavformat reports it
    if (size > bytes.size() - offset) {
      const std::string type(bytes.begin() + offset + 4, bytes.begin() + offset + 8);
      if (std::find(kMediaBoxes.begin(), kMediaBoxes.end(), type) == kMediaBoxes.end()) return;
      throw_truncated("'" + type + "' box", offset + size, bytes.size());
    }
    offset += size;
  }
}

// An EBML variable-length integer at `offset`: its value (marker bit removed when `strip`) and
// length; nullopt when malformed or cut off. An all-ones size (unknown) is reported as ~0.
struct Vint {
  std::uint64_t value;
  int length;
};
std::optional<Vint> read_vint(std::span<const std::uint8_t> bytes, std::size_t offset, bool strip) {
  if (offset >= bytes.size() || bytes[offset] == 0) return std::nullopt;
  const int length = std::countl_zero(bytes[offset]) + 1;
  if (offset + length > bytes.size()) return std::nullopt;
  std::uint64_t value = read_be(bytes, offset, length);
  if (!strip) return Vint{value, length};
  const std::uint64_t data_mask = (std::uint64_t{1} << (7 * length)) - 1;
  value &= data_mask;
  return Vint{value == data_mask ? ~std::uint64_t{0} : value, length};
}

// The Matroska Segment's declared size must fit the file (live recordings leave it unknown).
void check_matroska_segment(std::span<const std::uint8_t> bytes) {
  constexpr std::uint64_t kSegmentId = 0x18538067;
  std::uint64_t offset = 0;
  while (offset < bytes.size()) {
    const std::optional<Vint> id = read_vint(bytes, offset, false);
    if (!id) return;
    const std::optional<Vint> size = read_vint(bytes, offset + id->length, true);
    if (!size || size->value == ~std::uint64_t{0}) return;
    const std::uint64_t data = offset + id->length + size->length;
    if (size->value > bytes.size() || data + size->value > bytes.size()) {
      if (id->value == kSegmentId) {
        throw_truncated("Matroska segment", data + size->value, bytes.size());
      }
      return;
    }
    if (id->value == kSegmentId) return;
    offset = data + size->value;
  }
}

void check_container_complete(std::span<const std::uint8_t> bytes, VideoContainer container) {
  switch (container) {
    case VideoContainer::kMp4:
      check_mp4_boxes(bytes);
      break;
    case VideoContainer::kMatroska:
      check_matroska_segment(bytes);
      break;
    case VideoContainer::kAvi:
    case VideoContainer::kWebp:
      if (std::uint64_t{read_le32(bytes, 4)} + 8 > bytes.size()) {
        throw_truncated("RIFF chunk", std::uint64_t{read_le32(bytes, 4)} + 8, bytes.size());
      }
      break;
    case VideoContainer::kGif:
      break;  // no sizes ahead of the data: a cut frame shows as one the demuxer cannot read
  }
}

std::string format_number(const char* style, double value) {
  char text[64];
  std::snprintf(text, sizeof(text), style, value);
  return text;
}

// The container, after the byte limits and the truncation check.
VideoContainer checked_container(std::span<const std::uint8_t> bytes,
                                 const VideoDecodeLimits& limits) {
  if (bytes.empty()) throw InputError("The video is empty (0 bytes)");
  if (bytes.size() > limits.max_bytes) {
    throw InputError("The video is " + std::to_string(bytes.size()) + " bytes; the limit is " +
                     std::to_string(limits.max_bytes));
  }
  const std::optional<VideoContainer> container = detect_container(bytes);
  if (!container) {
    throw InputError(
        "The file is not a video this server can read (expected MP4, MOV, WebM, MKV, AVI, GIF "
        "or WebP)");
  }
  check_container_complete(bytes, *container);
  return *container;
}

}  // namespace

std::optional<VideoContainer> detect_container(std::span<const std::uint8_t> bytes) {
  if (starts_with(bytes, "\x1A\x45\xDF\xA3")) return VideoContainer::kMatroska;
  if (starts_with(bytes, "GIF87a") || starts_with(bytes, "GIF89a")) return VideoContainer::kGif;
  if (looks_like_animated_webp(bytes)) return VideoContainer::kWebp;
  if (looks_like_mp4(bytes)) return VideoContainer::kMp4;
  if (bytes.size() >= 12 && starts_with(bytes, "RIFF") && starts_with(bytes, "AVI ", 8)) {
    return VideoContainer::kAvi;
  }
  return std::nullopt;
}

void throw_unreadable(const std::string& what) {
  throw InputError("Could not read the video: " + what);
}

void throw_frame_failed(std::int64_t index, std::int64_t total_frames) {
  throw InputError("The video is truncated or corrupt: frame " + std::to_string(index) + " of " +
                   std::to_string(total_frames) + " could not be decoded");
}

void check_pixels(std::int64_t width, std::int64_t height, const VideoDecodeLimits& limits) {
  if (width <= 0 || height <= 0) {
    throw_unreadable("its frames have no pixels (" + std::to_string(width) + "x" +
                     std::to_string(height) + ")");
  }
  // Both sides come from 16- or 32-bit header fields, so the product cannot overflow.
  const auto pixels = static_cast<std::uint64_t>(width) * static_cast<std::uint64_t>(height);
  if (pixels > limits.max_pixels_per_frame) {
    throw InputError("The video's frames are " + std::to_string(width) + "x" +
                     std::to_string(height) + " = " + std::to_string(pixels) +
                     " pixels; the limit is " + std::to_string(limits.max_pixels_per_frame));
  }
}

void check_duration(double seconds, const VideoDecodeLimits& limits) {
  if (seconds > limits.max_duration_seconds) {
    throw InputError("The video is " + format_number("%.1f", seconds) + " s long; the limit is " +
                     format_number("%g", limits.max_duration_seconds) + " s");
  }
}

void check_total_frames(std::int64_t frames, const VideoDecodeLimits& limits, bool at_least) {
  if (frames > limits.max_total_frames) {
    throw InputError("The video has " + std::string(at_least ? "more than " : "") +
                     std::to_string(at_least ? limits.max_total_frames : frames) +
                     " frames; the limit is " + std::to_string(limits.max_total_frames));
  }
}

void check_decoded_bytes(std::size_t frames, int width, int height,
                         const VideoDecodeLimits& limits) {
  const std::uint64_t bytes = std::uint64_t{frames} * static_cast<std::uint64_t>(width) *
                              static_cast<std::uint64_t>(height) * 3;
  if (bytes > limits.max_decoded_bytes) {
    throw InputError("The " + std::to_string(frames) + " sampled frames of " +
                     std::to_string(width) + "x" + std::to_string(height) + " would take " +
                     std::to_string(bytes) + " bytes decoded; the limit is " +
                     std::to_string(limits.max_decoded_bytes));
  }
}

DecodedVideo decode_video_with(std::span<const std::uint8_t> bytes, const VideoSampling& sampling,
                               const VideoDecodeLimits& limits, FrameAccess access) {
  const VideoContainer container = checked_container(bytes, limits);
  if (container == VideoContainer::kWebp) return decode_webp(bytes, sampling, limits);
  return decode_ffmpeg(bytes, container, sampling, limits, access);
}

}  // namespace detail

std::vector<std::int64_t> sample_frame_indices(std::int64_t total_frames, double duration,
                                               const VideoSampling& sampling) {
  if (total_frames <= 0) return {};
  std::int64_t n = total_frames;
  if (sampling.num_frames > 0) n = std::min<std::int64_t>(sampling.num_frames, n);
  if (sampling.fps > 0) {
    const double by_rate = std::floor(duration * sampling.fps);
    if (by_rate < static_cast<double>(n)) n = static_cast<std::int64_t>(by_rate);
  }
  n = std::max<std::int64_t>(1, n);
  std::vector<std::int64_t> indices(static_cast<std::size_t>(n));
  if (n == total_frames || n == 1) {
    for (std::int64_t i = 0; i < n; ++i) indices[static_cast<std::size_t>(i)] = i;
    return indices;
  }
  // numpy.linspace(0, total - 1, n): i * step in float64, the last set to the stop, then
  // astype(int) truncates.
  const double step = static_cast<double>(total_frames - 1) / static_cast<double>(n - 1);
  for (std::int64_t i = 0; i + 1 < n; ++i) {
    indices[static_cast<std::size_t>(i)] = static_cast<std::int64_t>(static_cast<double>(i) * step);
  }
  indices.back() = total_frames - 1;
  return indices;
}

VideoInfo probe_video(std::span<const std::uint8_t> bytes, const VideoDecodeLimits& limits) {
  const detail::VideoContainer container = detail::checked_container(bytes, limits);
  if (container == detail::VideoContainer::kWebp) return detail::probe_webp(bytes, limits);
  return detail::probe_ffmpeg(bytes, container, limits);
}

DecodedVideo decode_video(std::span<const std::uint8_t> bytes, const VideoSampling& sampling,
                          const VideoDecodeLimits& limits) {
  return detail::decode_video_with(bytes, sampling, limits, detail::FrameAccess::kSeekToKeyframes);
}

bool looks_like_video(std::span<const std::uint8_t> bytes) {
  return detail::detect_container(bytes).has_value();
}

}  // namespace gemmaserve::video
