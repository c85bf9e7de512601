// Synthetic video clips for the video benchmark and tests: a moving pattern encoded with
// libavcodec and muxed with libavformat through a temporary file (MP4's faststart reopens it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gemmaserve::video {

struct ClipSpec {
  std::string encoder = "libx264";  // libavcodec's encoder name
  std::string muxer = "mp4";        // libavformat's muxer name
  int width = 64;
  int height = 48;
  int frames = 10;
  int rate_num = 24;  // frames per second, as a fraction
  int rate_den = 1;
  int rotation = 0;                 // clockwise degrees, written as the stream's display matrix
  int keyframe_interval = 0;        // 0: the encoder's default
  int b_frames = -1;                // -1: the encoder's default
  bool faststart = false;           // MP4 / MOV: the moov box ahead of the media data
  std::string pixel_format;         // "": yuv420p (rgb8 for GIF)
  std::vector<int> frame_times_ms;  // a variable rate: each frame's time (frames entries)
  int encoder_threads = 1;          // 0: the encoder's choice
};

// The clip's bytes; a failure of the encoder or muxer is a std::runtime_error naming the clip.
std::vector<std::uint8_t> make_synthetic_clip(const ClipSpec& spec);

// Frame `index` of the pattern, interleaved RGB: gradients shifting with the index and a square
// moving across, so every frame differs from its neighbours.
std::vector<std::uint8_t> synthetic_frame(int width, int height, int index);

// A short name for messages: "libx264/mp4 64x48 10 frames at 24/1 fps".
std::string describe(const ClipSpec& spec);

}  // namespace gemmaserve::video
