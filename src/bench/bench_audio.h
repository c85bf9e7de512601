// `gemmaserve bench audio`: what a 30 s audio clip costs a running server: the audio tower's
// encode time (each run and the median) and the inter-token gaps of decode streams before and
// while an audio request is served (see its --help).
#pragma once

#include <string>
#include <vector>

namespace gemmaserve {

int run_bench_audio(const std::vector<std::string>& args);

// The bench's clip: `seconds` of 16 kHz mono, three tones (one swept slowly) and seeded noise,
// peak below 1; the same samples on every run and machine.
std::vector<float> bench_audio_clip(double seconds);

}  // namespace gemmaserve
