// Image decoding (PNG, JPEG, WebP, GIF first frame) to 8-bit interleaved RGB, with the pixels
// vLLM hands Hugging Face's processor: Pillow's Image.open + convert("RGB"), RGBA composited on
// white as vLLM's ImageMediaIO does. Every failure is an InputError (a 400 at the API).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace gemmaserve::image {

enum class ImageFormat { kPng, kJpeg, kWebp, kGif };

std::string_view format_name(ImageFormat format);

// The format named by the leading magic bytes, or nullopt.
std::optional<ImageFormat> detect_image_format(std::span<const std::uint8_t> bytes);

// What happens to the alpha of an RGBA image (Pillow mode "RGBA": PNG RGBA, WebP with alpha).
// Other modes with transparency (LA, palette + tRNS, GIF) always lose it, as in both pipelines.
enum class AlphaHandling {
  kCompositeOnWhite,  // vLLM's rgba_to_rgb: paste onto a white background with the alpha as mask
  kDrop,              // Pillow's convert("RGB") (Hugging Face's processor given an RGBA image)
};

struct DecodeOptions {
  std::size_t max_bytes = 20u << 20;
  // Pillow's MAX_IMAGE_PIXELS; checked from the header, before any pixel buffer is allocated.
  std::uint64_t max_pixels = 89'478'485;
  AlphaHandling alpha = AlphaHandling::kCompositeOnWhite;
  // PIL.ImageOps.exif_transpose. vLLM does not apply it (nor HF's processor given a PIL image),
  // so it is off by default to give vLLM's pixels.
  bool apply_exif_orientation = false;
};

// Row-major, interleaved R, G, B; pixels.size() == width * height * 3.
struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<std::uint8_t> pixels;
};

RgbImage decode_image(std::span<const std::uint8_t> bytes, const DecodeOptions& options = {});

}  // namespace gemmaserve::image
