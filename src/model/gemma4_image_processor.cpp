// See gemma4_image_processor.h; Hugging Face's image_processing_pil_gemma4.py is the reference.
#include "model/gemma4_image_processor.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <string>

#include "core/error.h"
#include "io/image/pillow_resize.h"

namespace gemmaserve {
namespace {

constexpr std::array<int, 5> kSupportedSoftTokens = {70, 140, 280, 560, 1120};

void check_options(const Gemma4ImageProcessorOptions& o) {
  if (o.patch_size <= 0 || o.pooling_kernel_size <= 0 || o.max_soft_tokens <= 0) {
    throw InputError(
        "image processor: patch_size, pooling_kernel_size and max_soft_tokens must "
        "be positive");
  }
  if (o.resample < 1 || o.resample > 5) {
    throw InputError("image processor: resample " + std::to_string(o.resample) +
                     " is not implemented (Pillow's filters 1 to 5: LANCZOS, BILINEAR, BICUBIC, "
                     "BOX, HAMMING)");
  }
}

// do_resize false: Hugging Face patchifies the image as it is; sizes its reshape and the
// vision pooler cannot take fail there, so they are refused here.
Gemma4ResizeTarget unresized_target(int height, int width, const Gemma4ImageProcessorOptions& o) {
  const std::int64_t side = std::int64_t{o.patch_size} * o.pooling_kernel_size;
  const std::int64_t max_patches =
      std::int64_t{o.max_soft_tokens} * o.pooling_kernel_size * o.pooling_kernel_size;
  const std::int64_t patches = (std::int64_t{height} / o.patch_size) * (width / o.patch_size);
  if (height % side != 0 || width % side != 0 || patches > max_patches) {
    throw InputError("the image processor's do_resize is false, so a " + std::to_string(width) +
                     "x" + std::to_string(height) +
                     " image is patchified as it is: its sides must be multiples of "
                     "patch_size x pooling_kernel_size = " +
                     std::to_string(side) + " and it must hold at most " +
                     std::to_string(max_patches) + " patches (max_soft_tokens " +
                     std::to_string(o.max_soft_tokens) + ")");
  }
  return {height, width};
}

// The patch value of 8-bit level v in channel c: rescale (float64 product, rounded to float32),
// then normalize in float32, as the PIL backend's rescale() and normalize() compute it.
std::array<std::array<float, 256>, 3> pixel_value_table(const Gemma4ImageProcessorOptions& o) {
  std::array<std::array<float, 256>, 3> table;
  for (int c = 0; c < 3; ++c) {
    const float mean = static_cast<float>(o.image_mean[c]);
    const float std_dev = static_cast<float>(o.image_std[c]);
    for (int v = 0; v < 256; ++v) {
      float x = static_cast<float>(v);
      if (o.do_rescale) {
        x = o.rescale_in_float32 ? x * static_cast<float>(o.rescale_factor)
                                 : static_cast<float>(static_cast<double>(v) * o.rescale_factor);
      }
      if (o.do_normalize) x = (x - mean) / std_dev;
      table[c][v] = x;
    }
  }
  return table;
}

}  // namespace

void validate_gemma4_max_soft_tokens(int value) {
  for (int v : kSupportedSoftTokens) {
    if (v == value) return;
  }
  throw InputError("`max_soft_tokens` must be one of (70, 140, 280, 560, 1120), got " +
                   std::to_string(value) + ".");
}

Gemma4ResizeTarget gemma4_resize_target(int height, int width,
                                        const Gemma4ImageProcessorOptions& options) {
  check_options(options);
  if (height <= 0 || width <= 0) {
    throw InputError("image processor: the image has no pixels (" + std::to_string(width) + "x" +
                     std::to_string(height) + ")");
  }
  if (!options.do_resize) return unresized_target(height, width, options);
  const std::int64_t max_patches = std::int64_t{options.max_soft_tokens} *
                                   options.pooling_kernel_size * options.pooling_kernel_size;
  const std::int64_t total_px = std::int64_t{height} * width;
  const std::int64_t target_px = max_patches * options.patch_size * options.patch_size;
  // Python's float arithmetic: int / int is the correctly rounded double quotient.
  const double factor = std::sqrt(static_cast<double>(target_px) / static_cast<double>(total_px));
  const double ideal_height = factor * height;
  const double ideal_width = factor * width;
  const std::int64_t side = std::int64_t{options.pooling_kernel_size} * options.patch_size;
  std::int64_t target_height = static_cast<std::int64_t>(std::floor(ideal_height / side)) * side;
  std::int64_t target_width = static_cast<std::int64_t>(std::floor(ideal_width / side)) * side;
  if (target_height == 0 && target_width == 0) {
    throw InputError(
        "Attempting to resize to a 0 x 0 image. Resized height should be divisible "
        "by `pooling_kernel_size * patch_size`=" +
        std::to_string(side) + ".");
  }
  const std::int64_t max_side =
      (max_patches / (std::int64_t{options.pooling_kernel_size} * options.pooling_kernel_size)) *
      side;
  if (target_height == 0) {
    target_height = side;
    target_width =
        std::min(static_cast<std::int64_t>(std::floor(static_cast<double>(width) / height)) * side,
                 max_side);
  } else if (target_width == 0) {
    target_width = side;
    target_height =
        std::min(static_cast<std::int64_t>(std::floor(static_cast<double>(height) / width)) * side,
                 max_side);
  }
  if (target_height * target_width > target_px) {
    throw InputError("Resizing [" + std::to_string(height) + "x" + std::to_string(width) +
                     "] to [" + std::to_string(target_height) + "x" + std::to_string(target_width) +
                     "] but this exceeds " + std::to_string(max_patches) +
                     " patches with patch_size " + std::to_string(options.patch_size));
  }
  return {static_cast<int>(target_height), static_cast<int>(target_width)};
}

Gemma4ImageProcessorOptions merged_patch_options(const Gemma4ImageProcessorOptions& options) {
  Gemma4ImageProcessorOptions merged = options;
  merged.patch_size = options.patch_size * options.pooling_kernel_size;
  merged.pooling_kernel_size = 1;
  return merged;
}

Gemma4ImagePatches gemma4_preprocess_image(std::span<const std::uint8_t> rgb, int width, int height,
                                           const Gemma4ImageProcessorOptions& options) {
  const Gemma4ResizeTarget target = gemma4_resize_target(height, width, options);
  const std::vector<std::uint8_t> resized =
      image::pillow_resize(rgb, width, height, target.width, target.height,
                           static_cast<image::PillowFilter>(options.resample));

  const int p = options.patch_size;
  Gemma4ImagePatches out;
  out.resized_height = target.height;
  out.resized_width = target.width;
  const int grid_h = target.height / p, grid_w = target.width / p;
  out.num_patches = grid_h * grid_w;
  out.max_patches =
      options.max_soft_tokens * options.pooling_kernel_size * options.pooling_kernel_size;
  out.num_soft_tokens =
      out.num_patches / (options.pooling_kernel_size * options.pooling_kernel_size);
  out.patch_dim = 3 * p * p;
  out.pixel_values.assign(std::size_t(out.max_patches) * out.patch_dim, 0.0f);
  out.position_ids.assign(std::size_t(out.max_patches) * 2, -1);

  const std::array<std::array<float, 256>, 3> value = pixel_value_table(options);

  for (int py = 0; py < grid_h; ++py) {
    for (int px = 0; px < grid_w; ++px) {
      const std::size_t patch = std::size_t(py) * grid_w + px;
      float* dst = &out.pixel_values[patch * out.patch_dim];
      for (int r = 0; r < p; ++r) {
        const std::uint8_t* row =
            &resized[(std::size_t(py) * p + r) * target.width * 3 + std::size_t(px) * p * 3];
        for (int i = 0; i < p * 3; ++i) *dst++ = value[i % 3][row[i]];
      }
      out.position_ids[patch * 2 + 0] = px;
      out.position_ids[patch * 2 + 1] = py;
    }
  }
  return out;
}

}  // namespace gemmaserve
