// Pillow's Image.resize(size, filter) on 8-bit RGB, bit for bit, for its convolution filters
// (libImaging/Resample.c: separable, horizontal pass first, antialiased support scaled by the
// reduction factor, fixed-point coefficients, 8-bit clip between the passes). Hugging Face's
// PIL-backend image processors resize with it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace gemmaserve::image {

// Pillow's resampling filter numbers (PIL.Image.Resampling); NEAREST (0) is not a convolution.
enum class PillowFilter { kLanczos = 1, kBilinear = 2, kBicubic = 3, kBox = 4, kHamming = 5 };

// `rgb` holds height rows of width interleaved RGB pixels; returns out_height rows of out_width.
std::vector<std::uint8_t> pillow_resize(std::span<const std::uint8_t> rgb, int width, int height,
                                        int out_width, int out_height, PillowFilter filter);

inline std::vector<std::uint8_t> pillow_resize_bicubic(std::span<const std::uint8_t> rgb, int width,
                                                       int height, int out_width, int out_height) {
  return pillow_resize(rgb, width, height, out_width, out_height, PillowFilter::kBicubic);
}

}  // namespace gemmaserve::image
