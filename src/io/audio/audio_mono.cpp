// np.mean over channels in float32: numpy's add-reduce along the contiguous channel row.
#include "io/audio/audio_mono.h"

namespace gemmaserve::audio {

namespace {

// numpy's pairwise summation of a contiguous float32 row: below 8 values a running sum from 0,
// up to 128 eight partial sums combined as a tree then the tail, beyond that halves (cut at a
// multiple of 8) summed recursively. Matters from 8 channels on, where rounding would differ.
float pairwise_sum(const float* x, int n) {
  if (n < 8) {
    float sum = 0.0f;
    for (int i = 0; i < n; ++i) sum += x[i];
    return sum;
  }
  if (n <= 128) {
    float r[8];
    for (int j = 0; j < 8; ++j) r[j] = x[j];
    int i = 8;
    for (; i < n - n % 8; i += 8) {
      for (int j = 0; j < 8; ++j) r[j] += x[i + j];
    }
    float sum = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) sum += x[i];
    return sum;
  }
  int half = n / 2;
  half -= half % 8;
  return pairwise_sum(x, half) + pairwise_sum(x + half, n - half);
}

}  // namespace

void append_mono(std::span<const float> interleaved, int channels, std::vector<float>& mono) {
  if (channels == 1) {
    mono.insert(mono.end(), interleaved.begin(), interleaved.end());
    return;
  }
  const std::size_t frames = interleaved.size() / static_cast<std::size_t>(channels);
  const auto count = static_cast<float>(channels);
  for (std::size_t f = 0; f < frames; ++f) {
    // The reduction starts from the identity 0 (so -0 + -0 gives +0, as numpy does), then divides.
    const float sum = 0.0f + pairwise_sum(interleaved.data() + f * channels, channels);
    mono.push_back(sum / count);
  }
}

}  // namespace gemmaserve::audio
