// The image placeholder rule (Hugging Face's Gemma 4 processor), the soft-token count, the
// mm_processor_kwargs / --limit-mm-per-prompt parsing and image content hashes: pure functions,
// no model.
#include "engine/image_placeholders.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "model/gemma4_image_processor.h"
#include "test_support.h"

namespace gemmaserve {
namespace {

constexpr ImageTokenIds kTokens{507, 505, 506};  // the tiny vision fixture's ids

using testing::input_error_of;

TEST(ImagePlaceholders, EachBareImageTokenExpandsForTheNextImage) {
  const std::vector<int32_t> ids = {2, 10, 507, 11, 507, 12};
  const std::vector<int> soft = {3, 2};
  const ExpandedPrompt e = expand_image_placeholders(ids, soft, kTokens);
  const std::vector<int32_t> want = {2, 10, 505, 507, 507, 507, 506, 11, 505, 507, 507, 506, 12};
  EXPECT_EQ(e.token_ids, want);
  ASSERT_EQ(e.placeholders.size(), 2u);
  EXPECT_EQ(e.placeholders[0].offset, 3);
  EXPECT_EQ(e.placeholders[0].length, 3);
  EXPECT_EQ(e.placeholders[1].offset, 9);
  EXPECT_EQ(e.placeholders[1].length, 2);
}

TEST(ImagePlaceholders, NoImagesLeavesTextAlone) {
  const std::vector<int32_t> ids = {2, 10, 11};
  const ExpandedPrompt e = expand_image_placeholders(ids, {}, kTokens);
  EXPECT_EQ(e.token_ids, ids);
  EXPECT_TRUE(e.placeholders.empty());
}

TEST(ImagePlaceholders, CountMismatchIsAnInputError) {
  const std::vector<int32_t> two = {2, 507, 507};
  const std::vector<int> one = {4};
  EXPECT_EQ(input_error_of([&] { expand_image_placeholders(two, one, kTokens); }),
            "Found 2 <|image|> tokens in the prompt but 1 image was given; the prompt needs one "
            "<|image|> per image, in order");
  const std::vector<int32_t> none = {2, 10};
  EXPECT_EQ(input_error_of([&] { expand_image_placeholders(none, one, kTokens); }),
            "Found 0 <|image|> tokens in the prompt but 1 image was given; the prompt needs one "
            "<|image|> per image, in order");
  const std::vector<int32_t> single = {2, 507};
  EXPECT_EQ(input_error_of([&] { expand_image_placeholders(single, {}, kTokens); }),
            "Found 1 <|image|> token in the prompt but 0 images were given; the prompt needs one "
            "<|image|> per image, in order");
}

TEST(ImagePlaceholders, AlreadyExpandedPromptIsRejected) {
  const std::vector<int32_t> ids = {2, 505, 507, 506};
  const std::vector<int> one = {1};
  EXPECT_EQ(input_error_of([&] { expand_image_placeholders(ids, one, kTokens); }),
            "the prompt already holds an expanded image (<|image> followed by <|image|>); put one "
            "bare <|image|> per image and let the engine expand it");
}

TEST(ImagePlaceholders, SoftTokensFollowTheResizeRule) {
  const auto tokens = [](int patch, int pooling, int budget, int width, int height) {
    Gemma4ImageProcessorOptions o;
    o.patch_size = patch;
    o.pooling_kernel_size = pooling;
    o.max_soft_tokens = budget;
    return gemma4_image_soft_tokens(o, 10240, width, height);
  };
  // patch 16, pooling 3: the released checkpoints
  EXPECT_EQ(tokens(16, 3, 280, 896, 896), 256);
  EXPECT_EQ(tokens(16, 3, 70, 896, 896), 64);
  EXPECT_EQ(tokens(16, 3, 1120, 896, 896), 1089);
  EXPECT_EQ(tokens(4, 2, 70, 16, 16), 64);
}

TEST(MmProcessorKwargs, ReadsMaxSoftTokens) {
  EXPECT_EQ(parse_mm_processor_kwargs(nullptr, "x"), std::nullopt);
  EXPECT_EQ(parse_mm_processor_kwargs(nlohmann::json::object(), "x"), std::nullopt);
  EXPECT_EQ(parse_mm_processor_kwargs({{"max_soft_tokens", 560}}, "x"), 560);
  EXPECT_EQ(input_error_of([] {
              parse_mm_processor_kwargs({{"max_soft_tokens", 100}}, "x");
            }),
            "`max_soft_tokens` must be one of (70, 140, 280, 560, 1120), got 100.");
  EXPECT_EQ(input_error_of([] {
              parse_mm_processor_kwargs({{"do_pan", true}}, "--mm-processor-kwargs");
            }),
            "--mm-processor-kwargs: unsupported key 'do_pan' (Gemma 4 images take max_soft_tokens, "
            "videos num_frames and fps)");
  EXPECT_EQ(input_error_of([] {
              parse_mm_processor_kwargs({{"max_soft_tokens", "280"}}, "x");
            }),
            "x: max_soft_tokens must be an integer, got \"280\"");
  EXPECT_EQ(input_error_of([] { parse_mm_processor_kwargs(nlohmann::json::array(), "x"); }),
            "x must be a JSON object");
}

TEST(LimitMmPerPrompt, ParsesAndChecks) {
  const auto limits = parse_limit_mm_per_prompt(R"({"image": 2, "video": {"count": 0}})");
  EXPECT_EQ(limits.at("image"), 2);
  EXPECT_EQ(limits.at("video"), 0);
  EXPECT_NO_THROW(check_image_limit(limits, 2));
  EXPECT_NO_THROW(check_image_limit({}, 1000));
  EXPECT_EQ(input_error_of([&] { check_image_limit(limits, 3); }),
            "At most 2 image(s) may be provided in one prompt. Set `--limit-mm-per-prompt` to "
            "increase this limit.");
  EXPECT_EQ(input_error_of([] { parse_limit_mm_per_prompt(R"({"pdf": 1})"); }),
            "--limit-mm-per-prompt: unknown modality 'pdf' (image, video or audio)");
  EXPECT_EQ(input_error_of([] { parse_limit_mm_per_prompt(R"({"image": -1})"); }),
            "--limit-mm-per-prompt: the limit of 'image' must be a non-negative integer, got -1");
  EXPECT_EQ(input_error_of([] { parse_limit_mm_per_prompt("[1]"); }),
            "--limit-mm-per-prompt must be a JSON object such as '{\"image\": 2}'");
}

// Videos are counted like the other modalities; audio limits are kept too.
TEST(LimitMmPerPrompt, VideoLimitsAreCounted) {
  const auto limits = parse_limit_mm_per_prompt(R"({"video": {"count": 1}})");
  EXPECT_EQ(limits.at("video"), 1);
  EXPECT_NO_THROW(check_video_limit(limits, 1));
  EXPECT_NO_THROW(check_video_limit({}, 50));
  EXPECT_EQ(input_error_of([&] { check_video_limit(limits, 2); }),
            "At most 1 video(s) may be provided in one prompt. Set `--limit-mm-per-prompt` to "
            "increase this limit.");
  EXPECT_EQ(parse_limit_mm_per_prompt(R"({"image": 1, "audio": {"count": 2}})").at("audio"), 2);
  EXPECT_EQ(parse_limit_mm_per_prompt(R"({"audio": 0})").at("audio"), 0);
  // vLLM's profiling options are taken (with a warning), anything else is refused.
  EXPECT_EQ(parse_limit_mm_per_prompt(R"({"video": {"count": 2, "num_frames": 16, "width": 640}})")
                .at("video"),
            2);
  EXPECT_EQ(input_error_of([] { parse_limit_mm_per_prompt(R"({"video": {"fps": 2}})"); }),
            "--limit-mm-per-prompt: unknown option 'fps' of 'video' (count, num_frames, width, "
            "height)");
  EXPECT_EQ(input_error_of([] { parse_limit_mm_per_prompt(R"({"audio": {"width": 2}})"); }),
            "--limit-mm-per-prompt: unknown option 'width' of 'audio' (count, length)");
}

TEST(ImageContentHash, DependsOnPixelsSizeAndBudget) {
  image::RgbImage a{2, 1, {1, 2, 3, 4, 5, 6}};
  image::RgbImage b = a;
  b.pixels[5] = 7;
  image::RgbImage c{1, 2, a.pixels};
  const std::string h = image_content_hash(a, 280);
  EXPECT_EQ(h.size(), 64u);
  EXPECT_EQ(h, image_content_hash(a, 280));
  EXPECT_NE(h, image_content_hash(b, 280));
  EXPECT_NE(h, image_content_hash(c, 280));
  EXPECT_NE(h, image_content_hash(a, 70));
}

}  // namespace
}  // namespace gemmaserve
