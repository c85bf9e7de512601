// Synthetic video clips for the video tests: the library's moving pattern (io/video/
// synthetic_clip.h, which bench video encodes too) and where a clip's packets lie.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/video/synthetic_clip.h"

namespace gemmaserve::testing {

using video::ClipSpec;
using video::describe;

// The clip's bytes; a failure of the encoder or muxer is a test failure (std::runtime_error).
inline std::vector<std::uint8_t> make_test_clip(const ClipSpec& spec) {
  return video::make_synthetic_clip(spec);
}

// Frame `index` of the pattern, interleaved RGB.
inline std::vector<std::uint8_t> test_pattern(int width, int height, int index) {
  return video::synthetic_frame(width, height, index);
}

// Where each packet of the clip's first video stream lies in its bytes, in decode order.
struct PacketSpan {
  std::int64_t offset = 0;
  int size = 0;
};
std::vector<PacketSpan> video_packets(const std::vector<std::uint8_t>& clip,
                                      const std::string& extension);

}  // namespace gemmaserve::testing
