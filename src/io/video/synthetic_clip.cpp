// libavcodec / libavformat encoding of the synthetic pattern (see synthetic_clip.h).
#include "io/video/synthetic_clip.h"

extern "C" {
#include <libavutil/display.h>
#include <libavutil/opt.h>
#include <libavutil/pixdesc.h>
}

#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <system_error>

#include "io/video/ffmpeg_input.h"

namespace gemmaserve::video {

namespace {

using detail::CodecContextPtr;
using detail::FramePtr;
using detail::PacketPtr;
using detail::SwsContextPtr;

[[noreturn]] void fail(const ClipSpec& spec, const std::string& what, int error = 0) {
  throw std::runtime_error("make_synthetic_clip(" + describe(spec) + "): " + what +
                           (error < 0 ? ": " + detail::ffmpeg_error_text(error) : ""));
}

void check(const ClipSpec& spec, int result, const std::string& what) {
  if (result < 0) fail(spec, what, result);
}

struct OutputCloser {
  void operator()(AVFormatContext* context) const {
    if (context->pb) avio_closep(&context->pb);
    avformat_free_context(context);
  }
};

// A fresh folder under the system's temporary directory, removed with its contents.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "gemmaserve-clip-XXXXXX").string();
    if (!mkdtemp(pattern.data())) {
      throw std::system_error(errno, std::generic_category(), "mkdtemp " + pattern);
    }
    path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

std::string file_extension(const std::string& muxer) {
  if (muxer == "matroska") return ".mkv";
  return "." + muxer;
}

// Sends `frame` (nullptr: the end) and writes every packet the encoder gives.
void encode(const ClipSpec& spec, AVCodecContext* codec, AVFormatContext* output, AVStream* stream,
            const AVFrame* frame) {
  check(spec, avcodec_send_frame(codec, frame), "avcodec_send_frame");
  PacketPtr packet(av_packet_alloc());
  while (true) {
    const int received = avcodec_receive_packet(codec, packet.get());
    if (received == AVERROR(EAGAIN) || received == AVERROR_EOF) return;
    check(spec, received, "avcodec_receive_packet");
    av_packet_rescale_ts(packet.get(), codec->time_base, stream->time_base);
    packet->stream_index = stream->index;
    check(spec, av_interleaved_write_frame(output, packet.get()), "av_interleaved_write_frame");
  }
}

}  // namespace

std::string describe(const ClipSpec& spec) {
  std::string text = spec.encoder + "/" + spec.muxer + " " + std::to_string(spec.width) + "x" +
                     std::to_string(spec.height) + " " + std::to_string(spec.frames) +
                     " frames at " + std::to_string(spec.rate_num) + "/" +
                     std::to_string(spec.rate_den) + " fps";
  if (!spec.frame_times_ms.empty()) text += " (variable)";
  if (spec.rotation != 0) text += " rotated " + std::to_string(spec.rotation);
  if (!spec.pixel_format.empty()) text += " " + spec.pixel_format;
  return text;
}

std::vector<std::uint8_t> synthetic_frame(int width, int height, int index) {
  std::vector<std::uint8_t> rgb(static_cast<std::size_t>(width) * height * 3);
  const int square = std::max(2, std::min(width, height) / 4);
  const int square_x = (index * 3) % std::max(1, width - square);
  const int square_y = (index * 2) % std::max(1, height - square);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      std::uint8_t* pixel = &rgb[(static_cast<std::size_t>(y) * width + x) * 3];
      const bool in_square =
          x >= square_x && x < square_x + square && y >= square_y && y < square_y + square;
      pixel[0] = in_square ? 250 : static_cast<std::uint8_t>(x * 7 + index * 11);
      pixel[1] = in_square ? 30 : static_cast<std::uint8_t>(y * 5 + index * 3);
      pixel[2] = in_square ? 60 : static_cast<std::uint8_t>((x + y) * 3 + index * 17);
    }
  }
  return rgb;
}

