// Gemma 4's image preprocessing over arbitrary sizes, pixels and budgets: every size either
// gives patches within the budget or an InputError.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "fuzz_support.h"
#include "model/gemma4_image_processor.h"

using namespace gemmaserve;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  Gemma4ImageProcessorOptions options;
  // Small budgets: images are resized to fill the budget, so its pixel count is the cost of a run
  // (per-pixel compare tracing dominates); the arithmetic's corner cases (rounding, aspect
  // limits) show at any budget, so every patch and pooling size gets up to ~16k budget pixels.
  options.patch_size = in.ConsumeIntegralInRange<int>(1, 16);
  options.pooling_kernel_size = in.ConsumeIntegralInRange<int>(1, 4);
  const int px_per_token = options.patch_size * options.patch_size * options.pooling_kernel_size *
                           options.pooling_kernel_size;
  options.max_soft_tokens = in.ConsumeIntegralInRange<int>(0, std::max(2, 16384 / px_per_token));
  // Sides up to 256 (extreme aspects) but at most ~16k pixels: a downscale reads every input
  // pixel, and its corner cases show at any size.
  const int width = in.ConsumeIntegralInRange<int>(0, 256);
  const int height = in.ConsumeIntegralInRange<int>(0, std::min(256, 16384 / std::max(1, width)));
  // The pixels are the rest of the input, repeated to the size the image needs (block copies:
  // a per-byte loop here cost as much as the resize).
  std::vector<uint8_t> rgb(static_cast<size_t>(width) * height * 3);
  const std::vector<uint8_t> seed = in.ConsumeRemainingBytes<uint8_t>();
  if (!seed.empty()) {
    for (size_t at = 0; at < rgb.size(); at += seed.size()) {
      std::memcpy(rgb.data() + at, seed.data(), std::min(seed.size(), rgb.size() - at));
    }
  }
  fuzz::expect_input_errors_only([&] {
    const Gemma4ImagePatches p = gemma4_preprocess_image(rgb, width, height, options);
    fuzz::check(p.num_patches <= p.max_patches, "more patches than the budget");
    fuzz::check(p.pixel_values.size() == static_cast<size_t>(p.max_patches) * p.patch_dim,
                "pixel_values size");
    fuzz::check(p.position_ids.size() == static_cast<size_t>(p.max_patches) * 2,
                "position_ids size");
  });
  return 0;
}
