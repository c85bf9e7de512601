// Where a clip's packets lie, read back with libavformat (see video_test_clips.h).
#include "video_test_clips.h"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
}

#include <fstream>
#include <memory>
#include <stdexcept>

#include "test_support.h"

namespace gemmaserve::testing {

std::vector<PacketSpan> video_packets(const std::vector<std::uint8_t>& clip,
                                      const std::string& extension) {
  const TempDir dir;
  const std::string path = (dir.path() / ("clip" + extension)).string();
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(clip.data()), static_cast<std::streamsize>(clip.size()));
  AVFormatContext* raw_input = nullptr;
  if (avformat_open_input(&raw_input, path.c_str(), nullptr, nullptr) < 0) {
    throw std::runtime_error("video_packets: the clip does not open");
  }
  struct InputCloser {
    void operator()(AVFormatContext* context) const { avformat_close_input(&context); }
  };
  struct PacketFreer {
    void operator()(AVPacket* packet) const { av_packet_free(&packet); }
  };
  std::unique_ptr<AVFormatContext, InputCloser> input(raw_input);
  const int stream = av_find_best_stream(input.get(), AVMEDIA_TYPE_VIDEO, -1, -1, nullptr, 0);
  std::vector<PacketSpan> packets;
  std::unique_ptr<AVPacket, PacketFreer> packet(av_packet_alloc());
  while (av_read_frame(input.get(), packet.get()) >= 0) {
    if (packet->stream_index == stream) packets.push_back({packet->pos, packet->size});
    av_packet_unref(packet.get());
  }
  return packets;
}

}  // namespace gemmaserve::testing
