// Gemma 4's image preprocessing, exactly as Hugging Face's Gemma4ImageProcessorPil: an aspect-
// preserving resize to multiples of patch x pooling within the soft-token budget (Pillow
// bicubic on 8-bit RGB), rescale by 1/255 (no mean/std), patchify, (x, y) patch positions and
// padding patches at (-1, -1). Pure functions over pixels: no model, no request.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace gemmaserve {

struct Gemma4ImageProcessorOptions {
  int patch_size = 16;
  int pooling_kernel_size = 3;
  // Budget in soft tokens; max_patches = max_soft_tokens * pooling^2. Requests may only ask for
  // the values validate_gemma4_max_soft_tokens accepts; checkpoints may set others (tiny tests).
  int max_soft_tokens = 280;
};

// Throws InputError unless `value` is one of Hugging Face's {70, 140, 280, 560, 1120}.
void validate_gemma4_max_soft_tokens(int value);

struct Gemma4ResizeTarget {
  int height = 0;
  int width = 0;
};

// get_aspect_ratio_preserving_size: the largest multiples of patch*pooling within the budget
// (small images are scaled up); throws InputError where Hugging Face raises.
Gemma4ResizeTarget gemma4_resize_target(int height, int width,
                                        const Gemma4ImageProcessorOptions& options);

struct Gemma4ImagePatches {
  int resized_height = 0;
  int resized_width = 0;
  int num_patches = 0;  // real patches, row-major over the (H/patch) x (W/patch) grid
  int max_patches = 0;
  int num_soft_tokens = 0;  // num_patches / pooling^2: the image's <|image|> tokens
  int patch_dim = 0;        // 3 * patch * patch
  // max_patches x patch_dim, each patch ordered (row in patch, column in patch, channel).
  std::vector<float> pixel_values;
  // max_patches x 2: (x, y) = (patch column, patch row); (-1, -1) for padding patches.
  std::vector<std::int32_t> position_ids;
};

// `rgb`: height rows of width interleaved 8-bit RGB pixels (image::RgbImage's layout).
Gemma4ImagePatches gemma4_preprocess_image(std::span<const std::uint8_t> rgb, int width, int height,
                                           const Gemma4ImageProcessorOptions& options = {});

}  // namespace gemmaserve
