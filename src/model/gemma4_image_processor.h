// Gemma 4's image preprocessing, exactly as Hugging Face's Gemma4ImageProcessorPil: an aspect-
// preserving resize to multiples of patch x pooling within the soft-token budget (Pillow's
// resize on 8-bit RGB, bicubic by default), rescale (1/255 by default), normalize (off by default),
// patchify, (x, y) patch positions and padding patches at (-1, -1). Pure functions over pixels: no
// model, no request. The options are the image processor's fields (model/
// gemma4_processor_config.h reads them from the checkpoint), with Hugging Face's defaults.
#pragma once

#include <array>
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
  // false: no resize; the image is patchified at its own size, which must then be a multiple
  // of patch x pooling per side and within the budget (HF fails otherwise).
  bool do_resize = true;
  // Pillow's resampling filter number: 1 LANCZOS, 2 BILINEAR, 3 BICUBIC, 4 BOX, 5 HAMMING
  // (0, NEAREST, is not implemented).
  int resample = 3;
  bool do_rescale = true;
  double rescale_factor = 1.0 / 255;  // float32(float64(v) * rescale_factor), numpy's order
  // The torchvision backend (the unified Gemma 4's processor) rescales in float32:
  // float32(v) * float32(rescale_factor), which differs from the above by an ulp at times.
  bool rescale_in_float32 = false;
  bool do_normalize = false;
  // (x - mean) / std per channel in float32, after the rescale (the PIL backend's order).
  std::array<double, 3> image_mean = {0.0, 0.0, 0.0};
  std::array<double, 3> image_std = {1.0, 1.0, 1.0};
  // Pillow's convert("RGB") of a decoded picture that is not RGB (the offline API's PIL images;
  // the server's decoder already gives RGB, as vLLM's media loader does). false: such a picture
  // is refused, since Gemma 4 takes 3 channels.
  bool do_convert_rgb = true;
};

// Throws InputError unless `value` is one of Hugging Face's {70, 140, 280, 560, 1120}.
void validate_gemma4_max_soft_tokens(int value);

struct Gemma4ResizeTarget {
  int height = 0;
  int width = 0;
};

// get_aspect_ratio_preserving_size: the largest multiples of patch*pooling within the budget
// (small images are scaled up); throws InputError where Hugging Face raises. With do_resize
// false, the image's own size (InputError, naming do_resize, unless its sides are multiples of
// patch*pooling and its patches fit the budget).
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

// The unified Gemma 4 (12B) merges k x k patches into one soft token (HF's patches_merge); its
// merged patches are exactly the patches of patch x pooling pixels in (row, column, channel)
// order, row-major over the merged grid, at the merged (x, y): the same processor with patch_size
// patch x pooling and pooling 1, whose resize target is unchanged.
Gemma4ImageProcessorOptions merged_patch_options(const Gemma4ImageProcessorOptions& options);

// `rgb`: height rows of width interleaved 8-bit RGB pixels (image::RgbImage's layout).
Gemma4ImagePatches gemma4_preprocess_image(std::span<const std::uint8_t> rgb, int width, int height,
                                           const Gemma4ImageProcessorOptions& options = {});

}  // namespace gemmaserve
