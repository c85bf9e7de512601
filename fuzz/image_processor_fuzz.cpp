// Gemma 4's image preprocessing over arbitrary sizes, pixels and budgets: every size either
// gives patches within the budget or an InputError.
#include <fuzzer/FuzzedDataProvider.h>

#include <vector>

#include "fuzz_support.h"
#include "model/gemma4_image_processor.h"

using namespace gemmaserve;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  Gemma4ImageProcessorOptions options;
  // Small budgets: images are resized to fill the budget, so its size is the cost of a run; the
  // arithmetic's corner cases (rounding, aspect limits) show at any budget.
  options.patch_size = in.ConsumeIntegralInRange<int>(1, 16);
  options.pooling_kernel_size = in.ConsumeIntegralInRange<int>(1, 4);
  options.max_soft_tokens = in.ConsumeIntegralInRange<int>(0, 24);
  // Sizes up to 256: the resize is the cost, and its corner cases show at any size.
  const int width = in.ConsumeIntegralInRange<int>(0, 256);
  const int height = in.ConsumeIntegralInRange<int>(0, 256);
  // The pixels are the rest of the input, repeated to the size the image needs.
  std::vector<uint8_t> rgb(static_cast<size_t>(width) * height * 3);
  const std::vector<uint8_t> seed = in.ConsumeRemainingBytes<uint8_t>();
  for (size_t i = 0; i < rgb.size() && !seed.empty(); ++i) rgb[i] = seed[i % seed.size()];
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
