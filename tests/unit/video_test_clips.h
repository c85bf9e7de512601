// Synthetic video clips for the video tests: a moving pattern encoded with libavcodec and muxed
// with libavformat (a temporary file, which MP4's faststart needs to rewrite itself).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gemmaserve::testing {

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
};

// The clip's bytes; a failure of the encoder or muxer is a test failure (std::runtime_error).
std::vector<std::uint8_t> make_test_clip(const ClipSpec& spec);

// Frame `index` of the pattern, interleaved RGB: gradients shifting with the index and a square
// moving across, so every frame differs from its neighbours.
std::vector<std::uint8_t> test_pattern(int width, int height, int index);

// Where each packet of the clip's first video stream lies in its bytes, in decode order.
struct PacketSpan {
  std::int64_t offset = 0;
  int size = 0;
};
std::vector<PacketSpan> video_packets(const std::vector<std::uint8_t>& clip,
                                      const std::string& extension);

// A short name for messages: "libx264/mp4 64x48 10 frames at 24/1 fps".
std::string describe(const ClipSpec& spec);

}  // namespace gemmaserve::testing
