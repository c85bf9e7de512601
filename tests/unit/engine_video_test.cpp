// Videos through the Engine on the tiny vision checkpoint (with the demo model's tokenizer for
// the frames' timestamps): Hugging Face's Gemma4Processor layout, frames encoded exactly as
// images at the video budget (the image path fed the same frames gives the same bits), limits
// and errors, and batch invariance with videos in the batch (alone, together, cached, chunked).
#include <gtest/gtest.h>

#include <algorithm>

#include "core/error.h"
#include "engine_image_hand_run.h"
#include "engine_test_support.h"
#include "tokenizer/tokenizer.h"

namespace gemmaserve {
namespace {

using enginetest::expect_same_outputs;
using enginetest::make_engine;
using enginetest::run_alone;
using enginetest::run_together;
using enginetest::RunResult;
using enginetest::tiny_args;
using testing::input_error_of;

constexpr int32_t kVideo = 508;  // the fixture's <|video|>
constexpr int32_t kImage = 507;
constexpr int32_t kBoi = 505;
constexpr int32_t kEoi = 506;

EngineArgs video_args() {
  EngineArgs a = tiny_args("vision");
  a.tokenizer = (testing::source_dir() / "models/gemma4-demo").string();
  return a;
}

// Frames of one size, each its own pixels; timestamps as vLLM computes them (index / fps).
PromptVideo test_video(int frames, int width, int height, uint32_t seed, double fps = 2.0) {
  PromptVideo v;
  for (int i = 0; i < frames; ++i) {
    v.frames.push_back(enginetest::seeded_image(width, height, seed * 100 + i).rgb);
    v.timestamps.push_back(i * 31 / fps);  // every 31st frame: minutes appear past 120 s
  }
  return v;
}

EngineRequest video_request(const std::string& id, std::vector<int32_t> prompt,
                            std::vector<PromptVideo> videos, int max_tokens = 6) {
  EngineRequest r;
  r.request_id = id;
  r.prompt_token_ids = std::move(prompt);
  r.videos = std::move(videos);
  r.params.temperature = 0;
  r.params.max_tokens = max_tokens;
  r.params.ignore_eos = true;
  r.params.logprobs = 0;
  return r;
}

const std::vector<int32_t> kVideoPrompt = {2, 178, 199, kVideo, 214, 410, 106};

std::vector<int32_t> encode(const Engine& engine, const std::string& text) {
  return engine.tokenizer()->encode(text, /*add_special=*/false, /*parse_special=*/false);
}

TEST(EngineVideo, LayoutIsTheProcessorsTimestampedFrames) {
  auto engine = make_engine(video_args());
  const PromptVideo video = test_video(3, 20, 12, 1, /*fps=*/0.25);  // 0 s, 124 s, 248 s
  const ExpandedPrompt out = engine->expand_media_placeholders(kVideoPrompt, {}, {}, {&video, 1});
  std::vector<int32_t> want = {2, 178, 199};
  const char* stamps[] = {"00:00 ", " 02:04 ", " 04:08 "};
  for (const char* stamp : stamps) {
    const std::vector<int32_t> text = encode(*engine, stamp);
    want.insert(want.end(), text.begin(), text.end());
    want.push_back(kBoi);
    want.insert(want.end(), 60, kVideo);  // a 20x12 frame at 70 soft tokens: 60
    want.push_back(kEoi);
  }
  want.insert(want.end(), {214, 410, 106});
  EXPECT_EQ(out.token_ids, want);
  ASSERT_EQ(out.placeholders.size(), 3u);
  for (const ImagePlaceholder& p : out.placeholders) {
    EXPECT_EQ(p.length, 60);
    EXPECT_EQ(out.token_ids[p.offset - 1], kBoi);
  }
  // Python's int(t // 60), int(t % 60), zero-padded: 59.999 s is 00:59, 3600 s is 60:00.
  PromptVideo edges = test_video(2, 20, 12, 2);
  edges.timestamps = {59.999, 3600.0};
  const std::vector<int32_t> ids = engine->video_frame_ids(edges);
  const std::vector<int32_t> first = encode(*engine, "00:59 ");
  const std::vector<int32_t> second = encode(*engine, " 60:00 ");
  EXPECT_TRUE(std::equal(first.begin(), first.end(), ids.begin()));
  EXPECT_TRUE(std::search(ids.begin(), ids.end(), second.begin(), second.end()) != ids.end());
}

// vLLM feeds a video's frames through the image processor at 70 soft tokens and the same tower;
// only the placeholder id differs, and it is replaced by the rows. The unified 12B layout embeds
// frames with its encoder-free patch embedder the same way.
void expect_frames_give_the_image_paths_bits(const std::string& model) {
  EngineArgs args = video_args();
  args.model = enginetest::golden_model(model).string();
  auto engine = make_engine(args);
  const PromptVideo video = test_video(3, 20, 12, 3);
  const RunResult with_video =
      run_together(*engine, {video_request("v", kVideoPrompt, {video}, 8)});
  // The same prompt with each frame an image: the expanded layout with bare <|image|> tokens.
  std::vector<int32_t> as_images = {2, 178, 199};
  for (size_t i = 0; i < video.frames.size(); ++i) {
    char stamp[16];
    std::snprintf(stamp, sizeof stamp, "%s00:%02d ", i == 0 ? "" : " ",
                  static_cast<int>(video.timestamps[i]));
    const std::vector<int32_t> text = encode(*engine, stamp);
    as_images.insert(as_images.end(), text.begin(), text.end());
    as_images.push_back(kImage);
  }
  as_images.insert(as_images.end(), {214, 410, 106});
  EngineRequest images = video_request("i", as_images, {}, 8);
  images.images = Engine::video_frames_as_images(video);
  const RunResult with_images = run_together(*engine, {images});
  expect_same_outputs(with_video.outputs[0], with_images.outputs[0], model + ": video vs images");
  std::vector<int32_t> video_ids = with_video.outputs[0].prompt_token_ids;
  std::replace(video_ids.begin(), video_ids.end(), kVideo, kImage);
  EXPECT_EQ(video_ids, with_images.outputs[0].prompt_token_ids);
  EXPECT_GT(video_ids.size(), kVideoPrompt.size() + 3 * 20) << model;
}

TEST(EngineVideo, FramesGiveTheImagePathsBits) {
  expect_frames_give_the_image_paths_bits("vision");
}

TEST(EngineVideo, UnifiedModelEmbedsFramesAsItsImages) {
  expect_frames_give_the_image_paths_bits("unified");
}

TEST(EngineVideo, LimitsAndErrors) {
  EngineArgs args = video_args();
  args.limit_mm_per_prompt = {{"video", 1}};
  auto engine = make_engine(args);
  const PromptVideo v = test_video(2, 16, 16, 4);
  const std::vector<int32_t> two = {2, kVideo, 5, kVideo};
  EXPECT_EQ(input_error_of([&] {
              const std::vector<PromptVideo> both = {v, v};
              engine->expand_media_placeholders(two, {}, {}, both);
            }),
            "At most 1 video(s) may be provided in one prompt. Set `--limit-mm-per-prompt` to "
            "increase this limit.");
  EXPECT_EQ(input_error_of([&] {
              engine->expand_media_placeholders(two, {}, {}, {&v, 1});
            }),
            "Found 2 <|video|> tokens in the prompt but 1 video was given; the prompt needs one "
            "<|video|> per video, in order");
  EXPECT_EQ(input_error_of([&] { engine->expand_media_placeholders(two, {}, {}, {}); }),
            "Found 2 <|video|> tokens in the prompt but 0 videos were given; the prompt needs one "
            "<|video|> per video, in order");
  const std::vector<int32_t> expanded = {2, kBoi, kVideo, kEoi};
  EXPECT_EQ(input_error_of([&] {
              engine->expand_media_placeholders(expanded, {}, {}, {&v, 1});
            }),
            "the prompt already holds an expanded video (<|image> followed by <|video|>); put one "
            "bare <|video|> per video and let the engine expand it");
  PromptVideo empty;
  EXPECT_EQ(input_error_of([&] { engine->video_frame_ids(empty); }),
            "a video must hold at least one frame");
  PromptVideo unstamped = v;
  unstamped.timestamps.pop_back();
  EXPECT_EQ(input_error_of([&] { engine->video_frame_ids(unstamped); }),
            "a video has 2 frames but 1 timestamps; give one per frame");
  PromptVideo negative = v;
  negative.timestamps[1] = -1;
  EXPECT_EQ(input_error_of([&] { engine->video_frame_ids(negative); }),
            "a video frame's timestamp must be a non-negative number of seconds");
  PromptVideo bad_budget = v;
  bad_budget.max_soft_tokens = 100;
  EXPECT_EQ(input_error_of([&] { engine->video_frame_ids(bad_budget); }),
            "`max_soft_tokens` must be one of (70, 140, 280, 560, 1120), got 100.");

  // Without a tokenizer there is no text for the timestamps.
  auto bare = make_engine(tiny_args("vision"));
  EXPECT_EQ(input_error_of([&] { bare->video_frame_ids(v); }),
            "video input needs a tokenizer for its frames' timestamps, and " +
                tiny_args("vision").model + " has none (pass --tokenizer)");
  // A text-only model refuses videos.
  auto text_only = make_engine(tiny_args("dense"));
  EXPECT_EQ(input_error_of([&] { text_only->video_frame_ids(v); }),
            "This model does not accept video input: " + tiny_args("dense").model +
                " has no vision encoder.");
}

// A video request's tokens and logprobs do not depend on what else runs, on cached frames, on
// the encoder cache, nor on where chunks end (frames are never split).
TEST(EngineVideo, BatchInvariantAloneTogetherCachedAndChunked) {
  EngineArgs args = video_args();
  auto engine = make_engine(args);
  std::vector<EngineRequest> requests;
  requests.push_back(video_request("v0", kVideoPrompt, {test_video(3, 20, 12, 5)}));
  requests.push_back(video_request("v1", {2, 44, kVideo, 45, kVideo, 9},
                                   {test_video(2, 16, 16, 6), test_video(4, 24, 8, 7)}));
  SamplingParams base;
  base.temperature = 0;
  base.logprobs = 0;
  base.ignore_eos = true;
  for (EngineRequest& r : enginetest::varied_requests(3, 500, 11, base, "t")) {
    requests.push_back(std::move(r));
  }
  const RunResult alone = run_alone(*engine, requests);
  const RunResult together = run_together(*engine, requests);  // frames now cached twice over
  EngineArgs chunked = args;
  chunked.max_num_batched_tokens = 64;  // a frame is 60-64 rows: chunks stop before frames
  chunked.enable_prefix_caching = false;
  chunked.mm_processor_cache_gb = 0;
  auto small = make_engine(chunked);
  const RunResult in_chunks = run_together(*small, requests);
  for (size_t i = 0; i < requests.size(); ++i) {
    expect_same_outputs(alone.outputs[i], together.outputs[i],
                        requests[i].request_id + " together");
    expect_same_outputs(alone.outputs[i], in_chunks.outputs[i],
                        requests[i].request_id + " chunked");
  }
  EXPECT_GT(engine->stats().prefix_cache_hits, 0u);
}

}  // namespace
}  // namespace gemmaserve
