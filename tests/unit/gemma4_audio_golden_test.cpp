// Golden tests of Gemma 4's audio tower (HF's Gemma4AudioModel + embed_audio) against Hugging
// Face float32: the `audio` fixture's clips decoded, through the log-mel extractor (the clips of
// one prompt together) and the tower, placed at the <|audio|> positions; last logits, every
// position's top-5 and the greedy tokens. Plus batching invariance and the config's refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/error.h"
#include "gemma4_golden_checks.h"
#include "io/audio/audio_decode.h"
#include "model/config.h"
#include "model/gemma4_audio_features.h"
#include "unified_golden_inputs.h"

namespace gemmaserve::golden {
namespace {

namespace fs = std::filesystem;

const fs::path kModel = golden_dir() / "models" / "audio";

// A fixture clip decoded to 16 kHz mono as vLLM does: tests/data/audio, else (long_32s, 1 MB)
// the shared fixture's media; nullopt when neither has it.
std::optional<std::vector<float>> decode_clip(const std::string& file) {
  const fs::path name = fs::path(file).filename();
  fs::path path = ::gemmaserve::testing::source_dir() / "tests" / "data" / "audio" / name;
  if (!fs::exists(path)) {
    const auto shared = ::gemmaserve::testing::shared_dir();
    if (!shared) return std::nullopt;
    path = *shared / "fixtures" / "gemma4-tiny" / "media" / name;
    if (!fs::exists(path)) return std::nullopt;
  }
  return audio::load_audio(read_bytes(path), 16000).samples;
}

// A prompt of the fixture with its media embedded and its placeholders expanded.
struct MediaPrompt {
  std::vector<int32_t> tokens;
  PagedRunner::ImageInputs inputs;
  std::vector<std::vector<float>> rows;  // soft tokens per media item, owned here
  std::vector<int> soft_tokens;          // per media item, prompt order
};

// Soft tokens of every clip of case `c`, the clips through the extractor in one call (HF's
// processor pads them to the longest); nullopt when a clip's file is not available.
std::optional<std::vector<std::vector<float>>> audio_rows(Gemma4Model& model,
                                                          const nlohmann::json& c) {
  std::vector<std::vector<float>> clips;
  for (const auto& a : c.at("audio")) {
    std::optional<std::vector<float>> s = decode_clip(a.at("file").get<std::string>());
    if (!s) return std::nullopt;
    clips.push_back(std::move(*s));
  }
  std::vector<std::span<const float>> spans(clips.begin(), clips.end());
  const Gemma4AudioFeatureExtractor extractor(Gemma4AudioFeatureOptions{});
  std::vector<std::vector<float>> rows;
  for (const AudioFeatures& f : extractor.extract_batch(spans)) {
    rows.emplace_back();
    model.encode_audio_features(f, &rows.back());
  }
  return rows;
}

// The processor's 8-bit patches of an image entry (the audio fixture's vision processor output).
std::vector<float> image_rows(Gemma4Model& model, const nlohmann::json& image) {
  std::vector<float> pixels;
  for (const auto& patch : image.at("patches_u8")) {
    for (const auto& v : patch) pixels.push_back(static_cast<float>(v.get<int>()) / 255.0f);
  }
  std::vector<int32_t> positions;
  for (const auto& p : image.at("image_position_ids")) {
    positions.push_back(p.at(0).get<int32_t>());
    positions.push_back(p.at(1).get<int32_t>());
  }
  std::vector<float> rows;
  model.encode_image({pixels, positions}, &rows);
  return rows;
}

std::optional<MediaPrompt> media_prompt(Gemma4Model& model, const nlohmann::json& c) {
  const ModelConfig& mc = model.config();
  const int32_t image = *mc.image_token_id, audio = *mc.audio_token_id;
  std::optional<std::vector<std::vector<float>>> clips = audio_rows(model, c);
  if (!clips) return std::nullopt;
  MediaPrompt p;
  p.rows.reserve(c.at("prompt_ids_placeholder").size());
  size_t next_image = 0, next_audio = 0;
  for (int32_t t : c.at("prompt_ids_placeholder").get<std::vector<int32_t>>()) {
    if (t != image && t != audio) {
      p.tokens.push_back(t);
      continue;
    }
    std::vector<float> rows = t == image ? image_rows(model, c.at("images").at(next_image++))
                                         : std::move((*clips).at(next_audio++));
    const auto n = static_cast<int32_t>(rows.size() / mc.text.hidden_size);
    p.tokens.push_back(t == image ? *mc.boi_token_id : *mc.boa_token_id);
    const auto first = static_cast<int32_t>(p.tokens.size());
    p.tokens.insert(p.tokens.end(), static_cast<size_t>(n), t);
    p.tokens.push_back(t == image ? *mc.eoi_token_id : *mc.eoa_token_id);
    p.rows.push_back(std::move(rows));
    p.soft_tokens.push_back(n);
    p.inputs.embeddings.push_back({first, n, p.rows.back().data()});
    if (t == image) p.inputs.blocks.push_back({first, first + n});
  }
  return p;
}

float max_abs(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  if (a.size() != b.size()) return INFINITY;
  return max_abs_diff(a.data(), b.data(), a.size());
}

struct AudioFixture {
  static constexpr const char* kName = "audio";
};
class AudioGolden : public MediaGoldenSuite<AudioFixture> {};

TEST_F(AudioGolden, ConfigHasTheAudioTower) {
  const ModelConfig& c = model_->config();
  EXPECT_EQ(c.family, ModelFamily::kGemma4);
  ASSERT_TRUE(c.audio);
  EXPECT_EQ(c.audio->hidden_size, 32);
  EXPECT_EQ(c.audio->num_attention_heads, 2);
  EXPECT_EQ(c.audio->num_hidden_layers, 2);
  EXPECT_EQ(c.audio->subsampling_conv_channels, (std::vector<int>{128, 16}));
  EXPECT_EQ(c.audio->output_proj_dims, 48);
  EXPECT_EQ(c.audio->attention_chunk_size, 12);
  EXPECT_EQ(c.audio->attention_context_left, 13);
  EXPECT_EQ(c.audio->attention_context_right, 0);
  EXPECT_DOUBLE_EQ(c.audio->gradient_clipping, 3.0);
  EXPECT_TRUE(c.audio->use_clipped_linears);
  EXPECT_TRUE(model_->accepts_audio());
  EXPECT_EQ(model_->weights().audio.layers.size(), 2u);
  EXPECT_EQ(*c.boa_token_id, 509);
  EXPECT_EQ(*c.eoa_token_id, 510);
  EXPECT_EQ(*c.audio_token_id, 511);
}

// The text cases on this checkpoint (the audio tower's tensors bound beside the decoder's).
TEST_F(AudioGolden, TextCasesMatchReference) {
  GoldenOptions opt;
  PagedRunner runner(*model_, 16, 1024);
  std::vector<RefCase> text;
  for (const auto& c : ref_->at("cases")) {
    if (c.at("kind") == "text") text.push_back(parse_case(c));
  }
  ASSERT_EQ(text.size(), 4u);
  std::vector<const RefCase*> all;
  for (const RefCase& c : text) {
    check_prefill(*model_, runner, "audio", c, opt);
    all.push_back(&c);
  }
  check_greedy(*model_, runner, "audio", all, opt);
}

// Every audio case (audio + image ones included) from its WAV files: the placeholder expansion,
// last logits, every position's top-5 and the greedy tokens.
TEST_F(AudioGolden, AudioCasesMatchReference) {
  GoldenOptions opt;
  PagedRunner runner(*model_, 16, 1024);
  int cases = 0, skipped = 0;
  for (const auto& c : ref_->at("cases")) {
    const std::string kind = c.at("kind").get<std::string>();
    if (kind != "audio" && kind != "audio+image") continue;
    SCOPED_TRACE(c.at("name").get<std::string>());
    const std::optional<MediaPrompt> p = media_prompt(*model_, c);
    if (!p) {
      std::printf("SKIP %s: clip not available (long_32s lives in shared/)\n",
                  c.at("name").get<std::string>().c_str());
      ++skipped;
      continue;
    }
    const RefCase r = parse_case(c);
    // The reference's own float32 round-off (its distance to float64) is at most 5.9e-5 at the
    // last position and 7.4e-4 at media positions: allow twice it where it exceeds our floor.
    const auto& roundoff = c.at("reference_f32_vs_f64_max_abs_logit_diff");
    float worst_position = 0.0f;
    for (const auto& [key, v] : roundoff.items()) {
      if (v.is_number()) worst_position = std::max(worst_position, v.get<float>());
    }
    opt.tol = std::max(1e-4f, 2.0f * roundoff.at("last_prompt_position").get<float>());
    opt.position_tol = std::max(3e-4f, 2.0f * worst_position);
    EXPECT_EQ(p->tokens, r.prompt) << "placeholder expansion";
    EXPECT_EQ(p->soft_tokens, c.at("num_soft_tokens").get<std::vector<int>>());
    check_prefill(*model_, runner, "audio", r, opt, &p->inputs);
    check_greedy(*model_, runner, "audio", {&r}, opt, {p->inputs});
    ++cases;
  }
  EXPECT_EQ(cases + skipped, 12);
  EXPECT_GE(cases, 10);
}

// A clip padded in a batch (the extractor's one call) gives its soft tokens alone, and the
// sample-level entry point (HF's default extractor) gives the same rows as the features.
TEST_F(AudioGolden, BatchedClipEqualsAlone) {
  const Gemma4AudioFeatureExtractor extractor(Gemma4AudioFeatureOptions{});
  const std::vector<float> blip = *decode_clip("blip_16k_mono_s16.wav");
  const std::vector<float> stereo = *decode_clip("stereo_16k_s16.wav");
  const std::vector<std::span<const float>> both = {blip, stereo};
  const std::vector<AudioFeatures> batch = extractor.extract_batch(both);
  ASSERT_EQ(batch.size(), 2u);
  EXPECT_EQ(batch[0].num_frames_padded, batch[1].num_frames_padded);
  for (size_t i = 0; i < 2; ++i) {
    std::vector<float> batched, alone, from_samples;
    model_->encode_audio_features(batch[i], &batched);
    model_->encode_audio_features(extractor.extract(both[i]), &alone);
    model_->encode_audio(both[i], &from_samples);
    const float diff = max_abs(batched, alone);
    std::printf("AUDIO batched-vs-alone max|d| clip %zu = %.2e\n", i, static_cast<double>(diff));
    EXPECT_LE(diff, 1e-5f);
    EXPECT_EQ(from_samples, alone);
    EXPECT_EQ(static_cast<int64_t>(alone.size()),
              model_->audio_soft_tokens(static_cast<int64_t>(both[i].size())) *
                  model_->config().text.hidden_size);
  }
  EXPECT_EQ(model_->audio_soft_tokens(1234), 2);
  EXPECT_THROW(model_->audio_soft_tokens(100), InputError);  // no feature frame
}

// The resumable encode (what the engine slices between steps) gives encode_audio's rows bit for
// bit however the slices fall: one stage at a time, or several.
TEST_F(AudioGolden, SlicedEncodeEqualsWhole) {
  const std::vector<float> speech = *decode_clip("speech_16k_mono_s16.wav");
  std::vector<float> whole;
  model_->encode_audio(speech, &whole);
  for (const int64_t budget : {int64_t{1}, int64_t{150}}) {
    std::unique_ptr<AudioEncodeJob> job = model_->begin_audio_encode(speech);
    const int64_t cost = job->remaining_cost();
    int64_t spent = 0, calls = 0;
    while (!job->done()) {
      spent += model_->advance_audio_encode(*job, budget);
      ++calls;
    }
    EXPECT_EQ(spent, cost) << budget;
    EXPECT_EQ(job->remaining_cost(), 0);
    EXPECT_GT(calls, 2) << "the encode runs in slices at budget " << budget;
    std::vector<float> sliced;
    model_->finish_audio_encode(*job, &sliced);
    EXPECT_EQ(sliced, whole) << budget;
  }
}

// --quantization q8_0 quantizes the tower's matrices too (as the vision tower's), and its soft
// tokens stay close to the float tower's.
TEST_F(AudioGolden, QuantizedTowerStaysClose) {
  WeightLoadOptions options;
  options.quantization = DType::kQ8_0;
  ModelWeights weights = load_model_weights(kModel, nullptr, options);
  for (WeightMatrix* m : weights.audio.linear_matrices()) {
    if (m->cols % 32 == 0) {
      EXPECT_EQ(m->dtype, DType::kQ8_0);
    }
  }
  Gemma4Model quantized(std::move(weights), std::make_shared<ThreadPool>(2));
  const std::vector<float> speech = *decode_clip("speech_16k_mono_s16.wav");
  std::vector<float> exact, q8;
  model_->encode_audio(speech, &exact);
  quantized.encode_audio(speech, &q8);
  ASSERT_EQ(q8.size(), exact.size());
  double err = 0, norm = 0;
  for (size_t i = 0; i < q8.size(); ++i) {
    err += (q8[i] - exact[i]) * double(q8[i] - exact[i]);
    norm += exact[i] * double(exact[i]);
  }
  std::printf("AUDIO q8_0 tower relative rms error = %.2e\n", std::sqrt(err / norm));
  EXPECT_LT(std::sqrt(err / norm), 0.05);
  EXPECT_GT(err, 0.0) << "the quantized tower computed with other weights";
}

// audio_config values the tower cannot run are refused, naming the field.
TEST(AudioConfig, RefusesWhatTheTowerCannotRun) {
  const nlohmann::json base = read_json(kModel / "config.json");
  EXPECT_NO_THROW(parse_model_config(base, "config.json"));
  const auto refused = [&](const char* field, const nlohmann::json& value) {
    nlohmann::json c = base;
    c["audio_config"][field] = value;
    try {
      parse_model_config(c, "config.json");
      ADD_FAILURE() << field << " = " << value.dump() << " was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("audio_config.") + field), std::string::npos)
          << e.what();
    }
  };
  refused("model_type", "gemma4_vision");
  refused("hidden_act", "gelu");
  refused("attention_context_right", 1);
  refused("subsampling_conv_channels", nlohmann::json::array({128}));
  refused("num_attention_heads", 3);
  refused("attention_logit_cap", 0.0);
  refused("hidden_size", 0);
  // HF's defaults for absent fields (E2B's values).
  nlohmann::json minimal = base;
  minimal["audio_config"] = nlohmann::json::object();
  const ModelConfig m = parse_model_config(minimal, "config.json");
  ASSERT_TRUE(m.audio);
  EXPECT_EQ(m.audio->hidden_size, 1024);
  EXPECT_EQ(m.audio->num_hidden_layers, 12);
  EXPECT_EQ(m.audio->subsampling_conv_channels, (std::vector<int>{128, 32}));
  EXPECT_EQ(m.audio->output_proj_dims, 1536);
  EXPECT_DOUBLE_EQ(m.audio->gradient_clipping, 1e10);
}

}  // namespace
}  // namespace gemmaserve::golden
