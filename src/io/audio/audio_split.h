// Long audio cut into pieces a model hears one at a time (Gemma 4's processor keeps 30 s of a
// clip). The cut rule is vLLM's split_audio: near each max-length mark, at the start of the
// quietest window in the last stretch before it, so words are rarely cut in two. The pieces are
// contiguous and cover the clip.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

namespace gemmaserve::audio {

struct SampleRange {
  std::size_t begin = 0;
  std::size_t end = 0;  // one past the last sample
  std::size_t size() const { return end - begin; }
};

struct AudioSplitOptions {
  std::size_t max_samples = 30 * 16000;  // the longest piece (vLLM's max_audio_clip_s at 16 kHz)
  std::size_t search_samples = 16000;    // where a cut may fall: the last second before the mark
  std::size_t window = 1600;             // RMS window (vLLM's min_energy_split_window_size)
};

// The pieces of a clip of samples.size() samples: one when it fits in max_samples, else cut as
// above (each piece at most max_samples, the last the rest). Empty for an empty clip.
// std::invalid_argument when max_samples is 0 or search_samples >= max_samples.
std::vector<SampleRange> split_audio(std::span<const float> samples,
                                     const AudioSplitOptions& options = {});

}  // namespace gemmaserve::audio
