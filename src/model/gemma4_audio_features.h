// Gemma 4's audio preprocessing, as Hugging Face's Gemma4AudioFeatureExtractor computes it: log-mel
// features of 16 kHz mono float32 clips (truncate, right-pad, semicausal frames, periodic Hann,
// |rfft|, HTK mel filters, log(mel + floor)) and the clip's soft-token count. Pure functions over
// samples: no model, no request. The options are the feature extractor's fields, HF's defaults.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace gemmaserve {

struct Gemma4AudioFeatureOptions {
  int feature_size = 128;  // mel filters per frame
  int sampling_rate = 16000;
  // HF derives these from frame_length_ms / hop_length_ms (20 / 10 ms) and fft_overdrive;
  // parse_gemma4_audio_feature_options does the same and checks saved values against them.
  int frame_length = 320;
  int hop_length = 160;
  int fft_length = 512;  // a power of two, at least frame_length
  double min_frequency = 0.0;
  double max_frequency = 8000.0;
  double mel_floor = 1e-3;
  double padding_value = 0.0;  // only reaches frames that are masked (and zeroed)
  int pad_to_multiple_of = 128;
  std::int64_t max_length = 480000;  // samples kept (rounded up to pad_to_multiple_of)
  double preemphasis = 0.0;
  bool preemphasis_htk_flavor = true;
  double input_scale_factor = 1.0;
  std::optional<std::vector<double>> per_bin_mean;    // feature_size values, subtracted
  std::optional<std::vector<double>> per_bin_stddev;  // feature_size values, divided by
};

struct AudioFeatures {
  int num_frames = 0;         // valid frames: every sample of their window is real audio
  int num_frames_padded = 0;  // frames of the padded clip (the batch's common length)
  // [num_frames_padded, feature_size]; masked frames are HF's value * 0 (a signed zero).
  std::vector<float> values;
  std::vector<std::uint8_t> mask;  // num_frames_padded; 1 for the first num_frames
};

// The window and mel filter bank, computed once per options; extract() may run concurrently.
class Gemma4AudioFeatureExtractor {
 public:
  // Throws InputError for options it cannot apply (non-power-of-two fft_length, bad sizes).
  explicit Gemma4AudioFeatureExtractor(const Gemma4AudioFeatureOptions& options);

  const Gemma4AudioFeatureOptions& options() const { return options_; }
  // [fft_length / 2 + 1, feature_size], HF's mel_filter_bank(norm=None, mel_scale="htk").
  const std::vector<double>& mel_filters() const { return mel_filters_; }

  // Samples a clip of `num_samples` keeps: truncation to max_length (rounded up to a multiple).
  std::int64_t truncated_length(std::int64_t num_samples) const;
  // Valid frames of a clip of `num_samples` samples: those whose window ends on real audio.
  std::int64_t valid_frames(std::int64_t num_samples) const;
  // The common padded length of clips processed together: the longest truncated clip rounded up
  // to pad_to_multiple_of.
  std::int64_t padded_length(std::span<const std::int64_t> num_samples) const;

  // One clip; `pad_to_samples` > 0 pads it as a member of a batch whose longest clip has that
  // many samples (see padded_length), 0 pads it alone.
  AudioFeatures extract(std::span<const float> samples, std::int64_t pad_to_samples = 0) const;
  // Several clips in one call, as HF's extractor pads a list: all to the longest.
  std::vector<AudioFeatures> extract_batch(std::span<const std::span<const float>> clips) const;

 private:
  Gemma4AudioFeatureOptions options_;
  std::vector<float> window_;        // periodic Hann, frame_length, float32 as HF keeps it
  std::vector<double> mel_filters_;  // bins x feature_size
  std::vector<double> twiddle_re_;   // fft_length / 2 roots of unity
  std::vector<double> twiddle_im_;
};

// Throws InputError for options the extractor cannot apply (sizes, a non-power-of-two
// fft_length, mel_floor <= 0, per-bin lists of the wrong size).
void validate_gemma4_audio_feature_options(const Gemma4AudioFeatureOptions& options);

// Gemma4AudioFeatureExtractor(options).extract(samples, pad_to_samples).
AudioFeatures gemma4_audio_features(std::span<const float> samples,
                                    const Gemma4AudioFeatureOptions& options = {},
                                    std::int64_t pad_to_samples = 0);

// Soft tokens of a clip with `num_valid_frames` frames: two stride-2 convolutions, capped at
// audio_seq_length, min(ceil(ceil(F / 2) / 2), 750).
int gemma4_audio_soft_tokens(int num_valid_frames, int audio_seq_length = 750);

// A feature extractor section (preprocessor_config.json, or processor_config.json's
// "feature_extractor"); `where` names it in errors. Every field is applied, checked or refused
// with an InputError naming it (dither > 0, being random, is refused). Implemented in
// gemma4_audio_feature_config.cpp.
Gemma4AudioFeatureOptions parse_gemma4_audio_feature_options(const nlohmann::json& section,
                                                             const std::string& where);

}  // namespace gemmaserve
