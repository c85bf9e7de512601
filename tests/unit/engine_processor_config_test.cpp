// The checkpoint's image processor config (processor_config.json nested, preprocessor_config.json
// flat): every field read, refused at load when it cannot be honoured (the message names the
// field), the soft tokens and pixels an engine gives with a config unlike Gemma 4's defaults (the
// same tokens and logprobs as the model's forward called by hand with those options), and the
// budget's override order: request > --mm-processor-kwargs > checkpoint > 280.
#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include "core/error.h"
#include "engine_image_hand_run.h"
#include "engine_test_support.h"
#include "model/gemma4_image_processor.h"
#include "model/gemma4_processor_config.h"

namespace gemmaserve {
namespace {

namespace fs = std::filesystem;
using enginetest::make_engine;
using enginetest::run_together;
using enginetest::tiny_args;
using testing::input_error_of;

constexpr int32_t kImage = 507;  // the fixture's <|image|>

// A copy of the tiny vision checkpoint (patch 4, pooling 2) with `files` written beside it.
fs::path vision_checkpoint_with(const testing::TempDir& dir,
                                const std::map<std::string, nlohmann::json>& files) {
  const fs::path from = enginetest::golden_model("vision");
  for (const char* name : {"config.json", "generation_config.json", "model.safetensors"}) {
    fs::copy_file(from / name, dir.path() / name);
  }
  for (const auto& [name, json] : files) std::ofstream(dir.path() / name) << json.dump(1);
  return dir.path();
}

VisionConfig tiny_tower() {
  VisionConfig v;
  v.patch_size = 4;
  v.pooling_kernel_size = 2;
  v.position_embedding_size = 64;
  return v;
}

// Every field set away from Gemma 4's default (sizes: the tiny tower's own).
const nlohmann::json kEveryField = {{"image_processor_type", "Gemma4ImageProcessor"},
                                    {"patch_size", 4},
                                    {"pooling_kernel_size", 2},
                                    {"max_soft_tokens", 140},
                                    {"do_resize", true},
                                    {"resample", 2},
                                    {"do_rescale", true},
                                    {"rescale_factor", 1.0 / 127.5},
                                    {"do_normalize", true},
                                    {"image_mean", {0.5, 0.4, 0.3}},
                                    {"image_std", {0.5, 0.6, 0.7}},
                                    {"do_convert_rgb", false}};

void expect_every_field(const Gemma4ImageProcessorOptions& o) {
  EXPECT_EQ(o.patch_size, 4);
  EXPECT_EQ(o.pooling_kernel_size, 2);
  EXPECT_EQ(o.max_soft_tokens, 140);
  EXPECT_TRUE(o.do_resize);
  EXPECT_EQ(o.resample, 2);
  EXPECT_TRUE(o.do_rescale);
  EXPECT_EQ(o.rescale_factor, 1.0 / 127.5);
  EXPECT_TRUE(o.do_normalize);
  EXPECT_EQ(o.image_mean, (std::array<double, 3>{0.5, 0.4, 0.3}));
  EXPECT_EQ(o.image_std, (std::array<double, 3>{0.5, 0.6, 0.7}));
  EXPECT_FALSE(o.do_convert_rgb);
}

TEST(ProcessorConfigFile, NestedSectionOfProcessorConfigIsRead) {
  const testing::TempDir dir;
  std::ofstream(dir.path() / "processor_config.json") << nlohmann::json{
      {"image_processor", kEveryField},
      {"image_seq_length", 140},
      {"processor_class", "Gemma4Processor"}}.dump();
  expect_every_field(load_gemma4_image_processor_config(dir.path(), tiny_tower()));
}

TEST(ProcessorConfigFile, FlatPreprocessorConfigIsRead) {
  const testing::TempDir dir;
  // An older processor_config.json holds only the processor's own keys.
  std::ofstream(dir.path() / "processor_config.json") << R"({"image_seq_length": 140})";
  std::ofstream(dir.path() / "preprocessor_config.json") << kEveryField.dump();
  expect_every_field(load_gemma4_image_processor_config(dir.path(), tiny_tower()));
}

TEST(ProcessorConfigFile, NestedSectionWinsOverPreprocessorConfig) {
  const testing::TempDir dir;
  std::ofstream(dir.path() / "processor_config.json")
      << nlohmann::json{{"image_processor", kEveryField}}.dump();
  std::ofstream(dir.path() / "preprocessor_config.json") << R"({"max_soft_tokens": 560})";
  expect_every_field(load_gemma4_image_processor_config(dir.path(), tiny_tower()));
}

TEST(ProcessorConfigFile, NoFileGivesHuggingFacesDefaultsAtTheTowersSizes) {
  const testing::TempDir dir;
  const Gemma4ImageProcessorOptions o =
      load_gemma4_image_processor_config(dir.path(), tiny_tower());
  EXPECT_EQ(o.patch_size, 4);
  EXPECT_EQ(o.pooling_kernel_size, 2);
  EXPECT_EQ(o.max_soft_tokens, 280);
  EXPECT_TRUE(o.do_resize && o.do_rescale && o.do_convert_rgb && !o.do_normalize);
  EXPECT_EQ(o.resample, 3);
  EXPECT_EQ(o.rescale_factor, 1.0 / 255);
  // A scalar mean / std is used for all three channels, as HF's normalize() does.
  std::ofstream(dir.path() / "preprocessor_config.json")
      << R"({"image_mean": 0.5, "image_std": 2, "do_normalize": true})";
  const Gemma4ImageProcessorOptions s =
      load_gemma4_image_processor_config(dir.path(), tiny_tower());
  EXPECT_EQ(s.image_mean, (std::array<double, 3>{0.5, 0.5, 0.5}));
  EXPECT_EQ(s.image_std, (std::array<double, 3>{2.0, 2.0, 2.0}));
}

TEST(ProcessorConfigFile, RefusesWhatItCannotHonourNamingTheField) {
  const std::string where = "preprocessor_config.json: ";
  const std::vector<std::pair<nlohmann::json, std::string>> cases = {
      {{{"patch_size", 8}},
       "patch_size 8 differs from the vision tower's patch_size 4 (config.json), whose patch "
       "embedding takes 3 x 4² values per patch"},
      {{{"pooling_kernel_size", 3}},
       "pooling_kernel_size 3 differs from the vision tower's pooling_kernel_size 2 "
       "(config.json), which decides its soft tokens"},
      {{{"max_soft_tokens", 100}},
       "`max_soft_tokens` must be one of (70, 140, 280, 560, 1120), got 100."},
      {{{"resample", 0}},
       "resample 0 (NEAREST) is not implemented; gemmaserve resizes with Pillow's LANCZOS (1), "
       "BILINEAR (2), BICUBIC (3, Gemma 4's default), BOX (4) or HAMMING (5)"},
      {{{"do_resize", "yes"}}, "do_resize must be true or false, got \"yes\""},
      {{{"do_rescale", nullptr}}, "do_rescale must be true or false, got null"},
      {{{"rescale_factor", "1/255"}}, "rescale_factor must be a finite number, got \"1/255\""},
      {{{"image_mean", {0.5, 0.5}}},
       "image_mean must have 3 elements (one per RGB channel), got [0.5,0.5]"},
      {{{"image_std", {1, 0, 1}}}, "image_std must be non-zero finite numbers, got [1,0,1]"},
      {{{"do_convert_rgb", 1}}, "do_convert_rgb must be true or false, got 1"},
      {{{"image_processor_type", "SiglipImageProcessor"}},
       "image_processor_type \"SiglipImageProcessor\" is not this model's image processor "
       "(Gemma4ImageProcessor)"},
  };
  for (const auto& [fields, message] : cases) {
    SCOPED_TRACE(fields.dump());
    const testing::TempDir dir;
    std::ofstream(dir.path() / "preprocessor_config.json") << fields.dump();
    EXPECT_EQ(input_error_of([&] { load_gemma4_image_processor_config(dir.path(), tiny_tower()); }),
              where + message);
  }
}

TEST(EngineProcessorConfig, RefusedAtLoadNamingTheField) {
  const testing::TempDir dir;
  nlohmann::json config = kEveryField;
  config["patch_size"] = 8;
  const fs::path model =
      vision_checkpoint_with(dir, {{"processor_config.json", {{"image_processor", config}}}});
  EXPECT_EQ(input_error_of([&] { make_engine(tiny_args(model.string())); }),
            "processor_config.json image_processor: patch_size 8 differs from the vision tower's "
            "patch_size 4 (config.json), whose patch embedding takes 3 x 4² values per patch");
}

// Runs `image` (no budget of its own) through an engine on `model` and checks its placeholder
// holds `soft_tokens` and its greedy tokens and logprobs are the model's forward called by hand
// on the patches `options` give.
void expect_engine_equals_hand_run(const fs::path& model, const PromptImage& image,
                                   const Gemma4ImageProcessorOptions& options, int soft_tokens) {
  EngineArgs args = tiny_args(model.string());
  args.kv_cache_dtype = "f32";  // as the hand-run KvCache
  auto engine = make_engine(args);
  const std::vector<int32_t> prompt = {2, 178, 199, kImage, 214, 410};
  EngineRequest r;
  r.request_id = "a";
  r.prompt_token_ids = prompt;
  r.images = {image};
  r.params.temperature = 0;
  r.params.max_tokens = 6;
  r.params.ignore_eos = true;
  r.params.logprobs = 0;
  const RequestOutput out = run_together(*engine, {r}).outputs[0];
  const ExpandedPrompt expanded = engine->expand_image_placeholders(prompt, {&image, 1});
  ASSERT_EQ(expanded.placeholders.size(), 1u);
  EXPECT_EQ(expanded.placeholders[0].length, soft_tokens);
  const Gemma4ImagePatches patches =
      gemma4_preprocess_image(image.rgb.pixels, image.rgb.width, image.rgb.height, options);
  EXPECT_EQ(patches.num_soft_tokens, soft_tokens);
  enginetest::expect_output_equals_hand_run(out, model, expanded, {patches});
}

TEST(EngineProcessorConfig, NestedConfigDecidesTheSoftTokensAndThePixels) {
  const testing::TempDir dir;
  const fs::path model = vision_checkpoint_with(
      dir,
      {{"processor_config.json", {{"image_processor", kEveryField}, {"image_seq_length", 140}}}});
  Gemma4ImageProcessorOptions o;
  o.patch_size = 4;
  o.pooling_kernel_size = 2;
  o.max_soft_tokens = 140;
  o.resample = 2;
  o.rescale_factor = 1.0 / 127.5;
  o.do_normalize = true;
  o.image_mean = {0.5, 0.4, 0.3};
  o.image_std = {0.5, 0.6, 0.7};
  // 20x12 at 140: resized to 120x72, 30x18 patches, pooled 2x2 -> 135 (252 at the built-in 280).
  expect_engine_equals_hand_run(model, enginetest::seeded_image(20, 12, 1), o, 135);
}

TEST(EngineProcessorConfig, FlatConfigWithoutResizeOrRescale) {
  const testing::TempDir dir;
  const fs::path model = vision_checkpoint_with(dir, {{"preprocessor_config.json",
                                                       {{"max_soft_tokens", 70},
                                                        {"do_resize", false},
                                                        {"do_rescale", false},
                                                        {"do_normalize", true},
                                                        {"image_mean", 127.5},
                                                        {"image_std", 127.5}}}});
  Gemma4ImageProcessorOptions o;
  o.patch_size = 4;
  o.pooling_kernel_size = 2;
  o.max_soft_tokens = 70;
  o.do_resize = false;
  o.do_rescale = false;
  o.do_normalize = true;
  o.image_mean = {127.5, 127.5, 127.5};
  o.image_std = {127.5, 127.5, 127.5};
  // 24x16 as it is: 6x4 patches -> 6 soft tokens (resized at the built-in 280: 260).
  expect_engine_equals_hand_run(model, enginetest::seeded_image(24, 16, 2), o, 6);
}

TEST(EngineProcessorConfig, BudgetOrderIsRequestThenFlagThenCheckpointThenDefault) {
  const testing::TempDir dir;
  const fs::path model = vision_checkpoint_with(
      dir, {{"processor_config.json", {{"image_processor", {{"max_soft_tokens", 140}}}}}});
  const std::vector<int32_t> prompt = {2, kImage};
  const auto soft_tokens = [&](Engine& engine, std::optional<int> request_budget) {
    PromptImage image = enginetest::seeded_image(20, 12, 3);
    image.max_soft_tokens = request_budget;
    return engine.expand_image_placeholders(prompt, {&image, 1}).placeholders[0].length;
  };
  auto checkpoint = make_engine(tiny_args(model.string()));
  EXPECT_EQ(checkpoint->default_max_soft_tokens(), 140);
  EXPECT_EQ(soft_tokens(*checkpoint, std::nullopt), 135);
  EXPECT_EQ(soft_tokens(*checkpoint, 70), 60);
  EngineArgs flagged = tiny_args(model.string());
  flagged.mm_processor_kwargs = {{"max_soft_tokens", 70}};
  auto flag = make_engine(flagged);
  EXPECT_EQ(flag->default_max_soft_tokens(), 70);
  EXPECT_EQ(soft_tokens(*flag, std::nullopt), 60);
  EXPECT_EQ(soft_tokens(*flag, 140), 135);
  auto plain = make_engine(tiny_args("vision"));
  EXPECT_EQ(plain->default_max_soft_tokens(), 280);
  EXPECT_EQ(soft_tokens(*plain, std::nullopt), 252);
}

}  // namespace
}  // namespace gemmaserve
