// The unified Gemma 4 (12B layout) through the Engine on its tiny fixture: images and audio
// clips from the fixture's files go through the engine's own expansion, scheduling (chunked
// prefill, batching with other requests) and encoders, and give HF's greedy tokens; audio
// limits and refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "core/error.h"
#include "engine_test_support.h"
#include "gemma4_golden_checks.h"
#include "io/audio/audio_decode.h"
#include "io/audio/audio_split.h"
#include "io/image/image_decode.h"
#include "unified_golden_inputs.h"

namespace gemmaserve {
namespace {

using enginetest::make_engine;
using enginetest::run_together;
using enginetest::tiny_args;
using testing::input_error_of;

constexpr int32_t kImage = 507, kAudio = 511, kBoa = 509;

// The reference of a fixture model ("unified", or "audio": the E2B-style audio tower).
const nlohmann::json& reference(const std::string& model = "unified") {
  static std::map<std::string, nlohmann::json> refs;
  auto it = refs.find(model);
  if (it == refs.end()) {
    it = refs.emplace(model, golden::read_json(golden::golden_dir() / "ref" / (model + ".json")))
             .first;
  }
  return it->second;
}

const nlohmann::json& ref_case(const std::string& name, const std::string& model = "unified") {
  for (const auto& c : reference(model).at("cases")) {
    if (c.at("name") == name) return c;
  }
  throw std::runtime_error("no case " + name);
}

PromptAudio wav_clip(const std::string& file) {
  const std::vector<uint8_t> bytes =
      golden::read_bytes(::gemmaserve::testing::source_dir() / "tests/data/audio" /
                         std::filesystem::path(file).filename());
  return PromptAudio{audio::load_audio(bytes, 16000).samples};
}

PromptImage png_image(const std::string& file) {
  const std::vector<uint8_t> bytes =
      golden::read_bytes(golden::golden_dir() / "media" / std::filesystem::path(file).filename());
  image::DecodeOptions decode;
  decode.alpha = image::AlphaHandling::kDrop;  // as the reference's processor got them
  return PromptImage{image::decode_image(bytes, decode), std::nullopt};
}

// A fixture case as a request: its placeholder prompt, its media files, greedy decoding.
EngineRequest case_request(const std::string& name, const std::string& model = "unified") {
  const nlohmann::json& c = ref_case(name, model);
  EngineRequest r;
  r.request_id = name;
  r.prompt_token_ids = c.at("prompt_ids_placeholder").get<std::vector<int32_t>>();
  for (const auto& im : c.value("images", nlohmann::json::array())) {
    r.images.push_back(png_image(im.at("file")));
  }
  for (const auto& a : c.value("audio", nlohmann::json::array())) {
    r.audios.push_back(wav_clip(a.at("file")));
  }
  r.params.temperature = 0;
  r.params.ignore_eos = true;
  r.params.max_tokens = 16;
  return r;
}

// Greedy tokens up to the reference's first near-tie (margin < 1e-3).
void expect_reference_tokens(const RequestOutput& out, const std::string& name,
                             const std::string& model = "unified") {
  const golden::RefCase ref = golden::parse_case(ref_case(name, model));
  EXPECT_EQ(out.prompt_token_ids, ref.prompt) << name << ": the engine's expansion";
  const size_t n = std::min(golden::decisive_steps(ref), out.outputs[0].token_ids.size());
  ASSERT_GT(n, 0u) << name;
  const std::vector<int32_t> got(out.outputs[0].token_ids.begin(),
                                 out.outputs[0].token_ids.begin() + n);
  const std::vector<int32_t> want(ref.greedy.begin(), ref.greedy.begin() + n);
  EXPECT_EQ(got, want) << name;
}

const std::vector<std::string> kMixed = {"short",       "image_audio",     "audio_sweep_f32",
                                         "rgb_160x120", "two_images",      "audio_image",
                                         "audio_blip",  "audio_stereo_f32"};

TEST(EngineUnified, MixedRequestsTogetherGiveTheReferenceTokens) {
  EngineArgs args = tiny_args("unified");
  args.kv_cache_dtype = "f32";       // the reference is float32 throughout
  args.max_num_batched_tokens = 96;  // chunked prefill: clips and images split the prompts
  auto engine = make_engine(args);
  std::vector<EngineRequest> requests;
  for (const std::string& name : kMixed) requests.push_back(case_request(name));
  const enginetest::RunResult run = run_together(*engine, std::move(requests));
  for (size_t i = 0; i < kMixed.size(); ++i) expect_reference_tokens(run.outputs[i], kMixed[i]);
  EXPECT_GT(engine->stats().images_encoded, 0u);
}

// An audio clip is causal, so a chunk may end inside it: the budget of 16 tokens cuts the
// 300-token clip of audio_sweep_f32 into steps and the tokens stay the reference's.
TEST(EngineUnified, SmallStepBudget) {
  EngineArgs args = tiny_args("unified");
  args.kv_cache_dtype = "f32";  // the reference is float32 throughout
  args.max_num_batched_tokens = 16;
  auto engine = make_engine(args);
  const enginetest::RunResult run = run_together(*engine, {case_request("audio_sweep_f32")});
  expect_reference_tokens(run.outputs[0], "audio_sweep_f32");
}

// The E2B-style audio tower through the same engine path: log-mel features, the tower in one
// unit of encoder work, its soft tokens at the placeholders; two clips in one prompt and a
// clip in a batch with others give the reference's greedy tokens.
TEST(EngineAudioTower, FixtureCasesGiveTheReferenceTokens) {
  EngineArgs args = tiny_args("audio");
  args.kv_cache_dtype = "f32";
  args.max_num_batched_tokens = 32;
  auto engine = make_engine(args);
  ASSERT_TRUE(engine->has_audio());
  const std::vector<std::string> cases = {"speech_s16", "sweep_f32", "stereo_s16", "two_audio",
                                          "blip_1234"};
  std::vector<EngineRequest> requests;
  for (const std::string& name : cases) requests.push_back(case_request(name, "audio"));
  const enginetest::RunResult run = run_together(*engine, std::move(requests));
  for (size_t i = 0; i < cases.size(); ++i) {
    expect_reference_tokens(run.outputs[i], cases[i], "audio");
  }
}

// A clip over 30 s is heard in pieces (io/audio's split_audio), each its own <|audio>...<audio|>
// span: the long clip and its pieces given as separate clips are the same request. Over
// --max-audio-seconds a clip is refused; a placeholder mismatch is told in the clips given.
TEST(EngineAudioTower, LongClipIsHeardInPieces) {
  EngineArgs args = tiny_args("audio");  // 25 soft tokens a second, as E2B
  args.kv_cache_dtype = "f32";
  args.max_model_len = 2048;
  args.max_audio_seconds = 60;
  auto engine = make_engine(args);
  auto tone = [](size_t n) {
    std::vector<float> s(n);
    for (size_t i = 0; i < n; ++i) {
      const double t = static_cast<double>(i) / 16000;
      s[i] = static_cast<float>(0.3 * std::sin(1382.3 * t) * (0.5 + 0.5 * std::sin(1.885 * t)));
    }
    return s;
  };
  const std::vector<float> samples = tone(50 * 16000);
  const std::vector<audio::SampleRange> pieces = audio::split_audio(samples);
  ASSERT_EQ(pieces.size(), 2u);
  EngineRequest whole;
  whole.request_id = "whole";
  whole.prompt_token_ids = {2, 10, kAudio, 11};
  whole.audios.push_back(PromptAudio{samples});
  whole.params.temperature = 0;
  whole.params.ignore_eos = true;
  whole.params.max_tokens = 4;
  EngineRequest split = whole;
  split.request_id = "split";
  split.prompt_token_ids = {2, 10, kAudio, kAudio, 11};
  split.audios.clear();
  for (const audio::SampleRange& p : pieces) {
    split.audios.push_back(
        PromptAudio{std::vector<float>(samples.begin() + p.begin, samples.begin() + p.end)});
  }
  const ExpandedPrompt e =
      engine->expand_media_placeholders(whole.prompt_token_ids, {}, whole.audios);
  ASSERT_EQ(e.placeholders.size(), 2u);
  EXPECT_EQ(e.placeholders[0].length, engine->audio_soft_tokens(pieces[0].size()));
  EXPECT_EQ(e.placeholders[1].length, engine->audio_soft_tokens(pieces[1].size()));
  const enginetest::RunResult run = enginetest::run_alone(*engine, {whole, split});
  EXPECT_EQ(run.outputs[0].prompt_token_ids, run.outputs[1].prompt_token_ids);
  EXPECT_EQ(run.outputs[0].prompt_token_ids, e.token_ids);
  EXPECT_EQ(run.outputs[0].outputs[0].token_ids, run.outputs[1].outputs[0].token_ids);

  EngineRequest too_long = whole;
  too_long.audios[0].samples = tone(61 * 16000);
  EXPECT_EQ(input_error_of([&] { engine->add_request(too_long, nullptr); }),
            "an audio clip of 61.0 s is longer than --max-audio-seconds (60 s)");
  EngineRequest mismatch = whole;
  mismatch.prompt_token_ids.push_back(kAudio);
  EXPECT_EQ(input_error_of([&] { engine->add_request(mismatch, nullptr); }),
            "Found 2 <|audio|> tokens in the prompt but 1 audio clip was given; the prompt needs "
            "one <|audio|> per audio clip, in order");
  EXPECT_EQ(engine->stats().num_waiting, 0);
}

// Batch invariance with audio: each clip's request gives bitwise the same tokens and logprobs
// alone, among the others, with prefix-cache and encoder-cache hits, and in 7-token chunks.
TEST(EngineAudioTower, BatchInvariantAloneTogetherCachedAndChunked) {
  EngineArgs args = tiny_args("audio");
  args.kv_cache_dtype = "f32";
  std::vector<EngineRequest> requests;
  for (const char* name : {"speech_s16", "sweep_f32", "stereo_s16", "two_audio", "blip_1234"}) {
    EngineRequest r = case_request(name, "audio");
    r.params.logprobs = 3;
    r.params.max_tokens = 8;
    requests.push_back(std::move(r));
  }
  args.enable_prefix_caching = false;
  const enginetest::RunResult alone = enginetest::run_alone(*make_engine(args), requests);
  args.enable_prefix_caching = true;
  auto engine = make_engine(args);
  const enginetest::RunResult together = run_together(*engine, requests);
  const enginetest::RunResult cached = run_together(*engine, requests);
  EXPECT_GT(engine->stats().prefix_cache_hits, 0u);
  EXPECT_LT(together.steps, alone.steps) << "the requests shared steps";
  args.long_prefill_token_threshold = 7;
  const enginetest::RunResult chunked = run_together(*make_engine(args), requests);
  for (size_t i = 0; i < requests.size(); ++i) {
    const std::string& id = requests[i].request_id;
    enginetest::expect_same_outputs(alone.outputs[i], together.outputs[i], "together " + id);
    enginetest::expect_same_outputs(alone.outputs[i], cached.outputs[i], "cached " + id);
    enginetest::expect_same_outputs(alone.outputs[i], chunked.outputs[i], "chunked " + id);
  }
}

TEST(EngineUnified, AudioLimitsAndErrors) {
  EngineArgs args = tiny_args("unified");
  args.kv_cache_dtype = "f32";  // the reference is float32 throughout
  args.limit_mm_per_prompt = {{"audio", 1}};
  auto engine = make_engine(args);
  EngineRequest two = case_request("two_audio");
  EXPECT_EQ(input_error_of([&] { engine->add_request(two, nullptr); }),
            "At most 1 audio(s) may be provided in one prompt. Set `--limit-mm-per-prompt` to "
            "increase this limit.");
  EngineRequest missing = case_request("audio_blip");
  missing.audios.clear();
  missing.audios.push_back(wav_clip("blip_16k_mono_s16.wav"));
  missing.prompt_token_ids.push_back(kAudio);
  EXPECT_EQ(input_error_of([&] { engine->add_request(missing, nullptr); }),
            "Found 2 <|audio|> tokens in the prompt but 1 audio clip was given; the prompt needs "
            "one <|audio|> per audio clip, in order");
  EngineRequest expanded = case_request("audio_blip");
  expanded.prompt_token_ids = {2, kBoa, kAudio, 510};
  EXPECT_EQ(input_error_of([&] { engine->add_request(expanded, nullptr); }),
            "the prompt already holds an expanded audio clip (<|audio> followed by <|audio|>); "
            "put one bare <|audio|> per audio clip and let the engine expand it");
  EngineRequest empty = case_request("audio_blip");
  empty.audios[0].samples.clear();
  EXPECT_EQ(input_error_of([&] { engine->add_request(empty, nullptr); }),
            "an audio clip must hold at least one sample");
  EXPECT_EQ(engine->stats().num_waiting, 0);

  const EngineArgs vision = tiny_args("vision");
  auto no_audio = make_engine(vision);
  EngineRequest clip;
  clip.request_id = "c";
  clip.prompt_token_ids = {2, 10, kAudio};
  clip.audios.push_back(wav_clip("blip_16k_mono_s16.wav"));
  EXPECT_EQ(input_error_of([&] { no_audio->add_request(clip, nullptr); }),
            "This model does not accept audio input: " + vision.model + " has no audio embedder.");
  // An image placeholder without an image is refused as on the other models.
  EngineRequest image = case_request("rgb_72x56");
  image.images.clear();
  EXPECT_EQ(input_error_of([&] { engine->add_request(image, nullptr); }),
            "Found 1 <|image|> token in the prompt but 0 images were given; the prompt needs one "
            "<|image|> per image, in order");
  (void)kImage;
}

}  // namespace
}  // namespace gemmaserve
