// Gemma 4 image preprocessing: Pillow's bicubic resize reproduced bit for bit (Debian's
// python3-pil run live on 40+ size pairs), the whole pixel tensor equal to Hugging Face's
// Gemma4ImageProcessorPil rules (re-implemented on numpy + PIL in
// tests/python/pil_image_reference.py), the spec's soft-token counts, and the patch layout of
// the `vision` fixture's image cases.
#include "model/gemma4_image_processor.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/image/pillow_resize.h"
#include "test_support.h"

namespace gemmaserve {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<std::uint8_t>;

constexpr const char* kPython = "/usr/bin/python3";

template <typename T>
std::vector<T> read_raw(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  const Bytes bytes(std::istreambuf_iterator<char>(in), {});
  std::vector<T> out(bytes.size() / sizeof(T));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
  return out;
}

// Runs the reference script's `command` into a fresh folder; null manifest when PIL is missing.
struct Reference {
  std::unique_ptr<testing::TempDir> dir;
  nlohmann::json manifest;

  explicit Reference(const std::string& command) {
    if (testing::run_command(std::string(kPython) + " -c 'import PIL, numpy' 2>/dev/null")
            .exit_code != 0) {
      return;
    }
    dir = std::make_unique<testing::TempDir>();
    const testing::CommandResult result = testing::run_command(
        std::string(kPython) + " '" +
        (testing::source_dir() / "tests/python/pil_image_reference.py").string() + "' " + command +
        " '" + dir->path().string() + "'");
    if (result.exit_code != 0) return;
    std::ifstream in(dir->path() / "manifest.json");
    manifest = nlohmann::json::parse(in);
  }
  fs::path path(const nlohmann::json& name) const { return dir->path() / name.get<std::string>(); }
};

#define REQUIRE_REFERENCE(ref)                                                             \
  if (ref.manifest.is_null()) {                                                            \
    if (testing::running_in_ci()) FAIL() << "python3-pil / python3-numpy missing (setup)"; \
    GTEST_SKIP() << "python3-pil / python3-numpy missing (run scripts/setup)";             \
  }

TEST(PillowResize, BicubicMatchesPillowBitForBitUpAndDown) {
  const Reference ref("resize");
  REQUIRE_REFERENCE(ref);
  int worst = 0, pairs = 0;
  for (const auto& c : ref.manifest["cases"]) {
    const int sw = c["src_width"], sh = c["src_height"], dw = c["dst_width"], dh = c["dst_height"];
    SCOPED_TRACE(std::to_string(sw) + "x" + std::to_string(sh) + " -> " + std::to_string(dw) + "x" +
                 std::to_string(dh));
    const Bytes src = read_raw<std::uint8_t>(ref.path(c["src"]));
    const Bytes want = read_raw<std::uint8_t>(ref.path(c["dst"]));
    const Bytes got = image::pillow_resize_bicubic(src, sw, sh, dw, dh);
    ASSERT_EQ(got.size(), want.size());
    int diff = 0;
    for (std::size_t i = 0; i < got.size(); ++i) diff = std::max(diff, std::abs(got[i] - want[i]));
    EXPECT_EQ(diff, 0);
    worst = std::max(worst, diff);
    ++pairs;
  }
  EXPECT_GE(pairs, 40);
  std::cout << "[ resize ] max abs pixel difference vs Pillow 9.4 BICUBIC: " << worst << " over "
            << pairs << " (source, target) size pairs\n";
}

// The case's options: its sizes and budget, then its checkpoint config (HF's field names).
Gemma4ImageProcessorOptions case_options(const nlohmann::json& c) {
  Gemma4ImageProcessorOptions o;
  o.max_soft_tokens = c["max_soft_tokens"];
  o.patch_size = c["patch_size"];
  o.pooling_kernel_size = c["pooling_kernel_size"];
  const nlohmann::json& config = c["config"];
  o.do_resize = config.value("do_resize", o.do_resize);
  o.resample = config.value("resample", o.resample);
  o.do_rescale = config.value("do_rescale", o.do_rescale);
  o.rescale_factor = config.value("rescale_factor", o.rescale_factor);
  o.do_normalize = config.value("do_normalize", o.do_normalize);
  o.image_mean = config.value("image_mean", o.image_mean);
  o.image_std = config.value("image_std", o.image_std);
  return o;
}

// Runs the reference's cases with (with_config) or without a checkpoint config; their count.
int expect_reference_pixels(const Reference& ref, bool with_config) {
  int cases = 0;
  for (const auto& c : ref.manifest["cases"]) {
    if (c["config"].empty() == with_config) continue;
    const int w = c["width"], h = c["height"];
    SCOPED_TRACE(std::to_string(w) + "x" + std::to_string(h) + " budget " +
                 std::to_string(c["max_soft_tokens"].get<int>()) + " " + c["config"].dump());
    const Bytes src = read_raw<std::uint8_t>(ref.path(c["src"]));
    const Gemma4ImagePatches got = gemma4_preprocess_image(src, w, h, case_options(c));
    EXPECT_EQ(got.resized_width, c["resized_width"].get<int>());
    EXPECT_EQ(got.resized_height, c["resized_height"].get<int>());
    EXPECT_EQ(got.num_soft_tokens, c["num_soft_tokens"].get<int>());
    EXPECT_EQ(got.max_patches, c["max_patches"].get<int>());
    EXPECT_EQ(got.patch_dim, c["patch_dim"].get<int>());
    const std::vector<float> values = read_raw<float>(ref.path(c["pixel_values"]));
    const std::vector<std::int32_t> positions = read_raw<std::int32_t>(ref.path(c["position_ids"]));
    EXPECT_EQ(got.pixel_values.size(), values.size());
    if (got.pixel_values.size() == values.size()) {
      EXPECT_EQ(std::memcmp(got.pixel_values.data(), values.data(), values.size() * sizeof(float)),
                0)
          << "pixel_values differ";
    }
    EXPECT_TRUE(got.position_ids == positions) << "image_position_ids differ";
    ++cases;
  }
  return cases;
}

TEST(Gemma4ImageProcessor, PixelTensorEqualsHuggingFacesRules) {
  const Reference ref("preprocess");
  REQUIRE_REFERENCE(ref);
  EXPECT_GE(expect_reference_pixels(ref, /*with_config=*/false), 10);
}

// resample, rescale_factor, do_rescale, do_normalize + image_mean / image_std and do_resize as
// a checkpoint's processor config sets them: the soft tokens and every patch value as HF's.
TEST(Gemma4ImageProcessor, CheckpointConfigChangesThePatchesAsHuggingFace) {
  const Reference ref("preprocess");
  REQUIRE_REFERENCE(ref);
  EXPECT_GE(expect_reference_pixels(ref, /*with_config=*/true), 13);
}

TEST(Gemma4ImageProcessor, UnresizedImageMustFitPatchesAndBudget) {
  Gemma4ImageProcessorOptions o;
  o.patch_size = 4;
  o.pooling_kernel_size = 2;
  o.max_soft_tokens = 70;
  o.do_resize = false;
  EXPECT_EQ(gemma4_resize_target(32, 48, o).width, 48);
  EXPECT_EQ(gemma4_resize_target(32, 48, o).height, 32);
  const std::string want_tail =
      " image is patchified as it is: its sides must be multiples of patch_size x "
      "pooling_kernel_size = 8 and it must hold at most 280 patches (max_soft_tokens 70)";
  EXPECT_EQ(testing::input_error_of([&] { gemma4_resize_target(32, 44, o); }),
            "the image processor's do_resize is false, so a 44x32" + want_tail);
  EXPECT_EQ(testing::input_error_of([&] { gemma4_resize_target(80, 64, o); }),
            "the image processor's do_resize is false, so a 64x80" + want_tail);
}

struct TokenCase {
  int width, height, budget, resized_width, resized_height, tokens;
};

TEST(Gemma4ImageProcessor, SoftTokenCountsForTheSpecsSizes) {
  // Values from Hugging Face's get_aspect_ratio_preserving_size (patch 16, pooling 3).
  const TokenCase cases[] = {
      {896, 896, 280, 768, 768, 256},   {4000, 50, 280, 7152, 48, 149},
      {50, 4000, 280, 48, 7152, 149},   {1, 1, 280, 768, 768, 256},
      {3, 5, 280, 576, 1008, 252},      {1, 1, 70, 384, 384, 64},
      {640, 480, 70, 432, 336, 63},     {640, 480, 140, 624, 480, 130},
      {640, 480, 560, 1296, 960, 540},  {640, 480, 1120, 1824, 1344, 1064},
      {100000, 1, 280, 13440, 48, 280}, {1, 100000, 1120, 48, 53760, 1120},
  };
  for (const TokenCase& c : cases) {
    SCOPED_TRACE(std::to_string(c.width) + "x" + std::to_string(c.height) + " at " +
                 std::to_string(c.budget));
    Gemma4ImageProcessorOptions options;
    options.max_soft_tokens = c.budget;
    const Gemma4ResizeTarget target = gemma4_resize_target(c.height, c.width, options);
    EXPECT_EQ(target.width, c.resized_width);
    EXPECT_EQ(target.height, c.resized_height);
    EXPECT_EQ((target.width / 16) * (target.height / 16) / 9, c.tokens);
  }
  // The whole pipeline on a tiny image: scaled up to fill the budget.
  const Bytes pixel = {200, 100, 50};
  const Gemma4ImagePatches one = gemma4_preprocess_image(pixel, 1, 1);
  EXPECT_EQ(one.num_soft_tokens, 256);
  EXPECT_EQ(one.num_patches, 2304);
  EXPECT_EQ(one.max_patches, 2520);
  EXPECT_EQ(one.position_ids[2303 * 2], 47);
  EXPECT_EQ(one.position_ids[2304 * 2], -1);
  EXPECT_FLOAT_EQ(one.pixel_values[0], 200.0f / 255.0f);
}

TEST(Gemma4ImageProcessor, OnlyHuggingFacesBudgetsAreAccepted) {
  for (int ok : {70, 140, 280, 560, 1120}) EXPECT_NO_THROW(validate_gemma4_max_soft_tokens(ok));
  try {
    validate_gemma4_max_soft_tokens(100);
    FAIL() << "100 accepted";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "`max_soft_tokens` must be one of (70, 140, 280, 560, 1120), got 100.");
  }
}

