// Format detection, limits, alpha handling and EXIF orientation around the per-format decoders.
#include "io/image/image_decode.h"

#include <string>

#include "core/error.h"
#include "io/image/image_formats.h"

namespace gemmaserve::image {

namespace detail {

void throw_invalid(ImageFormat format, const std::string& message) {
  throw InputError("invalid " + std::string(format_name(format)) + " image: " + message);
}

void check_dimensions(ImageFormat format, std::uint64_t width, std::uint64_t height,
                      const DecodeOptions& options) {
  if (width == 0 || height == 0) {
    throw_invalid(
        format, "it has no pixels (" + std::to_string(width) + "x" + std::to_string(height) + ")");
  }
  // Both sides come from 16- or 32-bit header fields, so the product cannot overflow.
  const std::uint64_t pixels = width * height;
  if (pixels > options.max_pixels) {
    throw InputError(std::string(format_name(format)) + " image is " + std::to_string(width) + "x" +
                     std::to_string(height) + " (" + std::to_string(pixels) +
                     " pixels), over the limit of " + std::to_string(options.max_pixels) +
                     " pixels");
  }
}

namespace {

std::uint32_t read_u16(const std::uint8_t* p, bool big_endian) {
  return big_endian ? (std::uint32_t{p[0]} << 8) | p[1] : (std::uint32_t{p[1]} << 8) | p[0];
}

std::uint32_t read_u32(const std::uint8_t* p, bool big_endian) {
  return big_endian ? (read_u16(p, true) << 16) | read_u16(p + 2, true)
                    : (read_u16(p + 2, false) << 16) | read_u16(p, false);
}

}  // namespace

int exif_orientation(std::span<const std::uint8_t> exif) {
  static constexpr std::uint8_t kExifPrefix[6] = {'E', 'x', 'i', 'f', 0, 0};
  if (exif.size() >= 6 && std::equal(kExifPrefix, kExifPrefix + 6, exif.begin())) {
    exif = exif.subspan(6);
  }
  if (exif.size() < 8) return 1;
  bool big_endian;
  if (exif[0] == 'I' && exif[1] == 'I') {
    big_endian = false;
  } else if (exif[0] == 'M' && exif[1] == 'M') {
    big_endian = true;
  } else {
    return 1;
  }
  if (read_u16(exif.data() + 2, big_endian) != 42) return 1;
  const std::uint64_t ifd = read_u32(exif.data() + 4, big_endian);
  if (ifd + 2 > exif.size()) return 1;
  const std::uint32_t entries = read_u16(exif.data() + ifd, big_endian);
  for (std::uint32_t i = 0; i < entries; ++i) {
    const std::uint64_t at = ifd + 2 + std::uint64_t{i} * 12;
    if (at + 12 > exif.size()) return 1;
    const std::uint8_t* entry = exif.data() + at;
    if (read_u16(entry, big_endian) != 0x0112) continue;
    const std::uint32_t type = read_u16(entry + 2, big_endian);
    std::uint32_t value;
    if (type == 3) {
      value = read_u16(entry + 8, big_endian);  // SHORT, stored in the first half of the field
    } else if (type == 4) {
      value = read_u32(entry + 8, big_endian);
    } else {
      return 1;
    }
    return value >= 1 && value <= 8 ? static_cast<int>(value) : 1;
  }
  return 1;
}

}  // namespace detail

std::string_view format_name(ImageFormat format) {
  switch (format) {
    case ImageFormat::kPng:
      return "PNG";
    case ImageFormat::kJpeg:
      return "JPEG";
    case ImageFormat::kWebp:
      return "WebP";
    case ImageFormat::kGif:
      return "GIF";
  }
  return "image";
}

std::optional<ImageFormat> detect_image_format(std::span<const std::uint8_t> b) {
  auto starts_with = [&](std::string_view magic, std::size_t offset = 0) {
    if (b.size() < offset + magic.size()) return false;
    for (std::size_t i = 0; i < magic.size(); ++i) {
      if (b[offset + i] != static_cast<std::uint8_t>(magic[i])) return false;
    }
    return true;
  };
  if (starts_with("\x89PNG\r\n\x1a\n")) return ImageFormat::kPng;
  if (starts_with("\xff\xd8\xff")) return ImageFormat::kJpeg;
  if (starts_with("RIFF") && starts_with("WEBP", 8)) return ImageFormat::kWebp;
  if (starts_with("GIF87a") || starts_with("GIF89a")) return ImageFormat::kGif;
  return std::nullopt;
}

namespace {

// Pillow's paste(image, mask=alpha) onto a white RGB canvas: (bg*(255-a) + c*a) / 255, rounded
// with Pillow's DIV255.
std::uint8_t blend_on_white(std::uint32_t c, std::uint32_t a) {
  const std::uint32_t t = 255 * (255 - a) + c * a + 128;
  return static_cast<std::uint8_t>(((t >> 8) + t) >> 8);
}

std::vector<std::uint8_t> to_rgb(const detail::DecodedPixels& d, AlphaHandling alpha) {
  if (d.channels == 3) return d.data;
  const std::size_t pixels = std::size_t(d.width) * std::size_t(d.height);
  std::vector<std::uint8_t> rgb(pixels * 3);
  for (std::size_t i = 0; i < pixels; ++i) {
    const std::uint8_t* in = &d.data[i * 4];
    for (int c = 0; c < 3; ++c) {
      rgb[i * 3 + c] = alpha == AlphaHandling::kDrop ? in[c] : blend_on_white(in[c], in[3]);
    }
  }
  return rgb;
}

// PIL.ImageOps.exif_transpose for orientations 2..8, as "read the source at (x, y) swapped if
// transposed, then mirrored": FLIP_LEFT_RIGHT, ROTATE_180, FLIP_TOP_BOTTOM, TRANSPOSE,
// ROTATE_270 (clockwise), TRANSVERSE, ROTATE_90 (counter-clockwise).
RgbImage orient(RgbImage in, int orientation) {
  struct Mapping {
    bool transpose, flip_x, flip_y;
  };
  static constexpr Mapping kMappings[9] = {
      {false, false, false}, {false, false, false}, {false, true, false},
      {false, true, true},   {false, false, true},  {true, false, false},
      {true, false, true},   {true, true, true},    {true, true, false}};
  if (orientation < 2 || orientation > 8) return in;
  const Mapping m = kMappings[orientation];
  const int w = in.width, h = in.height;
  RgbImage out;
  out.width = m.transpose ? h : w;
  out.height = m.transpose ? w : h;
  out.pixels.resize(in.pixels.size());
  for (int y = 0; y < out.height; ++y) {
    for (int x = 0; x < out.width; ++x) {
      const int u = m.transpose ? y : x, v = m.transpose ? x : y;
      const int sx = m.flip_x ? w - 1 - u : u, sy = m.flip_y ? h - 1 - v : v;
      const std::size_t from = (std::size_t(sy) * w + sx) * 3;
      const std::size_t to = (std::size_t(y) * out.width + x) * 3;
      for (int c = 0; c < 3; ++c) out.pixels[to + c] = in.pixels[from + c];
    }
  }
  return out;
}

}  // namespace

RgbImage decode_image(std::span<const std::uint8_t> bytes, const DecodeOptions& options) {
  if (bytes.empty()) throw InputError("image data is empty");
  if (bytes.size() > options.max_bytes) {
    throw InputError("image is " + std::to_string(bytes.size()) + " bytes, over the limit of " +
                     std::to_string(options.max_bytes) + " bytes");
  }
  const std::optional<ImageFormat> format = detect_image_format(bytes);
  if (!format) {
    throw InputError("unsupported image format: expected PNG, JPEG, WebP or GIF data");
  }
  detail::DecodedPixels decoded;
  switch (*format) {
    case ImageFormat::kPng:
      decoded = detail::decode_png(bytes, options);
      break;
    case ImageFormat::kJpeg:
      decoded = detail::decode_jpeg(bytes, options);
      break;
    case ImageFormat::kWebp:
      decoded = detail::decode_webp(bytes, options);
      break;
    case ImageFormat::kGif:
      decoded = detail::decode_gif(bytes, options);
      break;
  }
  RgbImage image;
  image.width = decoded.width;
  image.height = decoded.height;
  image.pixels = to_rgb(decoded, options.alpha);
  if (options.apply_exif_orientation) image = orient(std::move(image), decoded.exif_orientation);
  return image;
}

}  // namespace gemmaserve::image
