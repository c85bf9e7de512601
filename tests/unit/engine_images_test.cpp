// Images through the Engine on the tiny vision checkpoint: the same tokens and logprobs as the
// model's forward called by hand with the same soft tokens, an image never split across steps
// (also one bigger than the step budget), prefix caching keyed by the image, the encoder cache,
// limits and errors, batch invariance and preemption with images.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <functional>
#include <mutex>

#include "core/error.h"
#include "engine_image_hand_run.h"
#include "engine_test_support.h"
#include "model/gemma4_image_processor.h"

namespace gemmaserve {
namespace {

using enginetest::expect_same_outputs;
using enginetest::make_engine;
using enginetest::run_alone;
using enginetest::run_together;
using enginetest::RunResult;
using enginetest::tiny_args;

constexpr int32_t kImage = 507;  // the fixture's <|image|>
constexpr int32_t kBoi = 505;
constexpr int kBudget = 70;  // soft tokens: a 20x12 image gives 60, a 16x16 one 64

PromptImage test_image(int width, int height, uint32_t seed, int budget = kBudget) {
  PromptImage im = enginetest::seeded_image(width, height, seed);
  im.max_soft_tokens = budget;
  return im;
}

EngineRequest image_request(const std::string& id, std::vector<int32_t> prompt,
                            std::vector<PromptImage> images, int max_tokens = 8) {
  EngineRequest r;
  r.request_id = id;
  r.prompt_token_ids = std::move(prompt);
  r.images = std::move(images);
  r.params.temperature = 0;
  r.params.max_tokens = max_tokens;
  r.params.ignore_eos = true;
  r.params.logprobs = 0;
  return r;
}

// BOS, some text, an image, more text, a second image, text: the two-image prompt.
const std::vector<int32_t> kTwoImagePrompt = {2, 178, 199, kImage, 28, 70, kImage, 214, 410, 106};
const std::vector<int32_t> kOneImagePrompt = {2, 178, 199, 28, 70, kImage, 214, 410, 106};

std::vector<PromptImage> two_images() { return {test_image(20, 12, 1), test_image(16, 16, 2)}; }

using testing::input_error_of;

TEST(EngineImages, MatchesTheForwardCalledByHand) {
  EngineArgs args = tiny_args("vision");
  args.kv_cache_dtype = "f32";  // as the hand-run KvCache
  auto engine = make_engine(args);
  const RunResult run = run_together(*engine, {image_request("a", kTwoImagePrompt, two_images())});
  const RequestOutput& out = run.outputs[0];
  const ExpandedPrompt expanded = engine->expand_image_placeholders(kTwoImagePrompt, two_images());
  ASSERT_EQ(expanded.placeholders.size(), 2u);
  EXPECT_EQ(expanded.placeholders[0].length, 60);
  EXPECT_EQ(expanded.placeholders[1].length, 64);
  EXPECT_EQ(out.prompt_token_ids.size(), kTwoImagePrompt.size() + 60 + 64 + 2 * 1);
  ASSERT_EQ(out.outputs[0].token_ids.size(), 8u);

  std::vector<Gemma4ImagePatches> patches;
  for (const PromptImage& image : two_images()) {
    Gemma4ImageProcessorOptions o;
    o.patch_size = 4;
    o.pooling_kernel_size = 2;
    o.max_soft_tokens = kBudget;
    patches.push_back(
        gemma4_preprocess_image(image.rgb.pixels, image.rgb.width, image.rgb.height, o));
  }
  enginetest::expect_output_equals_hand_run(out, enginetest::golden_model("vision"), expanded,
                                            patches);
}

TEST(EngineImages, NeverSplitAcrossStepsEvenPastTheBudget) {
  const EngineRequest request = image_request("a", kTwoImagePrompt, two_images());
  const RunResult roomy = run_together(*make_engine(tiny_args("vision")), {request});
  EngineArgs small = tiny_args("vision");
  small.max_num_batched_tokens = 16;  // every image is bigger than a step
  auto engine = make_engine(small);
  const RunResult got = run_together(*engine, {request});
  expect_same_outputs(roomy.outputs[0], got.outputs[0], "budget 16");
  // Text 0..2, boi; image 1 (60); eoi + text + boi; image 2 (64); the rest, then 7 decodes.
  EXPECT_EQ(got.steps, 5u + 7u);
}

// The tiny tower's 64-entry position table caps it below 1120 soft tokens (the test below
// checks that error); 560 soft tokens (529 for a square) against a 128-token budget is the
// same case as 1120 against 512.
TEST(EngineImages, ImageFarBiggerThanTheStepBudgetRuns) {
  const EngineRequest request =
      image_request("a", kOneImagePrompt, {test_image(64, 64, 3, 560)}, 4);
  EngineArgs args = tiny_args("vision");
  args.max_model_len = 1024;
  args.max_num_batched_tokens = 128;
  auto engine = make_engine(args);
  const RunResult got = run_together(*engine, {request});
  EXPECT_EQ(got.outputs[0].prompt_token_ids.size(), kOneImagePrompt.size() + 529 + 1);
  EXPECT_EQ(got.outputs[0].outputs[0].token_ids.size(), 4u);
  args.max_num_batched_tokens = 2048;
  expect_same_outputs(run_together(*make_engine(args), {request}).outputs[0], got.outputs[0],
                      "budget 2048");
}

TEST(EngineImages, PrefixCacheKeysOnTheImage) {
  auto engine = make_engine(tiny_args("vision"));
  // 16-token blocks; the image's soft tokens start at 6 (after <|image>) and end at 66; 93
  // tokens in all.
  std::vector<int32_t> prompt = {2, 178, 199, 28, 70, kImage, 214, 410, 106, 30, 31, 32};
  for (int32_t t = 40; t < 60; ++t) prompt.push_back(t);
  const RunResult first =
      run_together(*engine, {image_request("a", prompt, {test_image(20, 12, 1)})});
  EXPECT_EQ(first.outputs[0].num_cached_tokens, 0);
  const RunResult same =
      run_together(*engine, {image_request("b", prompt, {test_image(20, 12, 1)})});
  EXPECT_EQ(same.outputs[0].num_cached_tokens, 80);  // 5 full blocks, past the image
  expect_same_outputs(first.outputs[0], same.outputs[0], "identical image");
  const RunResult other =
      run_together(*engine, {image_request("c", prompt, {test_image(20, 12, 9)})});
  EXPECT_EQ(other.outputs[0].num_cached_tokens, 0);  // block 0 already holds the image
  const RunResult fresh = run_together(*make_engine(tiny_args("vision")),
                                       {image_request("c", prompt, {test_image(20, 12, 9)})});
  expect_same_outputs(fresh.outputs[0], other.outputs[0], "other image");
  EXPECT_NE(fresh.outputs[0].outputs[0].token_ids, first.outputs[0].outputs[0].token_ids);
}

// n = 2: sample 1 waits for sample 0's prompt, then finds its blocks up to the image (the hit
// cannot end inside it) and computes the image again from the rows the request still holds.
TEST(EngineImages, SecondSampleRecomputesTheImageFromHeldRows) {
  EngineArgs args = tiny_args("vision");
  args.mm_processor_cache_gb = 0;  // the rows must come from the request, not the cache
  auto engine = make_engine(args);
  EngineRequest two = image_request("n2", kTwoImagePrompt, two_images());
  two.params.n = 2;
  two.params.temperature = 1;  // sample k draws with seed + k
  two.params.seed = 5;
  const RunResult both = run_together(*engine, {two});
  ASSERT_EQ(both.outputs[0].outputs.size(), 2u);
  auto single = make_engine(args);
  for (int k = 0; k < 2; ++k) {
    EngineRequest one = image_request("n1", kTwoImagePrompt, two_images());
    one.params.temperature = 1;
    one.params.seed = 5 + k;
    const RunResult alone = run_together(*single, {one});
    EXPECT_EQ(both.outputs[0].outputs[static_cast<size_t>(k)].token_ids,
              alone.outputs[0].outputs[0].token_ids)
        << "sample " << k;
  }
  EXPECT_EQ(engine->stats().images_encoded, 2u);  // once each, though computed twice
}

TEST(EngineImages, EncoderCacheSkipsTheTowerForARepeatedImage) {
  EngineArgs args = tiny_args("vision");
  args.enable_prefix_caching = false;  // else the prefix cache skips the image altogether
  auto engine = make_engine(args);
  const EngineRequest r = image_request("a", kTwoImagePrompt, two_images());
  const RunResult first = run_alone(*engine, {r, r});
  const EngineStats s = engine->stats();
  EXPECT_EQ(s.images_encoded, 2u);
  EXPECT_EQ(s.mm_cache_queries, 4u);
  EXPECT_EQ(s.mm_cache_hits, 2u);
  EXPECT_EQ(s.encoder_cache_entries, 2u);  // what /metrics shows as gemmaserve:encoder_cache_*
  EXPECT_GT(s.encoder_cache_bytes, 0u);
  expect_same_outputs(first.outputs[0], first.outputs[1], "cached rows");

  args.mm_processor_cache_gb = 0;
  auto uncached = make_engine(args);
  run_alone(*uncached, {r, r});
  EXPECT_EQ(uncached->stats().images_encoded, 4u);
  EXPECT_EQ(uncached->stats().mm_cache_queries, 0u);
}

// Many distinct images whose rows hold more than their size (a vector's capacity): the cache
// counts what they hold, stays within its budget, and keeps the image asked for between them.
TEST(EncoderCacheBudget, ManyLargeImagesStayUnderTheByteBoundAndTheRecentOneStays) {
  constexpr uint64_t kBudget = uint64_t{1} << 20;
  constexpr size_t kHeldFloats = 64 * 1024;  // 256 KiB held, 4 KiB used
  EncoderCache cache(kBudget);
  auto rows = [] {
    auto r = std::make_shared<std::vector<float>>(1024, 1.0f);
    r->reserve(kHeldFloats);
    return EncodedImage(std::move(r));
  };
  const EncodedImage hot = rows();
  cache.insert("hot", hot);
  for (int i = 0; i < 64; ++i) {
    cache.insert("image" + std::to_string(i), rows());
    EXPECT_EQ(cache.find("hot"), hot) << i;  // the most recently used stays
    EXPECT_LE(cache.size() * kHeldFloats * sizeof(float), kBudget) << i;
    EXPECT_LE(cache.bytes(), kBudget) << i;
    EXPECT_GE(cache.bytes(), cache.size() * kHeldFloats * sizeof(float)) << i;
  }
  EXPECT_EQ(cache.find("image0"), nullptr);  // the least recently used went first
  EXPECT_NE(cache.find("image63"), nullptr);
}

TEST(EngineImages, LimitsAndErrors) {
  EngineArgs args = tiny_args("vision");
  args.limit_mm_per_prompt = {{"image", 1}};
  auto engine = make_engine(args);
  EXPECT_EQ(input_error_of([&] {
              engine->add_request(image_request("a", kTwoImagePrompt, two_images()), nullptr);
            }),
            "At most 1 image(s) may be provided in one prompt. Set `--limit-mm-per-prompt` to "
            "increase this limit.");
  EXPECT_EQ(input_error_of([&] {
              engine->add_request(image_request("a", kTwoImagePrompt, {test_image(8, 8, 1)}),
                                  nullptr);
            }),
            "Found 2 <|image|> tokens in the prompt but 1 image was given; the prompt needs one "
            "<|image|> per image, in order");
  EXPECT_EQ(input_error_of([&] {
              engine->add_request(image_request("a", {2, 10, kImage}, {}), nullptr);
            }),
            "Found 1 <|image|> token in the prompt but 0 images were given; the prompt needs one "
            "<|image|> per image, in order");
  EXPECT_EQ(input_error_of([&] {
              engine->add_request(image_request("a", {2, kBoi, kImage, 506}, {test_image(8, 8, 1)}),
                                  nullptr);
            }),
            "the prompt already holds an expanded image (<|image> followed by <|image|>); put one "
            "bare <|image|> per image and let the engine expand it");
  EXPECT_EQ(input_error_of([&] {
              engine->add_request(image_request("a", kOneImagePrompt, {test_image(8, 8, 1, 100)}),
                                  nullptr);
            }),
            "`max_soft_tokens` must be one of (70, 140, 280, 560, 1120), got 100.");
  EXPECT_EQ(input_error_of([&] {
              engine->add_request(
                  image_request("a", kOneImagePrompt, {test_image(64, 64, 1, 1120)}), nullptr);
            }),
            "a 64x64 image at max_soft_tokens 1120 is 66x66 patches, more per side than the "
            "vision tower's position table holds (64); use a smaller max_soft_tokens");
  EXPECT_EQ(engine->stats().num_waiting, 0);

  const EngineArgs text_only = tiny_args("dense");
  auto dense = make_engine(text_only);
  EXPECT_EQ(
      input_error_of([&] {
        dense->add_request(image_request("a", {2, 10, 11}, {test_image(8, 8, 1)}), nullptr);
      }),
      "This model does not accept image input: " + text_only.model + " has no vision encoder.");
}

// Text prompts without the fixture's multimodal ids (505..511), which would need images.
std::vector<EngineRequest> text_requests(int count, uint64_t seed) {
  SamplingParams greedy;
  greedy.temperature = 0;
  greedy.ignore_eos = true;
  greedy.logprobs = 0;
  std::vector<EngineRequest> requests = enginetest::varied_requests(count, 512, seed, greedy, "t");
  for (EngineRequest& r : requests) {
    for (int32_t& t : r.prompt_token_ids) {
      if (t >= kBoi) t = 300;
    }
  }
  return requests;
}

TEST(EngineImages, BatchInvariantAmongTextRequests) {
  auto engine = make_engine(tiny_args("vision"));
  const EngineRequest image = image_request("img", kTwoImagePrompt, two_images(), 12);
  const RunResult alone = run_together(*engine, {image});
  std::vector<EngineRequest> batch = text_requests(8, 21);
  batch.insert(batch.begin() + 3, image);
  EngineArgs no_cache = tiny_args("vision");
  no_cache.enable_prefix_caching = false;  // the image is computed again, among the others
  const RunResult mixed = run_together(*make_engine(no_cache), batch);
  expect_same_outputs(alone.outputs[0], mixed.outputs[3], "among 8 text requests");
}

TEST(EngineImages, PreemptionRecomputesImagesToTheSameOutputs) {
  EngineArgs roomy = tiny_args("vision");
  roomy.max_model_len = 160;
  roomy.kv_cache_dtype = "f32";
  EngineArgs tight = roomy;
  tight.kv_cache_memory_bytes = 160 << 10;
  std::vector<EngineRequest> requests;
  for (int i = 0; i < 6; ++i) {
    requests.push_back(image_request("p" + std::to_string(i), kOneImagePrompt,
                                     {test_image(20, 12, static_cast<uint32_t>(10 + i))}, 40));
  }
  const RunResult expected = run_together(*make_engine(roomy), requests);
  auto engine = make_engine(tight);
  const RunResult got = run_together(*engine, requests);
  const EngineStats s = engine->stats();
  EXPECT_GT(s.preemptions, 0u);
  for (size_t i = 0; i < requests.size(); ++i) {
    expect_same_outputs(expected.outputs[i], got.outputs[i], requests[i].request_id);
  }
  for (int b : s.kv_blocks_in_use) EXPECT_EQ(b, 0);
}

// A text request and an image request submitted together, with callbacks that may act at the
// text request's k-th token (see the streaming tests below).
struct TextBesideImage {
  std::mutex mutex;
  std::condition_variable done;
  int remaining = 2;
  int text_tokens = 0;
  int text_tokens_at_image_token = -1;  // when the image request's first token arrived
  uint64_t steps_at_image_token = 0;
  RequestOutput text, image;
  std::function<void(int text_tokens)> on_text_token;

