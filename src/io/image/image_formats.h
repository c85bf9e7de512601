// Per-format decoders behind decode_image (internal to src/io/image/).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "io/image/image_decode.h"

namespace gemmaserve::image::detail {

// A decoded picture as Pillow's convert("RGB") sees it: 3 channels (RGB, or already expanded from
// L / LA / P) or 4 for Pillow's mode "RGBA" (alpha still to be composited or dropped).
struct DecodedPixels {
  int width = 0;
  int height = 0;
  int channels = 3;
  std::vector<std::uint8_t> data;
  int exif_orientation = 1;  // TIFF tag 0x0112 from the file's EXIF, 1 when absent or invalid
};

DecodedPixels decode_png(std::span<const std::uint8_t> bytes, const DecodeOptions& options);
DecodedPixels decode_jpeg(std::span<const std::uint8_t> bytes, const DecodeOptions& options);
DecodedPixels decode_webp(std::span<const std::uint8_t> bytes, const DecodeOptions& options);
DecodedPixels decode_gif(std::span<const std::uint8_t> bytes, const DecodeOptions& options);

// Throws InputError("invalid FORMAT image: MESSAGE").
[[noreturn]] void throw_invalid(ImageFormat format, const std::string& message);

// Throws InputError when width x height is empty or over options.max_pixels.
void check_dimensions(ImageFormat format, std::uint64_t width, std::uint64_t height,
                      const DecodeOptions& options);

// The orientation tag of a TIFF-structured EXIF block ("Exif\0\0" prefix allowed), 1 if none.
int exif_orientation(std::span<const std::uint8_t> exif);

}  // namespace gemmaserve::image::detail
