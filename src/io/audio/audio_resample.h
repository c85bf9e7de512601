// Sample-rate conversion of mono float32 audio with libsoxr, as librosa.resample does by default
// (res_type "soxr_hq": python-soxr's HQ recipe, the length fixed to ceil(n * to / from)), which
// is how vLLM brought non-16 kHz audio to Gemma's feature extractor.
#pragma once

#include <span>
#include <vector>

namespace gemmaserve::audio {

// The samples at to_rate. Equal rates return the samples unchanged (no filtering), as librosa and
// vLLM do. Non-positive rates are an InputError.
std::vector<float> resample_audio(std::span<const float> samples, int from_rate, int to_rate);

}  // namespace gemmaserve::audio
