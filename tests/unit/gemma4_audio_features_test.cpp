// Gemma 4's audio log-mel features against the gemma4-tiny fixture's transformers references
// (tests/data/golden/ref/audio-features/, counts from ref/audio.json): valid and padded frame
// counts, every valid value, the padding rows, soft-token counts and the 750 cap, batch padding,
// and the config parser's refusals.
#include "model/gemma4_audio_features.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/audio/audio_decode.h"
#include "model/gemma4_processor_config.h"
#include "test_support.h"

namespace gemmaserve {
namespace {

namespace fs = std::filesystem;

// ref/audio.json's cases[].audio[0] for each single-clip case.
struct RefCase {
  const char* name;
  const char* wav;
  int num_samples;
  int valid_frames;
  int padded_frames;  // input_features_shape[1]
  int soft_tokens;
  int frames_at_log_floor;
  std::array<float, 8> first8;
};

const std::vector<RefCase>& ref_cases() {
  static const std::vector<RefCase> cases = {
      {"speech_s16",
       "speech_16k_mono_s16.wav",
       27200,
       169,
       170,
       43,
       7,
       {-6.907755374908447f, -3.096195697784424f, -4.233044147491455f, -3.311898946762085f,
        -3.802032470703125f, -3.389735221862793f, -3.6555228233337402f, -3.174785852432251f}},
      {"sweep_f32",
       "sweep_16k_mono_f32.wav",
       9600,
       59,
       59,
       15,
       0,
       {-6.907755374908447f, 0.6353694796562195f, -0.5493306517601013f, 0.66949063539505f,
        0.16169045865535736f, 0.6676808595657349f, 0.3927064538002014f, 0.6374615430831909f}},
      {"stereo_s16",
       "stereo_16k_s16.wav",
       35200,
       219,
       219,
       55,
       0,
       {-6.907755374908447f, -5.454015254974365f, -6.2137770652771f, -4.968262672424316f,
        -5.385457515716553f, -4.37114953994751f, -4.621532440185547f, -4.58282995223999f}},
      {"stereo_f32",
       "stereo_16k_f32.wav",
       7200,
       44,
       45,
       11,
       0,
       {-6.907755374908447f, -1.2323895692825317f, -2.4105265140533447f, -0.666662335395813f,
        -1.173512578010559f, -0.23055969178676605f, -0.5052977800369263f, 0.18471527099609375f}},
      {"blip_1234",
       "blip_16k_mono_s16.wav",
       1234,
       7,
       7,
       2,
       0,
       {-6.907755374908447f, -0.2847999632358551f, -1.467685580253601f, -0.4821168780326843f,
        -0.9891842007637024f, -0.5551638603210449f, -0.8297490477561951f, -0.4594273269176483f}},
  };
  return cases;
}

// Measured: bit-identical to the reference (0) here. An independent float64 re-implementation
// matched it to 2.4e-7 (fixture README), so this allows other libm / FFT round-off, no more.
constexpr float kTolerance = 2e-6f;

std::vector<float> load_clip_at(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  const std::vector<std::uint8_t> bytes(std::istreambuf_iterator<char>(in), {});
  return audio::load_audio(bytes, 16000).samples;
}

std::vector<float> load_clip(const std::string& wav) {
  return load_clip_at(testing::source_dir() / "tests/data/audio" / wav);
}

std::vector<float> load_reference(const std::string& name,
                                  const fs::path& dir = testing::source_dir() /
                                                        "tests/data/golden/ref/audio-features") {
  std::ifstream in(dir / (name + ".audio0.features.f32"), std::ios::binary);
  EXPECT_TRUE(in.good()) << name;
  const std::vector<char> bytes(std::istreambuf_iterator<char>(in), {});
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

void expect_padding_zero_and_masked(const AudioFeatures& f, const std::string& what) {
  for (int t = f.num_frames; t < f.num_frames_padded; ++t) {
    EXPECT_EQ(f.mask[t], 0) << what << " frame " << t;
    for (int b = 0; b < 128; ++b) ASSERT_EQ(f.values[t * 128 + b], 0.0f) << what << " frame " << t;
  }
}

TEST(Gemma4AudioFeatures, MatchesTransformersReferences) {
  const Gemma4AudioFeatureExtractor extractor({});
  const float log_floor = static_cast<float>(std::log(1e-3));
  for (const RefCase& c : ref_cases()) {
    SCOPED_TRACE(c.name);
    const std::vector<float> samples = load_clip(c.wav);
    ASSERT_EQ(samples.size(), static_cast<size_t>(c.num_samples));
    const AudioFeatures f = extractor.extract(samples);
    EXPECT_EQ(f.num_frames, c.valid_frames);
    EXPECT_EQ(f.num_frames_padded, c.padded_frames);
    ASSERT_EQ(f.values.size(), static_cast<size_t>(c.padded_frames) * 128);
    ASSERT_EQ(f.mask.size(), static_cast<size_t>(c.padded_frames));
    EXPECT_EQ(gemma4_audio_soft_tokens(f.num_frames), c.soft_tokens);

    const std::vector<float> want = load_reference(c.name);
    ASSERT_EQ(want.size(), static_cast<size_t>(c.valid_frames) * 128);
    double max_diff = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      max_diff = std::max(max_diff, std::abs(double{f.values[i]} - want[i]));
    }
    std::cout << "[ max abs diff ] " << c.name << ": " << max_diff << "\n";
    EXPECT_LE(max_diff, kTolerance);
    for (int b = 0; b < 8; ++b) EXPECT_NEAR(f.values[b], c.first8[b], kTolerance) << b;
    EXPECT_EQ(f.values[0], log_floor);  // filter 0 is all zero at 31.25 Hz bins

    int at_floor = 0;
    for (int t = 0; t < f.num_frames; ++t) {
      EXPECT_EQ(f.mask[t], 1) << t;
      const auto row = std::span(f.values).subspan(t * 128, 128);
      at_floor += std::all_of(row.begin(), row.end(), [&](float v) { return v == log_floor; });
    }
    EXPECT_EQ(at_floor, c.frames_at_log_floor);
    expect_padding_zero_and_masked(f, c.name);
  }
}

// long_32s (512000 samples, truncated to 480000): its 1.5 MB reference stays in shared/.
TEST(Gemma4AudioFeatures, MatchesTheTruncatedLongReference) {
  GS_REQUIRE_SHARED(shared);
  const fs::path fixture = shared / "fixtures/gemma4-tiny";
  const std::vector<float> samples = load_clip_at(fixture / "media/long_32s_16k_mono_s16.wav");
  ASSERT_EQ(samples.size(), 512000u);
  const AudioFeatures f = gemma4_audio_features(samples);
  EXPECT_EQ(f.num_frames, 2999);
  EXPECT_EQ(f.num_frames_padded, 2999);
  EXPECT_EQ(gemma4_audio_soft_tokens(f.num_frames), 750);
  const std::vector<float> want = load_reference("long_32s", fixture / "ref/audio-features");
  ASSERT_EQ(want.size(), f.values.size());
  double max_diff = 0;
  int at_floor = 0;
  const float log_floor = static_cast<float>(std::log(1e-3));
  for (size_t i = 0; i < want.size(); ++i) {
    max_diff = std::max(max_diff, std::abs(double{f.values[i]} - want[i]));
  }
  for (int t = 0; t < f.num_frames; ++t) {
    const auto row = std::span(f.values).subspan(t * 128, 128);
    at_floor += std::all_of(row.begin(), row.end(), [&](float v) { return v == log_floor; });
  }
  std::cout << "[ max abs diff ] long_32s: " << max_diff << "\n";
  EXPECT_LE(max_diff, kTolerance);
  EXPECT_EQ(at_floor, 213);
}

TEST(Gemma4AudioFeatures, SoftTokenCountsAndCap) {
  EXPECT_EQ(gemma4_audio_soft_tokens(0), 0);
  EXPECT_EQ(gemma4_audio_soft_tokens(1), 1);
  EXPECT_EQ(gemma4_audio_soft_tokens(4), 1);
  EXPECT_EQ(gemma4_audio_soft_tokens(5), 2);
  EXPECT_EQ(gemma4_audio_soft_tokens(169), 43);
  EXPECT_EQ(gemma4_audio_soft_tokens(2999), 750);
  EXPECT_EQ(gemma4_audio_soft_tokens(2999, 1000), 750);
  EXPECT_EQ(gemma4_audio_soft_tokens(4000), 750);

  // 32 s of a 440 Hz sine: truncated to 480000 samples, 2999 valid frames, 750 tokens.
  std::vector<float> sine(512000);
  for (size_t i = 0; i < sine.size(); ++i) {
    sine[i] = static_cast<float>(0.5 * std::sin(2 * 3.141592653589793 * 440.0 * i / 16000));
  }
  const AudioFeatures f = gemma4_audio_features(sine);
  EXPECT_EQ(f.num_frames, 2999);
  EXPECT_EQ(f.num_frames_padded, 2999);
  EXPECT_EQ(gemma4_audio_soft_tokens(f.num_frames), 750);
  // Truncation keeps the first 480000 samples: the same features as that prefix.
  const AudioFeatures prefix = gemma4_audio_features(std::span(sine).first(480000));
  EXPECT_EQ(prefix.values, f.values);

  // Clips shorter than one frame's reach have no valid frame.
  const std::vector<float> tiny(100, 0.25f);
  const AudioFeatures t = gemma4_audio_features(tiny);
  EXPECT_EQ(t.num_frames, 0);
  EXPECT_EQ(t.num_frames_padded, 0);  // 128 padded samples + 160 < 321
}

TEST(Gemma4AudioFeatures, BatchPadsToTheLongestClip) {
  const Gemma4AudioFeatureExtractor extractor({});
  const std::vector<float> blip = load_clip("blip_16k_mono_s16.wav");
  const std::vector<float> stereo = load_clip("stereo_16k_s16.wav");
  const std::vector<float> speech = load_clip("speech_16k_mono_s16.wav");
  // two_audio_short_first: blip (7 valid) padded with stereo_s16 to 219 frames.
  const std::vector<std::span<const float>> clips = {blip, stereo, speech};
  const std::vector<AudioFeatures> batch = extractor.extract_batch(clips);
  ASSERT_EQ(batch.size(), 3u);
  const int expect_valid[] = {7, 219, 169};
  const std::vector<float>* members[] = {&blip, &stereo, &speech};
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE(i);
    const AudioFeatures& b = batch[i];
    EXPECT_EQ(b.num_frames_padded, 219);
    EXPECT_EQ(b.num_frames, expect_valid[i]);
    const AudioFeatures alone = extractor.extract(*members[i]);
    ASSERT_EQ(alone.num_frames, b.num_frames);
    // Valid frames never reach the padding, so they are the single call's bit for bit.
    EXPECT_TRUE(std::equal(alone.values.begin(), alone.values.begin() + alone.num_frames * 128,
                           b.values.begin()));
    expect_padding_zero_and_masked(b, "batch member " + std::to_string(i));
  }
  // extract(clip, longest) is the batch member.
  EXPECT_EQ(extractor.extract(blip, static_cast<std::int64_t>(stereo.size())).values,
            batch[0].values);
  const std::vector<std::int64_t> lengths = {1234, 35200, 27200};
  EXPECT_EQ(extractor.padded_length(lengths), 35200);
  const std::vector<std::int64_t> long_ones = {1234, 512000};
  EXPECT_EQ(extractor.padded_length(long_ones), 480000);
}

TEST(Gemma4AudioFeatures, ParsesTheFixtureConfig) {
  const nlohmann::json section = nlohmann::json::parse(R"({
    "feature_size": 128, "sampling_rate": 16000, "padding_value": 0.0, "padding_side": "right",
    "return_attention_mask": true, "min_frequency": 0.0, "max_frequency": 8000.0,
    "preemphasis": 0.0, "preemphasis_htk_flavor": true, "fft_overdrive": false, "dither": 0.0,
    "input_scale_factor": 1.0, "frame_length": 320, "hop_length": 160, "mel_floor": 0.001,
    "fft_length": 512, "per_bin_mean": null, "per_bin_stddev": null,
    "feature_extractor_type": "Gemma4AudioFeatureExtractor", "pad_to_multiple_of": 128,
    "max_length": 480000})");
  const Gemma4AudioFeatureOptions o = parse_gemma4_audio_feature_options(section, "cfg");
  EXPECT_EQ(o.frame_length, 320);
  EXPECT_EQ(o.hop_length, 160);
  EXPECT_EQ(o.fft_length, 512);
  EXPECT_EQ(o.feature_size, 128);
  EXPECT_EQ(o.max_length, 480000);
  EXPECT_EQ(o.pad_to_multiple_of, 128);
  EXPECT_DOUBLE_EQ(o.mel_floor, 1e-3);
  EXPECT_FALSE(o.per_bin_mean.has_value());
  const nlohmann::json overdrive = {{"fft_overdrive", true}};
  EXPECT_EQ(parse_gemma4_audio_feature_options(overdrive, "cfg").fft_length, 1024);
}