  void run(Engine& engine, EngineRequest text_request, EngineRequest image_request) {
    std::vector<Submission> subs(2);
    subs[0].request = std::move(text_request);
    subs[0].callback = [this](const RequestOutput& out, const RequestOutputDelta& d) {
      int count = 0;
      {
        std::lock_guard<std::mutex> lock(mutex);
        count = text_tokens +=
            static_cast<int>(d.outputs.empty() ? 0 : d.outputs[0].token_ids.size());
      }
      if (on_text_token && !d.outputs.empty()) on_text_token(count);
      finish_if(out, &text);
    };
    subs[1].request = std::move(image_request);
    subs[1].callback = [this, &engine](const RequestOutput& out, const RequestOutputDelta& d) {
      if (!d.outputs.empty() && !d.outputs[0].token_ids.empty() && text_tokens_at_image_token < 0) {
        const uint64_t steps = engine.stats().steps;
        std::lock_guard<std::mutex> lock(mutex);
        text_tokens_at_image_token = text_tokens;
        steps_at_image_token = steps;
      }
      finish_if(out, &image);
    };
    engine.add_requests(std::move(subs));
    std::unique_lock<std::mutex> lock(mutex);
    done.wait(lock, [&] { return remaining == 0; });
  }
  void finish_if(const RequestOutput& out, RequestOutput* into) {
    if (!out.finished) return;
    std::lock_guard<std::mutex> lock(mutex);
    *into = out;
    if (--remaining == 0) done.notify_all();
  }
};

EngineRequest long_text_request(int max_tokens) {
  EngineRequest t = image_request("text", {2, 178, 199, 28, 70, 214}, {}, max_tokens);
  return t;
}

// The image's encoding is sliced across steps by the step budget (64 tokens: one unit of
// encoder work per step) while the text request decodes: it gets a token in every step, and
// the image request's tokens equal those of a roomy budget that encodes in one step.
TEST(EngineImages, DecodesKeepStreamingWhileAnImageEncodes) {
  const EngineRequest image = image_request("image", kOneImagePrompt, {test_image(20, 12, 4)});
  EngineArgs roomy = tiny_args("vision");
  auto one_shot = make_engine(roomy);
  const RunResult expected = run_together(*one_shot, {image, long_text_request(30)});
  EXPECT_EQ(one_shot->stats().encoder_steps, 1u);  // the whole tower in the first step

  EngineArgs args = roomy;
  args.max_num_batched_tokens = 64;
  auto engine = make_engine(args);
  TextBesideImage run;
  run.run(*engine, long_text_request(30), image);
  const EngineStats s = engine->stats();
  const auto layers = static_cast<uint64_t>(engine->model_config().vision->num_hidden_layers);
  EXPECT_EQ(s.encoder_steps, 3 * layers);  // 240 patches: one block per stage per step
  EXPECT_GE(s.encoder_steps, 3u);
  EXPECT_EQ(s.images_encoded, 1u);
  // Every step up to the image request's first token (its prompt took the steps after the
  // encode) also gave the text request a token.
  EXPECT_GT(run.steps_at_image_token, s.encoder_steps);
  EXPECT_EQ(static_cast<uint64_t>(run.text_tokens_at_image_token), run.steps_at_image_token);
  expect_same_outputs(expected.outputs[0], run.image, "sliced encode");
  expect_same_outputs(expected.outputs[1], run.text, "text beside the encode");
  EXPECT_EQ(s.encodes_in_progress, 0);
}

// Aborting the image request while its image is half encoded frees its job and its blocks;
// the text request beside it runs on to the end.
TEST(EngineImages, AbortMidEncodeFreesEverything) {
  EngineArgs args = tiny_args("vision");
  args.max_num_batched_tokens = 16;
  auto engine = make_engine(args);
  TextBesideImage run;
  int64_t in_progress_before_abort = -1;
  uint64_t encoder_steps_before_abort = 0;
  run.on_text_token = [&](int count) {
    if (count != 3) return;
    const EngineStats s = engine->stats();
    in_progress_before_abort = s.encodes_in_progress;
    encoder_steps_before_abort = s.encoder_steps;
    engine->abort("image");
  };
  run.run(*engine, long_text_request(20),
          image_request("image", kOneImagePrompt, {test_image(20, 12, 5)}));
  EXPECT_EQ(in_progress_before_abort, 1);
  EXPECT_GE(encoder_steps_before_abort, 2u);
  EXPECT_EQ(run.image.outputs[0].finish_reason, "abort");
  EXPECT_TRUE(run.image.outputs[0].token_ids.empty());
  EXPECT_EQ(run.text.outputs[0].token_ids.size(), 20u);
  const EngineStats s = engine->stats();
  EXPECT_EQ(s.images_encoded, 0u);
  EXPECT_EQ(s.encodes_in_progress, 0);
  for (int b : s.kv_blocks_in_use) EXPECT_EQ(b, 0);
}

}  // namespace
}  // namespace gemmaserve
