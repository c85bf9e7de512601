// The frame count a RIFF WAVE header promises (its data chunk), read here because libsndfile
// quietly shortens it to the bytes present, which would hide a truncated upload (internal to
// src/io/audio/).
#pragma once

#include <cstdint>
#include <optional>
#include <span>

namespace gemmaserve::audio::detail {

// data chunk size / block align of a little-endian RIFF WAVE file; nullopt when the bytes are not
// one, the chunks end before "data", or the size is a streaming writer's placeholder.
std::optional<std::int64_t> riff_wave_promised_frames(std::span<const std::uint8_t> bytes);

}  // namespace gemmaserve::audio::detail