// Options without a reference file, checked against what they mean.
TEST(Gemma4AudioFeatures, ScaleAndPerBinNormalisation) {
  const std::vector<float> blip = load_clip("blip_16k_mono_s16.wav");
  std::vector<float> doubled(blip);
  for (float& v : doubled) v *= 2.0f;
  Gemma4AudioFeatureOptions scaled;
  scaled.input_scale_factor = 2.0;
  EXPECT_EQ(gemma4_audio_features(blip, scaled).values, gemma4_audio_features(doubled).values);

  Gemma4AudioFeatureOptions normalised;
  normalised.per_bin_mean = std::vector<double>(128, 1.0);
  normalised.per_bin_stddev = std::vector<double>(128, 2.0);
  const AudioFeatures plain = gemma4_audio_features(blip);
  const AudioFeatures norm = gemma4_audio_features(blip, normalised);
  for (size_t i = 0; i < plain.values.size(); ++i) {
    EXPECT_NEAR(norm.values[i], (plain.values[i] - 1.0f) / 2.0f, 1e-6f) << i;
  }
}

std::string parse_error(const std::string& json_text) {
  try {
    parse_gemma4_audio_feature_options(nlohmann::json::parse(json_text), "preprocessor.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(Gemma4AudioFeatures, RefusesSettingsItCannotApply) {
  EXPECT_EQ(parse_error(R"({"dither": 0.0001})"),
            "preprocessor.json: dither 0.0001 is not implemented: Hugging Face adds random "
            "Gaussian noise of that scale, which cannot be reproduced; only 0 is accepted");
  EXPECT_EQ(parse_error(R"({"hop_length": -160})"),
            "preprocessor.json: hop_length -160 differs from the 160 Hugging Face derives from "
            "sampling_rate, frame_length_ms, hop_length_ms and fft_overdrive (and uses instead)");
  EXPECT_EQ(parse_error(R"({"fft_length": 400})"),
            "preprocessor.json: fft_length 400 differs from the 512 Hugging Face derives from "
            "sampling_rate, frame_length_ms, hop_length_ms and fft_overdrive (and uses instead)");
  EXPECT_EQ(parse_error(R"({"hop_length_ms": -10})"),
            "preprocessor.json: hop_length_ms must be a finite number > 0, got -10");
  EXPECT_EQ(parse_error(R"({"padding_side": "left"})"),
            "preprocessor.json: padding_side \"left\" is not implemented; Gemma 4 pads clips on "
            "the right");
  EXPECT_EQ(parse_error(R"({"feature_size": 0})"),
            "preprocessor.json: feature_size must be a positive integer (at most 1048576), got 0");
  EXPECT_EQ(parse_error(R"({"mel_floor": 0})"),
            "preprocessor.json: mel_floor must be a finite number > 0, got 0");
  EXPECT_EQ(parse_error(R"({"per_bin_mean": [1, 2]})"),
            "preprocessor.json: per_bin_mean must be null or a list of feature_size (128) numbers");
  EXPECT_EQ(parse_error(R"({"feature_extractor_type": "WhisperFeatureExtractor"})"),
            "preprocessor.json: feature_extractor_type \"WhisperFeatureExtractor\" is not Gemma "
            "4's audio feature extractor");
  EXPECT_EQ(parse_error(R"([1])"), "preprocessor.json must be a JSON object");

  Gemma4AudioFeatureOptions o;
  o.fft_length = 500;
  try {
    Gemma4AudioFeatureExtractor extractor(o);
    ADD_FAILURE() << "fft_length 500 accepted";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(),
                 "audio feature extractor: fft_length 500 must be a power of two no smaller than "
                 "frame_length 320");
  }
}

}  // namespace
}  // namespace gemmaserve

