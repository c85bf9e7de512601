#include "io/audio/audio_split.h"

#include <cmath>
#include <limits>
#include <stdexcept>

namespace gemmaserve::audio {
namespace {

// Start of the first window of [begin, end) whose RMS is strictly the lowest (vLLM's
// find_split_point, which steps whole windows and leaves out one ending exactly at `end`).
std::size_t quietest_window(std::span<const float> samples, std::size_t begin, std::size_t end,
                            std::size_t window) {
  double lowest = std::numeric_limits<double>::infinity();
  std::size_t at = 0;
  for (std::size_t k = 0; k + window < end - begin; k += window) {
    double sum = 0;
    for (std::size_t j = 0; j < window; ++j) {
      const double v = samples[begin + k + j];
      sum += v * v;
    }
    const double rms = std::sqrt(sum / static_cast<double>(window));
    if (rms < lowest) {
      lowest = rms;
      at = k;
    }
  }
  return begin + at;
}

}  // namespace

std::vector<SampleRange> split_audio(std::span<const float> samples,
                                     const AudioSplitOptions& options) {
  if (options.max_samples == 0 || options.search_samples >= options.max_samples) {
    throw std::invalid_argument("split_audio: the search stretch must be shorter than a piece");
  }
  std::vector<SampleRange> pieces;
  const std::size_t n = samples.size();
  std::size_t i = 0;
  while (i < n) {
    if (n - i <= options.max_samples) {
      pieces.push_back({i, n});
      break;
    }
    const std::size_t mark = i + options.max_samples;
    const std::size_t cut =
        quietest_window(samples, mark - options.search_samples, mark, options.window);
    pieces.push_back({i, cut});
    i = cut;
  }
  return pieces;
}

}  // namespace gemmaserve::audio
