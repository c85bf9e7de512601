// Pillow's Image.resize(size, Image.BICUBIC) on 8-bit RGB, bit for bit (libImaging/Resample.c:
// separable, horizontal pass first, antialiased support scaled by the reduction factor,
// fixed-point coefficients, 8-bit clip between the passes). Hugging Face's PIL-backend image
// processors resize with it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace gemmaserve::image {

// `rgb` holds height rows of width interleaved RGB pixels; returns out_height rows of out_width.
std::vector<std::uint8_t> pillow_resize_bicubic(std::span<const std::uint8_t> rgb, int width,
                                                int height, int out_width, int out_height);

}  // namespace gemmaserve::image
