// See gemma4_audio_features.h; Hugging Face's feature_extraction_gemma4.py (and audio_utils.py's
// mel_filter_bank / window_function) is the reference. Samples and window stay float32 as there;
// the FFT, mel projection and log run in float64 (the reference's matmul and log are float64).
#include "model/gemma4_audio_features.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>
#include <utility>

#include "core/error.h"

namespace gemmaserve {
namespace {

bool is_power_of_two(std::int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

std::int64_t round_up(std::int64_t v, std::int64_t multiple) {
  return (v + multiple - 1) / multiple * multiple;
}

}  // namespace

void validate_gemma4_audio_feature_options(const Gemma4AudioFeatureOptions& o) {
  const auto bad = [](const std::string& what) {
    throw InputError("audio feature extractor: " + what);
  };
  if (o.feature_size <= 0 || o.sampling_rate <= 0 || o.frame_length < 2 || o.hop_length <= 0) {
    bad("feature_size, sampling_rate and hop_length must be positive and frame_length at least 2");
  }
  if (!is_power_of_two(o.fft_length) || o.fft_length < o.frame_length) {
    bad("fft_length " + std::to_string(o.fft_length) +
        " must be a power of two no smaller than frame_length " + std::to_string(o.frame_length));
  }
  if (!(o.min_frequency >= 0 && o.min_frequency < o.max_frequency) ||
      !std::isfinite(o.max_frequency)) {
    bad("needs 0 <= min_frequency < max_frequency");
  }
  if (!(o.mel_floor > 0) || !std::isfinite(o.mel_floor)) bad("mel_floor must be positive");
  if (o.pad_to_multiple_of <= 0 || o.max_length <= 0) {
    bad("pad_to_multiple_of and max_length must be positive");
  }
  if (!(o.preemphasis >= 0 && o.preemphasis <= 1)) bad("preemphasis must be within [0, 1]");
  if (!std::isfinite(o.input_scale_factor) || !std::isfinite(o.padding_value)) {
    bad("input_scale_factor and padding_value must be finite");
  }
  for (const auto* bins : {&o.per_bin_mean, &o.per_bin_stddev}) {
    if (bins->has_value() && (*bins)->size() != static_cast<size_t>(o.feature_size)) {
      bad("per_bin_mean and per_bin_stddev must hold feature_size values");
    }
  }
  if (o.per_bin_stddev.has_value() &&
      std::any_of(o.per_bin_stddev->begin(), o.per_bin_stddev->end(),
                  [](double s) { return s == 0 || !std::isfinite(s); })) {
    bad("per_bin_stddev must be non-zero finite values");
  }
}

namespace {

double hertz_to_mel_htk(double hz) { return 2595.0 * std::log10(1.0 + hz / 700.0); }
double mel_to_hertz_htk(double mel) { return 700.0 * (std::pow(10.0, mel / 2595.0) - 1.0); }

// numpy.linspace(start, stop, num): start + i * step, the last value exactly stop.
std::vector<double> linspace(double start, double stop, int num) {
  std::vector<double> v(num);
  const double step = (stop - start) / (num - 1);
  for (int i = 0; i < num; ++i) v[i] = i * step + start;
  v[num - 1] = stop;
  return v;
}

// In-place iterative radix-2 FFT (forward, e^{-2 pi i k n / N}) of a power-of-two length.
void fft_in_place(std::vector<double>& re, std::vector<double>& im,
                  const std::vector<double>& tw_re, const std::vector<double>& tw_im) {
  const size_t n = re.size();
  for (size_t i = 1, j = 0; i < n; ++i) {
    size_t bit = n >> 1;
    for (; j & bit; bit >>= 1) j ^= bit;
    j |= bit;
    if (i < j) {
      std::swap(re[i], re[j]);
      std::swap(im[i], im[j]);
    }
  }
  for (size_t len = 2; len <= n; len <<= 1) {
    const size_t half = len / 2;
    const size_t stride = n / len;
    for (size_t start = 0; start < n; start += len) {
      for (size_t k = 0; k < half; ++k) {
        const double wr = tw_re[k * stride];
        const double wi = tw_im[k * stride];
        const size_t a = start + k;
        const size_t b = a + half;
        const double xr = re[b] * wr - im[b] * wi;
        const double xi = re[b] * wi + im[b] * wr;
        re[b] = re[a] - xr;
        im[b] = im[a] - xi;
        re[a] += xr;
        im[a] += xi;
      }
    }
  }
}

}  // namespace

Gemma4AudioFeatureExtractor::Gemma4AudioFeatureExtractor(const Gemma4AudioFeatureOptions& options)
    : options_(options) {
  validate_gemma4_audio_feature_options(options_);
  const Gemma4AudioFeatureOptions& o = options_;
  // np.hanning(frame_length + 1)[:-1] (periodic), numpy's form 0.5 + 0.5 cos(pi n / (M - 1)).
  const int m = o.frame_length + 1;
  window_.resize(o.frame_length);
  for (int k = 0; k < o.frame_length; ++k) {
    const double n = 1 - m + 2.0 * k;
    window_[k] = static_cast<float>(0.5 + 0.5 * std::cos(std::numbers::pi * n / (m - 1)));
  }
  // Triangular filters between HTK-mel-spaced edges, on the rfft bins' frequencies.
  const int bins = o.fft_length / 2 + 1;
  const int filters = o.feature_size;
  std::vector<double> edges =
      linspace(hertz_to_mel_htk(o.min_frequency), hertz_to_mel_htk(o.max_frequency), filters + 2);
  for (double& e : edges) e = mel_to_hertz_htk(e);
  const std::vector<double> bin_hz = linspace(0, o.sampling_rate / 2, bins);
  mel_filters_.assign(static_cast<size_t>(bins) * filters, 0.0);
  for (int k = 0; k < bins; ++k) {
    for (int f = 0; f < filters; ++f) {
      const double down = (bin_hz[k] - edges[f]) / (edges[f + 1] - edges[f]);
      const double up = (edges[f + 2] - bin_hz[k]) / (edges[f + 2] - edges[f + 1]);
      mel_filters_[static_cast<size_t>(k) * filters + f] = std::max(0.0, std::min(down, up));
    }
  }
  const int half = o.fft_length / 2;
  twiddle_re_.resize(half);
  twiddle_im_.resize(half);
  for (int k = 0; k < half; ++k) {
    const double angle = -2.0 * std::numbers::pi * k / o.fft_length;
    twiddle_re_[k] = std::cos(angle);
    twiddle_im_[k] = std::sin(angle);
  }
}

std::int64_t Gemma4AudioFeatureExtractor::truncated_length(std::int64_t num_samples) const {
  return std::min(num_samples, round_up(options_.max_length, options_.pad_to_multiple_of));
}

std::int64_t Gemma4AudioFeatureExtractor::valid_frames(std::int64_t num_samples) const {
  const std::int64_t n = truncated_length(num_samples);
  // A frame is valid when its last sample, at i * hop + frame_length, is real audio.
  const std::int64_t last_offset = options_.frame_length - options_.frame_length / 2;
  return n > last_offset ? (n - last_offset - 1) / options_.hop_length + 1 : 0;
}

std::int64_t Gemma4AudioFeatureExtractor::padded_length(
    std::span<const std::int64_t> num_samples) const {
  std::int64_t longest = 0;
  for (const std::int64_t n : num_samples) longest = std::max(longest, truncated_length(n));
  return round_up(longest, options_.pad_to_multiple_of);
}

AudioFeatures Gemma4AudioFeatureExtractor::extract(std::span<const float> samples,
                                                   std::int64_t pad_to_samples) const {
  const Gemma4AudioFeatureOptions& o = options_;
  const std::int64_t n = truncated_length(static_cast<std::int64_t>(samples.size()));
  const std::int64_t lengths[] = {n, pad_to_samples};
  const std::int64_t padded = padded_length(lengths);

  // The padded clip scaled in float32, after frame_length / 2 zeros (semicausal padding).
  const std::int64_t left = o.frame_length / 2;
  std::vector<float> wave(static_cast<size_t>(left + padded), 0.0f);
  const float scale = static_cast<float>(o.input_scale_factor);
  const float pad_value = static_cast<float>(o.padding_value);
  for (std::int64_t i = 0; i < padded; ++i) {
    const float v = i < n ? samples[i] : pad_value;
    wave[left + i] = o.input_scale_factor != 1.0 ? v * scale : v;
  }

  // Frames of frame_length + 1 samples (the extra one feeds preemphasis) every hop_length.
  const std::int64_t span = o.frame_length + 1;
  const std::int64_t total = static_cast<std::int64_t>(wave.size());
  const std::int64_t frames = total >= span ? (total - span) / o.hop_length + 1 : 0;
  const std::int64_t valid = std::min(frames, valid_frames(n));

  AudioFeatures out;
  out.num_frames = static_cast<int>(valid);
  out.num_frames_padded = static_cast<int>(frames);
  out.values.assign(static_cast<size_t>(frames) * o.feature_size, 0.0f);
  out.mask.assign(static_cast<size_t>(frames), 0);

  const int bins = o.fft_length / 2 + 1;
  const float pre = static_cast<float>(o.preemphasis);
  const float pre_first = static_cast<float>(1.0 - o.preemphasis);
  std::vector<float> frame(o.frame_length);
  std::vector<double> re(o.fft_length), im(o.fft_length), magnitude(bins);
  for (std::int64_t t = 0; t < frames; ++t) {
    const float* x = wave.data() + t * o.hop_length;
    if (o.preemphasis <= 0.0) {
      std::copy(x, x + o.frame_length, frame.begin());
    } else if (o.preemphasis_htk_flavor) {
      frame[0] = x[0] * pre_first;
      for (int k = 1; k < o.frame_length; ++k) frame[k] = x[k] - pre * x[k - 1];
    } else {
      for (int k = 0; k < o.frame_length; ++k) frame[k] = x[k + 1] - pre * x[k];
    }
    std::fill(re.begin(), re.end(), 0.0);
    std::fill(im.begin(), im.end(), 0.0);
    for (int k = 0; k < o.frame_length; ++k) re[k] = frame[k] * window_[k];  // float32 product
    fft_in_place(re, im, twiddle_re_, twiddle_im_);
    for (int k = 0; k < bins; ++k) magnitude[k] = std::hypot(re[k], im[k]);

    float* row = out.values.data() + t * o.feature_size;
    // HF returns log_mel * mask: a masked frame becomes a zero with its value's sign.
    const float keep = t < valid ? 1.0f : 0.0f;
    for (int f = 0; f < o.feature_size; ++f) {
      double mel = 0.0;
      for (int k = 0; k < bins; ++k) {
        mel += magnitude[k] * mel_filters_[static_cast<size_t>(k) * o.feature_size + f];
      }
      double v = std::log(mel + o.mel_floor);
      if (o.per_bin_mean) v -= (*o.per_bin_mean)[f];
      if (o.per_bin_stddev) v /= (*o.per_bin_stddev)[f];
      row[f] = static_cast<float>(v) * keep;
    }
    out.mask[t] = t < valid ? 1 : 0;
  }
  return out;
}

std::vector<AudioFeatures> Gemma4AudioFeatureExtractor::extract_batch(
    std::span<const std::span<const float>> clips) const {
  std::int64_t longest = 0;
  for (const auto& clip : clips) longest = std::max<std::int64_t>(longest, clip.size());
  std::vector<AudioFeatures> out;
  out.reserve(clips.size());
  for (const auto& clip : clips) out.push_back(extract(clip, longest));
  return out;
}

AudioFeatures gemma4_audio_features(std::span<const float> samples,
                                    const Gemma4AudioFeatureOptions& options,
                                    std::int64_t pad_to_samples) {
  return Gemma4AudioFeatureExtractor(options).extract(samples, pad_to_samples);
}

int gemma4_audio_soft_tokens(int num_valid_frames, int audio_seq_length) {
  if (num_valid_frames <= 0) return 0;
  const int after_first = (num_valid_frames + 1) / 2;  // ceil(F / 2)
  return std::min((after_first + 1) / 2, audio_seq_length);
}

}  // namespace gemmaserve
