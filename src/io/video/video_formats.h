// The containers behind decode_video and the checks they share (internal to src/io/video/).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "io/video/video_decode.h"

namespace gemmaserve::video::detail {

enum class VideoContainer { kMp4, kMatroska, kAvi, kGif, kWebp };

// The container named by the leading bytes, or nullopt (HEIF / AVIF stills and still WebP too).
std::optional<VideoContainer> detect_container(std::span<const std::uint8_t> bytes);

// How decode_video reaches sampled frames past the decoder's position.
enum class FrameAccess {
  kSeekToKeyframes,  // jump to the keyframe before a sampled frame when one lies ahead
  kSequential,       // decode every frame up to the last sampled one (OpenCV's grab loop)
};

// probe_video / decode_video with the container known and the byte limits checked.
VideoInfo probe_ffmpeg(std::span<const std::uint8_t> bytes, VideoContainer container,
                       const VideoDecodeLimits& limits);
DecodedVideo decode_ffmpeg(std::span<const std::uint8_t> bytes, VideoContainer container,
                           const VideoSampling& sampling, const VideoDecodeLimits& limits,
                           FrameAccess access);
VideoInfo probe_webp(std::span<const std::uint8_t> bytes, const VideoDecodeLimits& limits);
DecodedVideo decode_webp(std::span<const std::uint8_t> bytes, const VideoSampling& sampling,
                         const VideoDecodeLimits& limits);

// decode_video choosing how frames are reached: tests check both ways give the same frames.
DecodedVideo decode_video_with(std::span<const std::uint8_t> bytes, const VideoSampling& sampling,
                               const VideoDecodeLimits& limits, FrameAccess access);

// The refusals, each an InputError with the message the API returns.
[[noreturn]] void throw_unreadable(const std::string& what);  // "Could not read the video: what"
[[noreturn]] void throw_frame_failed(std::int64_t index, std::int64_t total_frames);
void check_pixels(std::int64_t width, std::int64_t height, const VideoDecodeLimits& limits);
void check_duration(double seconds, const VideoDecodeLimits& limits);
// `at_least`: the count stopped at the limit ("more than").
void check_total_frames(std::int64_t frames, const VideoDecodeLimits& limits,
                        bool at_least = false);
void check_decoded_bytes(std::size_t frames, int width, int height,
                         const VideoDecodeLimits& limits);

}  // namespace gemmaserve::video::detail