std::vector<std::uint8_t> make_synthetic_clip(const ClipSpec& spec) {
  av_log_set_level(AV_LOG_ERROR);  // the encoders' statistics would fill the output
  const AVCodec* encoder = avcodec_find_encoder_by_name(spec.encoder.c_str());
  if (!encoder) fail(spec, "no such encoder");
  const bool gif = spec.encoder == "gif";
  const std::string pixel_format = !spec.pixel_format.empty() ? spec.pixel_format
                                   : gif                      ? "rgb8"
                                                              : "yuv420p";
  const AVPixelFormat format = av_get_pix_fmt(pixel_format.c_str());
  const bool variable_rate = !spec.frame_times_ms.empty();
  if (variable_rate && static_cast<int>(spec.frame_times_ms.size()) != spec.frames) {
    fail(spec, "frame_times_ms needs one time per frame");
  }

  const ScratchDir dir;
  const std::string path = (dir.path() / ("clip" + file_extension(spec.muxer))).string();
  AVFormatContext* raw_output = nullptr;
  check(spec,
        avformat_alloc_output_context2(&raw_output, nullptr, spec.muxer.c_str(), path.c_str()),
        "avformat_alloc_output_context2");
  std::unique_ptr<AVFormatContext, OutputCloser> output(raw_output);

  CodecContextPtr codec(avcodec_alloc_context3(encoder));
  codec->width = spec.width;
  codec->height = spec.height;
  codec->pix_fmt = format;
  codec->framerate = AVRational{spec.rate_num, spec.rate_den};
  codec->time_base = variable_rate ? AVRational{1, 1000} : AVRational{spec.rate_den, spec.rate_num};
  codec->thread_count = spec.encoder_threads;
  if (spec.keyframe_interval > 0) codec->gop_size = spec.keyframe_interval;
  if (spec.b_frames >= 0) codec->max_b_frames = spec.b_frames;
  if (output->oformat->flags & AVFMT_GLOBALHEADER) codec->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
  AVDictionary* options = nullptr;
  if (spec.encoder == "libx264") av_dict_set(&options, "preset", "veryfast", 0);
  if (spec.encoder == "libx265") {
    av_dict_set(&options, "preset", "ultrafast", 0);
    av_dict_set(&options, "x265-params", "log-level=none", 0);
  }
  if (spec.encoder == "libvpx" || spec.encoder == "libvpx-vp9") {
    av_dict_set(&options, "deadline", "realtime", 0);
    av_dict_set(&options, "cpu-used", "8", 0);
  }
  if (spec.encoder == "libaom-av1") av_dict_set(&options, "cpu-used", "8", 0);
  const int opened = avcodec_open2(codec.get(), encoder, &options);
  av_dict_free(&options);
  check(spec, opened, "avcodec_open2");

  AVStream* stream = avformat_new_stream(output.get(), nullptr);
  check(spec, avcodec_parameters_from_context(stream->codecpar, codec.get()),
        "avcodec_parameters_from_context");
  stream->time_base = codec->time_base;
  stream->avg_frame_rate = codec->framerate;
  if (spec.rotation != 0) {
    auto* matrix = reinterpret_cast<int32_t*>(
        av_stream_new_side_data(stream, AV_PKT_DATA_DISPLAYMATRIX, 9 * sizeof(int32_t)));
    if (!matrix) fail(spec, "av_stream_new_side_data");
    // FFmpeg reads this matrix back (av_display_rotation_get) as -rotation degrees
    // counterclockwise: a turn of `rotation` clockwise, as a phone's portrait video has.
    av_display_rotation_set(matrix, spec.rotation);
  }
  check(spec, avio_open(&output->pb, path.c_str(), AVIO_FLAG_WRITE), "avio_open");
  AVDictionary* muxer_options = nullptr;
  if (spec.faststart) av_dict_set(&muxer_options, "movflags", "+faststart", 0);
  const int header = avformat_write_header(output.get(), &muxer_options);
  av_dict_free(&muxer_options);
  check(spec, header, "avformat_write_header");

  SwsContextPtr sws(sws_getContext(spec.width, spec.height, AV_PIX_FMT_RGB24, spec.width,
                                   spec.height, format, SWS_BICUBIC, nullptr, nullptr, nullptr));
  if (!sws) fail(spec, "sws_getContext");
  FramePtr frame(av_frame_alloc());
  frame->format = format;
  frame->width = spec.width;
  frame->height = spec.height;
  check(spec, av_frame_get_buffer(frame.get(), 0), "av_frame_get_buffer");
  for (int i = 0; i < spec.frames; ++i) {
    check(spec, av_frame_make_writable(frame.get()), "av_frame_make_writable");
    const std::vector<std::uint8_t> rgb = synthetic_frame(spec.width, spec.height, i);
    const std::uint8_t* source[4] = {rgb.data(), nullptr, nullptr, nullptr};
    const int source_stride[4] = {spec.width * 3, 0, 0, 0};
    sws_scale(sws.get(), source, source_stride, 0, spec.height, frame->data, frame->linesize);
    frame->pts = variable_rate ? spec.frame_times_ms[static_cast<std::size_t>(i)] : i;
    encode(spec, codec.get(), output.get(), stream, frame.get());
  }
  encode(spec, codec.get(), output.get(), stream, nullptr);
  check(spec, av_write_trailer(output.get()), "av_write_trailer");
  avio_closep(&output->pb);

  std::ifstream in(path, std::ios::binary);
  std::vector<std::uint8_t> bytes(std::istreambuf_iterator<char>(in), {});
  if (bytes.empty()) fail(spec, "the muxer wrote nothing");
  return bytes;
}

}  // namespace gemmaserve::video
