// Down-mix of interleaved float32 frames to mono, bit for bit as vLLM gets it: librosa.to_mono and
// vLLM's own loaders call np.mean over the channel axis of soundfile's (frames, channels) array.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

namespace gemmaserve::audio {

// Appends one mono sample per frame of `interleaved` (channels values per frame) to `mono`.
// One channel is copied as is (numpy leaves a 1-D array alone).
void append_mono(std::span<const float> interleaved, int channels, std::vector<float>& mono);

}  // namespace gemmaserve::audio
