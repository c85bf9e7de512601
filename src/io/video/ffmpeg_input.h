// libavformat over the request's bytes: a read-only, seekable in-memory AVIOContext, owners for
// FFmpeg's objects, and FFmpeg's log routed to gemmaserve's (internal to src/io/video/).
#pragma once

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libswscale/swscale.h>
}

#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace gemmaserve::video::detail {

struct FormatContextCloser {
  void operator()(AVFormatContext* context) const { avformat_close_input(&context); }
};
struct CodecContextFreer {
  void operator()(AVCodecContext* context) const { avcodec_free_context(&context); }
};
struct CodecParametersFreer {
  void operator()(AVCodecParameters* parameters) const { avcodec_parameters_free(&parameters); }
};
struct FrameFreer {
  void operator()(AVFrame* frame) const { av_frame_free(&frame); }
};
struct PacketFreer {
  void operator()(AVPacket* packet) const { av_packet_free(&packet); }
};
struct SwsContextFreer {
  void operator()(SwsContext* context) const { sws_freeContext(context); }
};
struct AvioContextFreer {
  void operator()(AVIOContext* context) const;
};
using CodecContextPtr = std::unique_ptr<AVCodecContext, CodecContextFreer>;
using CodecParametersPtr = std::unique_ptr<AVCodecParameters, CodecParametersFreer>;
using FramePtr = std::unique_ptr<AVFrame, FrameFreer>;
using PacketPtr = std::unique_ptr<AVPacket, PacketFreer>;
using SwsContextPtr = std::unique_ptr<SwsContext, SwsContextFreer>;

// FFmpeg's message for an AVERROR code.
std::string ffmpeg_error_text(int error);

// The bytes opened with one demuxer (no probing of others) and nothing but them: every other
// file or URL a demuxer asks for (a MOV data reference) is refused. Throws InputError.
class FfmpegInput {
 public:
  // `demuxer`: libavformat's short name ("mov", "matroska", "gif"); `container` names it in
  // messages ("MP4/MOV"). `decoder_whitelist`: the decoders libavformat may open while probing
  // (its codec_whitelist option).
  FfmpegInput(std::span<const std::uint8_t> bytes, const char* demuxer, const char* container,
              const std::string& decoder_whitelist);
  FfmpegInput(const FfmpegInput&) = delete;
  FfmpegInput& operator=(const FfmpegInput&) = delete;

  AVFormatContext* format() const { return format_.get(); }

 private:
  // Where the AVIOContext reads; its address is the callbacks' opaque, so the object never moves.
  struct MemoryReader {
    std::span<const std::uint8_t> bytes;
    std::int64_t position = 0;
  };
  MemoryReader reader_;
  std::unique_ptr<AVIOContext, AvioContextFreer> avio_;  // outlives the format context
  std::unique_ptr<AVFormatContext, FormatContextCloser> format_;
};

}  // namespace gemmaserve::video::detail
