// Audio decoding (WAV PCM/float, FLAC, OGG Vorbis, Opus, MP3 and the rest libsndfile reads) to
// mono float32, with the samples vLLM hands Hugging Face's feature extractor: soundfile's float
// read, channels averaged as np.mean does, then resampled (audio_resample.h). Every failure with
// the bytes is an InputError (a 400 at the API).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace gemmaserve::audio {

// A clip longer than AudioDecodeLimits::max_seconds (an InputError like the others).
class AudioTooLongError : public InputError {
 public:
  using InputError::InputError;
};

struct AudioDecodeLimits {
  // OpenAI's limit for an uploaded audio file (its transcription endpoint).
  std::size_t max_bytes = 25u << 20;
  // Checked against the header's frame count, before any sample buffer is allocated.
  double max_seconds = 30 * 60;
  // What sets max_seconds, named in the refusal ("--max-audio-seconds"); empty: nothing named.
  std::string max_seconds_source;
};

struct DecodedAudio {
  std::string format;   // the container as python-soundfile names it: "WAV", "FLAC", "OGG", "MP3"
  std::string subtype;  // the encoding, likewise: "PCM_16", "FLOAT", "VORBIS", "OPUS", ...
  int channels = 0;     // in the file; samples are always mono
  int source_sample_rate = 0;      // the file's rate
  std::int64_t source_frames = 0;  // frames decoded from the file
  int sample_rate = 0;             // the rate of `samples`
  std::vector<float> samples;      // mono float32
};

// The container named by the leading bytes ("WAV", "FLAC", "OGG", "MP3", ...), or "" when the
// bytes start like none of them; only a hint for messages and logs, decode_audio does not use it.
std::string_view sniff_audio_format(std::span<const std::uint8_t> bytes);

// Decodes through libsndfile at the file's own rate and down-mixes to mono.
DecodedAudio decode_audio(std::span<const std::uint8_t> bytes,
                          const AudioDecodeLimits& limits = {});

// InputError ("audio is S s long; the limit is L s") when `frames` at `sample_rate` last longer
// than limits.max_seconds: decode_audio's check, also for samples given already decoded.
void check_audio_length(std::int64_t frames, int sample_rate, const AudioDecodeLimits& limits = {});

// decode_audio, then resampled to target_rate (the form the models take: 16 kHz).
DecodedAudio load_audio(std::span<const std::uint8_t> bytes, int target_rate = 16000,
                        const AudioDecodeLimits& limits = {});

}  // namespace gemmaserve::audio