// The fixture's pixel values are random numbers, not an image, so only the layout can be
// compared: (x, y) positions in row-major patch order, (-1, -1) padding with zero pixels, and
// the soft-token count, for the tiny vision config (patch 4, pooling 2, 16 soft tokens).
TEST(Gemma4ImageProcessor, PatchLayoutMatchesTheVisionFixture) {
  GS_REQUIRE_SHARED(shared);
  std::ifstream in(shared / "fixtures/gemma4-tiny/ref/vision.json");
  const nlohmann::json fixture = nlohmann::json::parse(in);
  int image_cases = 0;
  for (const auto& c : fixture["cases"]) {
    if (!c.contains("image")) continue;
    const auto& img = c["image"];
    SCOPED_TRACE(c["name"].get<std::string>());
    const auto& ids = img["image_position_ids"];
    int grid_w = 0, grid_h = 0, real = 0;
    for (const auto& id : ids) {
      if (id[0].get<int>() < 0) continue;
      grid_w = std::max(grid_w, id[0].get<int>() + 1);
      grid_h = std::max(grid_h, id[1].get<int>() + 1);
      ++real;
    }
    ASSERT_EQ(real, grid_w * grid_h);
    // An image already at its target size (no resize): grid_w*4 x grid_h*4 pixels.
    Gemma4ImageProcessorOptions options;
    options.patch_size = 4;
    options.pooling_kernel_size = 2;
    options.max_soft_tokens = 16;
    const int w = grid_w * 4, h = grid_h * 4;
    const Gemma4ResizeTarget target = gemma4_resize_target(h, w, options);
    EXPECT_EQ(target.width, w);
    EXPECT_EQ(target.height, h);
    const Gemma4ImagePatches got =
        gemma4_preprocess_image(Bytes(std::size_t(w) * h * 3, 0), w, h, options);
    ASSERT_EQ(got.max_patches, static_cast<int>(ids.size()));
    EXPECT_EQ(got.num_soft_tokens, img["num_soft_tokens"].get<int>());
    EXPECT_EQ(got.patch_dim * got.max_patches, static_cast<int>(img["pixel_values"].size()));
    for (std::size_t i = 0; i < ids.size(); ++i) {
      EXPECT_EQ(got.position_ids[i * 2], ids[i][0].get<int>()) << "patch " << i;
      EXPECT_EQ(got.position_ids[i * 2 + 1], ids[i][1].get<int>()) << "patch " << i;
    }
    for (std::size_t v = std::size_t(real) * got.patch_dim; v < img["pixel_values"].size(); ++v) {
      EXPECT_EQ(img["pixel_values"][v].get<double>(), 0.0) << "padding value " << v;
    }
    ++image_cases;
  }
  EXPECT_EQ(image_cases, 2);
}

}  // namespace
}  // namespace gemmaserve