namespace gemmaserve {
namespace {

void write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path) << text;
}

// Where a checkpoint keeps its extractor: processor_config.json's feature_extractor section
// first, then a flat preprocessor_config.json that is the extractor's, else the defaults.
TEST(Gemma4AudioFeatureConfig, ReadsTheCheckpointsOwnSettings) {
  testing::TempDir dir;
  EXPECT_EQ(load_gemma4_audio_feature_config(dir.path()).mel_floor, 1e-3);  // no files: defaults
  write_file(dir.path() / "preprocessor_config.json",
             R"({"image_processor_type": "Gemma4ImageProcessor", "mel_floor": 0.5})");
  EXPECT_EQ(load_gemma4_audio_feature_config(dir.path()).mel_floor, 1e-3)
      << "an image processor's flat file is not read as the extractor's";
  write_file(dir.path() / "preprocessor_config.json",
             R"({"feature_extractor_type": "Gemma4AudioFeatureExtractor", "mel_floor": 0.01})");
  EXPECT_EQ(load_gemma4_audio_feature_config(dir.path()).mel_floor, 0.01);
  write_file(dir.path() / "processor_config.json",
             R"({"feature_extractor": {"mel_floor": 0.02, "feature_size": 64}})");
  const Gemma4AudioFeatureOptions o = load_gemma4_audio_feature_config(dir.path());
  EXPECT_EQ(o.mel_floor, 0.02);
  EXPECT_EQ(o.feature_size, 64);
  write_file(dir.path() / "processor_config.json", R"({"feature_extractor": {"dither": 0.5}})");
  try {
    load_gemma4_audio_feature_config(dir.path());
    ADD_FAILURE() << "dither 0.5 was accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("processor_config.json feature_extractor: dither 0.5", 0),
              0u)
        << e.what();
  }
  const Gemma4AudioFeatureOptions fixture =
      load_gemma4_audio_feature_config(testing::source_dir() / "tests/data/golden/models/audio");
  EXPECT_EQ(fixture.feature_size, 128);
  EXPECT_EQ(fixture.hop_length, 160);
}

}  // namespace
}  // namespace gemmaserve
