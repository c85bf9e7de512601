// Video decoding (MP4 / MOV: H.264, H.265; WebM / MKV: VP8, VP9, AV1; animated GIF; animated
// WebP) to the RGB frames vLLM hands Hugging Face's processor: its OpenCV loader
// (OpenCVVideoBackend.load_bytes) with its frame sampling, OpenCV's frame count and fps, and the
// pixels OpenCV's FFmpeg backend gives. Every failure is an InputError (a 400 at the API).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "io/image/image_decode.h"

namespace gemmaserve::video {

// vLLM's --media-io-kwargs '{"video": {"num_frames": N, "fps": F}}'.
struct VideoSampling {
  int num_frames = 32;  // -1: every frame
  double fps = -1;      // > 0: at most floor(duration * fps) frames
};

// Checked from the headers before any frame is decoded, and again on each decoded frame.
struct VideoDecodeLimits {
  std::size_t max_bytes = 256u << 20;      // the encoded file
  double max_duration_seconds = 600;       // from the container/stream header
  std::int64_t max_total_frames = 100000;  // frames in the clip (header or demuxed count)
  std::uint64_t max_pixels_per_frame = 4096ull * 4096;  // width x height from the header
  std::uint64_t max_decoded_bytes = 1ull << 30;         // sampled frames x width x height x 3
  // Threads one decode may use; 0: FFmpeg's choice (one per core). Frames are identical either way.
  int decoder_threads = 0;
};

struct VideoInfo {
  std::string container;  // e.g. "mov,mp4,m4a,3gp,3g2,mj2", "matroska,webm", "gif", "webp"
  std::string codec;      // e.g. "h264", "hevc", "vp8", "vp9", "av1", "gif", "webp"
  int width = 0;          // as displayed (after the rotation)
  int height = 0;
  int rotation = 0;               // clockwise degrees, 0 / 90 / 180 / 270 (display matrix)
  std::int64_t total_frames = 0;  // OpenCV's CAP_PROP_FRAME_COUNT (the true count where it guesses)
  double fps = 0;                 // OpenCV's CAP_PROP_FPS
  double duration = 0;            // total_frames / fps, 0 without an fps (vLLM's "duration")
};

// How decode_video reached the frames (for logs and tests).
struct VideoDecodeStats {
  std::int64_t frames_decoded = 0;  // frames the decoder produced, sampled or not
  int seeks = 0;                    // jumps to a keyframe ahead
};

struct DecodedVideo {
  VideoInfo info;
  std::vector<image::RgbImage> frames;      // row-major RGB, info.width x info.height each
  std::vector<std::int64_t> frame_indices;  // index of each frame in the clip (frames_indices)
  VideoDecodeStats stats;
};

// vLLM's rule: n = total; if num_frames > 0: n = min(num_frames, total); if fps > 0:
// n = min(n, floor(duration * fps)); n = max(1, n); n == total -> 0..total-1, else
// np.linspace(0, total - 1, n, dtype=int) (numpy's float64 arithmetic: i * ((total-1)/(n-1)),
// last = total-1, truncated). Empty when total_frames <= 0.
std::vector<std::int64_t> sample_frame_indices(std::int64_t total_frames, double duration,
                                               const VideoSampling& sampling);

// The clip's VideoInfo from its headers (and, where they lack a frame count, its packets),
// after every header limit; nothing is decoded.
VideoInfo probe_video(std::span<const std::uint8_t> bytes, const VideoDecodeLimits& limits = {});

// The sampled frames, each as OpenCV converts it (FFmpeg's swscale to BGR24, SWS_BICUBIC, at the
// stream's size, then R and B swapped) and turned by the display matrix's rotation.
DecodedVideo decode_video(std::span<const std::uint8_t> bytes, const VideoSampling& sampling = {},
                          const VideoDecodeLimits& limits = {});

// True when the bytes start like a container decode_video reads (MP4 / MOV other than HEIF or
// AVIF stills, Matroska / WebM, GIF, animated WebP): for callers sniffing data. Any GIF counts;
// a still WebP does not (it is an image).
bool looks_like_video(std::span<const std::uint8_t> bytes);

}  // namespace gemmaserve::video
