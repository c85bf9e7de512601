// Image bytes (PNG, JPEG, WebP, GIF) decoded as an image URL's are: failures are InputErrors,
// and no decode may exceed the pixel cap (checked from the header, before allocating).
#include <span>

#include "fuzz_support.h"
#include "io/image/image_decode.h"

using namespace gemmaserve;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  image::DecodeOptions options;
  options.max_pixels = 1u << 20;  // keeps the fuzzer's memory small; the rule is the same
  options.alpha =
      data[0] & 1 ? image::AlphaHandling::kDrop : image::AlphaHandling::kCompositeOnWhite;
  options.apply_exif_orientation = data[0] & 2;
  fuzz::expect_input_errors_only([&] {
    const image::RgbImage img =
        image::decode_image(std::span<const uint8_t>(data + 1, size - 1), options);
    fuzz::check(img.width > 0 && img.height > 0, "empty image decoded");
    fuzz::check(
        static_cast<uint64_t>(img.width) * static_cast<uint64_t>(img.height) <= options.max_pixels,
        "decoded past the pixel cap");
    fuzz::check(img.pixels.size() == static_cast<size_t>(img.width) * img.height * 3,
                "pixel buffer size");
  });
  return 0;
}
