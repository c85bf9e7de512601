// MP4 / MOV, Matroska / WebM and GIF through libavformat and libavcodec, as OpenCV's FFmpeg
// backend reads them for vLLM: its frame count, fps and rotation, every frame through swscale to
// BGR24 with SWS_BICUBIC. Sampled frames are reached by seeking to keyframes where the demuxed
// timestamps allow it, else by decoding in order; both give the same frames.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/logging.h"
#include "io/video/ffmpeg_input.h"
#include "io/video/video_formats.h"

extern "C" {
#include <libavutil/display.h>
#include <libavutil/pixdesc.h>
}

namespace gemmaserve::video::detail {

namespace {

// The codecs decoded, named in the refusal of any other.
// MPEG-4 Part 2 and Motion JPEG: what older cameras and many AVI files hold (OpenCV reads them).
constexpr AVCodecID kDecodedCodecs[] = {AV_CODEC_ID_H264,  AV_CODEC_ID_HEVC, AV_CODEC_ID_VP8,
                                        AV_CODEC_ID_VP9,   AV_CODEC_ID_AV1,  AV_CODEC_ID_MPEG4,
                                        AV_CODEC_ID_MJPEG, AV_CODEC_ID_GIF};
constexpr const char* kDecodedCodecNames =
    "H.264, H.265, VP8, VP9, AV1, MPEG-4 Part 2, Motion JPEG and GIF";

// OpenCV's eps_zero: rates below it count as absent.
constexpr double kZeroRate = 0.000025;

// Packets a seek must skip to pay for itself: after one, the frames the decoder held back for
// reordering and for its threads are decoded again.
constexpr std::int64_t kMinPacketsSkipped = 4;

struct ContainerNames {
  const char* demuxer;  // libavformat's short name
  const char* name;     // in messages
};

ContainerNames container_names(VideoContainer container) {
  switch (container) {
    case VideoContainer::kMp4:
      return {"mov", "MP4/MOV"};
    case VideoContainer::kMatroska:
      return {"matroska", "Matroska/WebM"};
    case VideoContainer::kAvi:
      return {"avi", "AVI"};
    case VideoContainer::kGif:
    case VideoContainer::kWebp:  // WebP never reaches FFmpeg (webp_video.cpp)
      break;
  }
  return {"gif", "GIF"};
}

bool decoded_codec(AVCodecID id) {
  return std::find(std::begin(kDecodedCodecs), std::end(kDecodedCodecs), id) !=
         std::end(kDecodedCodecs);
}

// Every decoder libavcodec has for the decoded codecs (libavformat's probing may prefer one that
// is not avcodec_find_decoder's choice), as its codec_whitelist option wants them.
std::string decoder_whitelist() {
  std::string names;
  void* iterator = nullptr;
  while (const AVCodec* codec = av_codec_iterate(&iterator)) {
    if (!av_codec_is_decoder(codec) || !decoded_codec(codec->id)) continue;
    if (!names.empty()) names += ',';
    names += codec->name;
  }
  return names;
}

double rational_value(AVRational r) {  // OpenCV's r2d
  return r.num == 0 || r.den == 0 ? 0.0 : static_cast<double>(r.num) / r.den;
}

// The stream's length as its container's header states it (0 when it does not).
double header_seconds(const AVFormatContext& format, const AVStream& stream) {
  double seconds = 0;
  if (format.duration > 0) seconds = static_cast<double>(format.duration) / AV_TIME_BASE;
  if (stream.duration > 0) {
    seconds =
        std::max(seconds, static_cast<double>(stream.duration) * rational_value(stream.time_base));
  }
  return seconds;
}

// OpenCV's get_fps: av_guess_frame_rate, else the average rate, else 1 / time base.
double opencv_fps(AVFormatContext* format, AVStream* stream) {
  double fps = rational_value(av_guess_frame_rate(format, stream, nullptr));
  if (fps < kZeroRate) fps = rational_value(stream->avg_frame_rate);
  if (fps < kZeroRate && rational_value(stream->time_base) > 0) {
    fps = 1.0 / rational_value(stream->time_base);
  }
  return fps;
}

// OpenCV's rotation_angle: the display matrix's clockwise turn, applied (CAP_PROP_ORIENTATION_AUTO)
// only in multiples of 90 degrees.
int display_rotation(const AVStream& stream) {
  std::size_t size = 0;
  const std::uint8_t* matrix = av_stream_get_side_data(&stream, AV_PKT_DATA_DISPLAYMATRIX, &size);
  if (!matrix || size < 9 * sizeof(std::int32_t)) return 0;
  const double counterclockwise = av_display_rotation_get(reinterpret_cast<const int32_t*>(matrix));
  if (!std::isfinite(counterclockwise)) return 0;
  const int clockwise = ((-static_cast<int>(std::lround(counterclockwise)) % 360) + 360) % 360;
  return clockwise % 90 == 0 ? clockwise : 0;
}

// The video packets in decode order, read once without decoding. With a timestamp on each and no
// two alike, a frame's index is the rank of its timestamp, wherever decoding started.
struct PacketIndex {
  std::vector<std::int64_t> pts;
  std::vector<std::int64_t> dts;
  std::vector<std::uint8_t> keyframe;
  std::int64_t count = 0;  // every video packet, those the decoder drops (AV_PKT_FLAG_DISCARD) too
  bool by_timestamp = false;
  std::vector<std::int64_t> sorted_pts;       // frame index -> timestamp
  std::vector<std::int64_t> packet_of_frame;  // frame index -> packet (decode order)
  std::vector<std::int64_t> keyframe_before;  // packet -> latest keyframe packet at or before it

  // The frame index of timestamp `pts`, or -1.
  std::int64_t frame_of(std::int64_t pts_value) const {
    const auto it = std::lower_bound(sorted_pts.begin(), sorted_pts.end(), pts_value);
    return it != sorted_pts.end() && *it == pts_value ? it - sorted_pts.begin() : -1;
  }
};

// The first video stream of the bytes (cover art aside), opened and probed, each limit the headers
// can show checked before avformat_find_stream_info decodes its first frames.
struct OpenedStream {
  FfmpegInput input;
  AVStream* stream = nullptr;

  OpenedStream(std::span<const std::uint8_t> bytes, VideoContainer container,
               const VideoDecodeLimits& limits)
      : input(bytes, container_names(container).demuxer, container_names(container).name,
              decoder_whitelist()) {
    AVFormatContext* format = input.format();
    for (unsigned i = 0; i < format->nb_streams; ++i) {
      AVStream* candidate = format->streams[i];
      const bool video = candidate->codecpar->codec_type == AVMEDIA_TYPE_VIDEO &&
                         !(candidate->disposition & AV_DISPOSITION_ATTACHED_PIC);
      if (video && !stream) {
        stream = candidate;
      } else {
        candidate->discard = AVDISCARD_ALL;  // its packets are skipped, its decoder never opened
      }
    }
    if (!stream) {
      throw_unreadable("the " + std::string(container_names(container).name) +
                       " file has no video stream");
    }
    const AVCodecParameters& header = *stream->codecpar;
    if (header.width > 0 && header.height > 0) check_pixels(header.width, header.height, limits);
    check_duration(header_seconds(*format, *stream), limits);
    if (stream->nb_frames > 0) check_total_frames(stream->nb_frames, limits);
    if (!decoded_codec(header.codec_id)) {
      throw_unreadable("its codec is " + std::string(avcodec_get_name(header.codec_id)) +
                       "; this server decodes " + kDecodedCodecNames);
    }

    // Probing decoders refuse frames over the pixel limit, whatever the header said.
    std::vector<AVDictionary*> options(format->nb_streams, nullptr);
    const std::int64_t max_pixels = static_cast<std::int64_t>(
        std::min<std::uint64_t>(limits.max_pixels_per_frame, std::numeric_limits<int>::max()));
    for (AVDictionary*& entry : options) av_dict_set_int(&entry, "max_pixels", max_pixels, 0);
    const int probed = avformat_find_stream_info(format, options.data());
    for (AVDictionary*& entry : options) av_dict_free(&entry);
    if (probed < 0) {
      throw_unreadable("its streams could not be probed (" + ffmpeg_error_text(probed) + ")");
    }
    check_pixels(stream->codecpar->width, stream->codecpar->height, limits);
    if (format->duration_estimation_method != AVFMT_DURATION_FROM_BITRATE) {
      check_duration(header_seconds(*format, *stream), limits);
    }
  }

  AVFormatContext* format() const { return input.format(); }
};

// Reads every video packet of `opened` (the demuxer at its start) into an index.
PacketIndex index_packets(OpenedStream& opened, std::int64_t header_frames,
                          const VideoDecodeLimits& limits) {
  PacketIndex index;
  PacketPtr packet(av_packet_alloc());
  if (!packet) throw std::bad_alloc();
  while (true) {
    const int read = av_read_frame(opened.format(), packet.get());
    if (read == AVERROR_EOF) break;
    if (read < 0) {
      if (header_frames > 0) throw_frame_failed(index.count, header_frames);
      throw_unreadable("its packets could not be read after frame " + std::to_string(index.count) +
                       " (" + ffmpeg_error_text(read) + ")");
    }
    if (packet->stream_index == opened.stream->index) {
      ++index.count;
      if (index.count > limits.max_total_frames) check_total_frames(index.count, limits, true);
      if (!(packet->flags & AV_PKT_FLAG_DISCARD)) {
        index.pts.push_back(packet->pts);
        index.dts.push_back(packet->dts);
        index.keyframe.push_back((packet->flags & AV_PKT_FLAG_KEY) != 0);
      }
    }
    av_packet_unref(packet.get());
  }
  return index;
}

// Sets by_timestamp and the lookups when every frame of `total_frames` has its own timestamp.
void index_by_timestamp(PacketIndex& index, std::int64_t total_frames) {
  const auto packets = static_cast<std::int64_t>(index.pts.size());
  if (packets != total_frames || packets != index.count || packets == 0) return;
  if (std::find(index.pts.begin(), index.pts.end(), AV_NOPTS_VALUE) != index.pts.end()) return;
  std::vector<std::int64_t> order(static_cast<std::size_t>(packets));
  for (std::int64_t i = 0; i < packets; ++i) order[static_cast<std::size_t>(i)] = i;
  std::sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
    return index.pts[static_cast<std::size_t>(a)] < index.pts[static_cast<std::size_t>(b)];
  });
  index.sorted_pts.resize(order.size());
  for (std::size_t i = 0; i < order.size(); ++i) {
    index.sorted_pts[i] = index.pts[static_cast<std::size_t>(order[i])];
    if (i > 0 && index.sorted_pts[i] == index.sorted_pts[i - 1]) return;
  }
  index.packet_of_frame = std::move(order);
  index.keyframe_before.resize(static_cast<std::size_t>(packets));
  std::int64_t last_keyframe = -1;
  for (std::int64_t i = 0; i < packets; ++i) {
    if (index.keyframe[static_cast<std::size_t>(i)]) last_keyframe = i;
    index.keyframe_before[static_cast<std::size_t>(i)] = last_keyframe;
  }
  index.by_timestamp = true;
}

// What the first reading of the bytes learns.
struct Clip {
  VideoInfo info;
  CodecParametersPtr parameters;  // the stream's, complete after probing
  int stream_index = -1;
  int width = 0;  // the decoded frames' size, before the rotation
  int height = 0;
  // GIF frames draw on the previous canvas, so only its first frame is a true starting point.
  bool keyframes_restart_decoding = false;
  PacketIndex packets;  // filled when decoding, or when the header has no frame count
};

Clip inspect_clip(std::span<const std::uint8_t> bytes, VideoContainer container,
                  const VideoDecodeLimits& limits, bool index_packets_always) {
  OpenedStream opened(bytes, container, limits);
  AVStream* stream = opened.stream;
  Clip clip;
  clip.stream_index = stream->index;
  clip.parameters.reset(avcodec_parameters_alloc());
  if (!clip.parameters || avcodec_parameters_copy(clip.parameters.get(), stream->codecpar) < 0) {
    throw std::bad_alloc();
  }
  clip.width = stream->codecpar->width;
  clip.height = stream->codecpar->height;
  clip.keyframes_restart_decoding = container != VideoContainer::kGif;
  VideoInfo& info = clip.info;
  info.container = opened.format()->iformat->name;
  info.codec = avcodec_get_name(stream->codecpar->codec_id);
  info.rotation = display_rotation(*stream);
  const bool quarter_turn = info.rotation % 180 != 0;
  info.width = quarter_turn ? clip.height : clip.width;
  info.height = quarter_turn ? clip.width : clip.height;
  info.fps = opencv_fps(opened.format(), stream);

  // OpenCV takes nb_frames, else estimates floor(duration * fps + 0.5); the demuxed count is
  // exact where that estimate can be off by a frame or more (variable rates, rounded durations).
  const std::int64_t header_frames = stream->nb_frames > 0 ? stream->nb_frames : 0;
  if (index_packets_always || header_frames == 0) {
    clip.packets = index_packets(opened, header_frames, limits);
    if (header_frames > 0 && clip.packets.count < header_frames) {
      throw_frame_failed(clip.packets.count, header_frames);
    }
  }
  info.total_frames = header_frames > 0 ? header_frames : clip.packets.count;
  if (info.total_frames <= 0) throw_unreadable("it has no frames");
  info.duration = info.fps > 0 ? static_cast<double>(info.total_frames) / info.fps : 0;
  check_duration(info.duration, limits);
  index_by_timestamp(clip.packets, info.total_frames);
  return clip;
}

// Decodes the sampled frames of a clip from a second opening of its bytes.
class SampledFrameDecoder {
 public:
  SampledFrameDecoder(std::span<const std::uint8_t> bytes, VideoContainer container,
                      const Clip& clip, std::vector<std::int64_t> targets,
                      const VideoDecodeLimits& limits)
      : clip_(clip),
        opened_(bytes, container, limits),
        packet_(av_packet_alloc()),
        frame_(av_frame_alloc()),
        limits_(limits),
        targets_(std::move(targets)),
        produced_(targets_.size(), false) {
    if (!packet_ || !frame_) throw std::bad_alloc();
    if (opened_.stream->index != clip.stream_index) throw_unreadable("its streams changed");
    const AVCodec* decoder = avcodec_find_decoder(clip.parameters->codec_id);
    if (!decoder) {
      throw_unreadable("no decoder for its codec " + clip_.info.codec + " is installed");
    }
    codec_.reset(avcodec_alloc_context3(decoder));
    if (!codec_ || avcodec_parameters_to_context(codec_.get(), clip.parameters.get()) < 0) {
      throw std::bad_alloc();
    }
    codec_->thread_count = limits.decoder_threads;
    codec_->max_pixels = static_cast<std::int64_t>(
        std::min<std::uint64_t>(limits.max_pixels_per_frame, std::numeric_limits<int>::max()));
    codec_->pkt_timebase = opened_.stream->time_base;
    const int opened = avcodec_open2(codec_.get(), decoder, nullptr);
    if (opened < 0) {
      throw_unreadable("its " + clip_.info.codec + " decoder could not start (" +
                       ffmpeg_error_text(opened) + ")");
    }
    out_.info = clip.info;
    out_.frame_indices = targets_;
    out_.frames.resize(targets_.size());
  }

  DecodedVideo run(FrameAccess access) {
    const PacketIndex& packets = clip_.packets;
    may_seek_ = access == FrameAccess::kSeekToKeyframes && packets.by_timestamp &&
                clip_.keyframes_restart_decoding;
    while (next_target_ < targets_.size()) {
      const std::int64_t target = targets_[next_target_];
      if (may_seek_ && next_packet_ >= 0) {
        const std::int64_t keyframe = keyframe_for(target);
        if (keyframe - next_packet_ >= kMinPacketsSkipped) may_seek_ = seek_to(keyframe);
      }
      while (!produced_[next_target_]) {
        if (rewind_requested_) rewind();
        if (!read_packet()) {
          if (drained_) throw_frame_failed(std::min(next_frame_, target), total());
          decode(nullptr);
          drained_ = true;
          continue;
        }
        decode(packet_.get());
      }
      while (next_target_ < targets_.size() && produced_[next_target_]) ++next_target_;
    }
    return std::move(out_);
  }

 private:
  std::int64_t total() const { return clip_.info.total_frames; }

  // The keyframe packet to start from for `target`: the latest at or before the target's packet
  // whose timestamp is not after the target's (an open GOP's leading frames need the one before).
  std::int64_t keyframe_for(std::int64_t target) const {
    const PacketIndex& packets = clip_.packets;
    const std::int64_t target_pts = packets.sorted_pts[static_cast<std::size_t>(target)];
    std::int64_t keyframe =
        packets.keyframe_before[static_cast<std::size_t>(packets.packet_of_frame[target])];
    while (keyframe > 0 && packets.pts[static_cast<std::size_t>(keyframe)] > target_pts) {
      keyframe = packets.keyframe_before[static_cast<std::size_t>(keyframe - 1)];
    }
    return keyframe;
  }

  // Seeks the demuxer to the keyframe packet `keyframe` by its presentation time (what MOV's and
  // Matroska's seeking take) and empties the decoder; false when the demuxer cannot seek
  // (decoding then goes on in order). `read_packet` checks where it landed.
  bool seek_to(std::int64_t keyframe) {
    const std::int64_t timestamp = clip_.packets.pts[static_cast<std::size_t>(keyframe)];
    if (av_seek_frame(opened_.format(), clip_.stream_index, timestamp, AVSEEK_FLAG_BACKWARD) < 0) {
      GS_LOG_DEBUG << "video: seeking to packet " << keyframe << " failed; decoding in order";
      return false;
    }
    avcodec_flush_buffers(codec_.get());
    drained_ = false;
    next_packet_ = -1;  // known again from the next packet's timestamp
    seek_goal_ = keyframe;
    next_frame_ = clip_.packets.frame_of(clip_.packets.pts[static_cast<std::size_t>(keyframe)]);
    ++out_.stats.seeks;
    return true;
  }

  // Back to the first packet, decoding in order from there on: after a seek that landed past its
  // keyframe or on a frame that is none, or gave a damaged frame decoding in order might not.
  void rewind() {
    rewind_requested_ = false;
    may_seek_ = false;
    rewinding_ = true;
    if (!seek_to(0)) throw_unreadable("it could not be read again from its start");
  }

  // Reads the stream's next packet into packet_; false at the end of the file. After a seek the
  // packet's place is looked up: past the keyframe asked for (a later keyframe whose decode time
  // precedes its presentation time) the seek is retried a keyframe earlier, and from the first
  // packet decoding goes on in order.
  bool read_packet() {
    while (true) {
      av_packet_unref(packet_.get());
      const int read = av_read_frame(opened_.format(), packet_.get());
      if (read == AVERROR_EOF) return false;
      if (read < 0) throw_frame_failed(next_frame_, total());
      if (packet_->stream_index != clip_.stream_index) continue;
      if (next_packet_ >= 0) {
        ++next_packet_;
        return true;
      }
      const PacketIndex& packets = clip_.packets;
      const std::int64_t frame = packets.frame_of(packet_->pts);
      const std::int64_t landed = frame < 0 ? -1 : packets.packet_of_frame[frame];
      const bool on_keyframe = landed >= 0 && packets.keyframe[static_cast<std::size_t>(landed)];
      if (landed >= 0 && landed <= seek_goal_ && (on_keyframe || (rewinding_ && landed == 0))) {
        next_packet_ = landed + 1;
        return true;
      }
      if (rewinding_) throw_unreadable("it could not be read again from its start");
      GS_LOG_DEBUG << "video: a seek to packet " << seek_goal_ << " landed on packet " << landed;
      const std::int64_t earlier =
          seek_goal_ > 0 ? packets.keyframe_before[static_cast<std::size_t>(seek_goal_ - 1)] : -1;
      if (earlier <= 0 || !seek_to(earlier)) rewind();
    }
  }

  // Sends `packet` (nullptr: the end of the stream) and takes every frame the decoder gives.
  // A decoder error names the frame after the last one given: with frame threads a packet's
  // error arrives packets later, but in its frame's place in the output.
  void decode(const AVPacket* packet) {
    while (true) {
      const int sent = avcodec_send_packet(codec_.get(), packet);
      if (sent == AVERROR(EAGAIN)) {
        receive_frames();
        continue;
      }
      if (sent < 0 && sent != AVERROR_EOF) throw_frame_failed(next_frame_, total());
      break;
    }
    receive_frames();
  }

  void receive_frames() {
    while (true) {
      const int received = avcodec_receive_frame(codec_.get(), frame_.get());
      if (received == AVERROR(EAGAIN) || received == AVERROR_EOF) return;
      if (received < 0) throw_frame_failed(next_frame_, total());
      take(*frame_);
      av_frame_unref(frame_.get());
    }
  }

  void take(const AVFrame& frame) {
    ++out_.stats.frames_decoded;
    std::int64_t index = frames_output_++;
    if (clip_.packets.by_timestamp) {
      const std::int64_t pts =
          frame.pts != AV_NOPTS_VALUE ? frame.pts : frame.best_effort_timestamp;
      index = clip_.packets.frame_of(pts);
      if (index < 0) {
        GS_LOG_DEBUG << "video: a decoded frame's timestamp " << pts << " is not the stream's";
        return;
      }
    }
    next_frame_ = index + 1;
    const auto slot = std::lower_bound(targets_.begin(), targets_.end(), index) - targets_.begin();
    if (slot == static_cast<std::ptrdiff_t>(targets_.size()) || targets_[slot] != index ||
        produced_[slot]) {
      return;
    }
    if (frame.decode_error_flags != 0 || (frame.flags & AV_FRAME_FLAG_CORRUPT)) {
      if (out_.stats.seeks == 0 || rewinding_) throw_frame_failed(index, total());
      rewind_requested_ = true;
      return;
    }
    if (frame.width != clip_.width || frame.height != clip_.height) {
      check_pixels(frame.width, frame.height, limits_);
      throw_unreadable("frame " + std::to_string(index) + " is " + std::to_string(frame.width) +
                       "x" + std::to_string(frame.height) + " but the stream's header says " +
                       std::to_string(clip_.width) + "x" + std::to_string(clip_.height));
    }
    out_.frames[slot] = to_rgb(frame);
    produced_[slot] = true;
  }

  // OpenCV's conversion (swscale to BGR24, SWS_BICUBIC, the same size), then R and B swapped and
  // the rotation applied in one pass.
  image::RgbImage to_rgb(const AVFrame& frame) {
    const int width = frame.width;
    const int height = frame.height;
    sws_.reset(sws_getCachedContext(sws_.release(), width, height,
                                    static_cast<AVPixelFormat>(frame.format), width, height,
                                    AV_PIX_FMT_BGR24, SWS_BICUBIC, nullptr, nullptr, nullptr));
    if (!sws_) {
      const char* name = av_get_pix_fmt_name(static_cast<AVPixelFormat>(frame.format));
      throw_unreadable("its pixel format " + std::string(name ? name : "unknown") +
                       " cannot be converted to RGB");
    }
    // swscale's SIMD converts rows in whole groups of pixels and skips a last partial group when
    // the row leaves no room for it: rows padded to 16 pixels, then to 64 bytes.
    const int stride = ((width + 15) / 16 * 16 * 3 + 63) / 64 * 64;
    const std::size_t bytes = static_cast<std::size_t>(stride) * height + 64;
    if (bytes > bgr_bytes_) {
      bgr_.reset(static_cast<std::uint8_t*>(av_malloc(bytes)));
      if (!bgr_) throw std::bad_alloc();
      bgr_bytes_ = bytes;
    }
    std::uint8_t* planes[4] = {bgr_.get(), nullptr, nullptr, nullptr};
    const int strides[4] = {stride, 0, 0, 0};
    if (sws_scale(sws_.get(), frame.data, frame.linesize, 0, height, planes, strides) != height) {
      throw_unreadable("swscale could not convert a frame");
    }
    return oriented_rgb(bgr_.get(), stride, width, height, clip_.info.rotation);
  }

  static image::RgbImage oriented_rgb(const std::uint8_t* bgr, int stride, int width, int height,
                                      int rotation) {
    image::RgbImage image;
    const bool quarter_turn = rotation % 180 != 0;
    image.width = quarter_turn ? height : width;
    image.height = quarter_turn ? width : height;
    image.pixels.resize(static_cast<std::size_t>(width) * height * 3);
    std::uint8_t* out = image.pixels.data();
    for (int row = 0; row < image.height; ++row) {
      for (int column = 0; column < image.width; ++column, out += 3) {
        int source_row = row;  // cv::rotate's mappings
        int source_column = column;
        if (rotation == 90) {
          source_row = height - 1 - column;
          source_column = row;
        } else if (rotation == 180) {
          source_row = height - 1 - row;
          source_column = width - 1 - column;
        } else if (rotation == 270) {
          source_row = column;
          source_column = width - 1 - row;
        }
        const std::uint8_t* pixel =
            bgr + static_cast<std::ptrdiff_t>(source_row) * stride + source_column * 3;
        out[0] = pixel[2];
        out[1] = pixel[1];
        out[2] = pixel[0];
      }
    }
    return image;
  }

  struct AvFreer {
    void operator()(std::uint8_t* data) const { av_free(data); }
  };

  const Clip& clip_;
  OpenedStream opened_;
  CodecContextPtr codec_;
  PacketPtr packet_;
  FramePtr frame_;
  const VideoDecodeLimits& limits_;
  SwsContextPtr sws_;
  std::unique_ptr<std::uint8_t, AvFreer> bgr_;  // swscale's output
  std::size_t bgr_bytes_ = 0;
  std::vector<std::int64_t> targets_;  // ascending frame indices
  std::vector<bool> produced_;
  DecodedVideo out_;
  std::size_t next_target_ = 0;     // the first target not produced
  std::int64_t next_packet_ = 0;    // decode-order index of the next packet read; -1 after a seek
  std::int64_t seek_goal_ = 0;      // the keyframe packet of the last seek
  std::int64_t frames_output_ = 0;  // frames decoded since the start (the index without timestamps)
  std::int64_t next_frame_ = 0;     // the frame the decoder should give next
  bool drained_ = false;            // the decoder was sent the end of the stream
  bool may_seek_ = false;
  bool rewind_requested_ = false;
  bool rewinding_ = false;  // decoding in order from the start after a failed seek
};

}  // namespace

VideoInfo probe_ffmpeg(std::span<const std::uint8_t> bytes, VideoContainer container,
                       const VideoDecodeLimits& limits) {
  return inspect_clip(bytes, container, limits, false).info;
}

DecodedVideo decode_ffmpeg(std::span<const std::uint8_t> bytes, VideoContainer container,
                           const VideoSampling& sampling, const VideoDecodeLimits& limits,
                           FrameAccess access) {
  const Clip clip = inspect_clip(bytes, container, limits, true);
  std::vector<std::int64_t> targets =
      sample_frame_indices(clip.info.total_frames, clip.info.duration, sampling);
  check_decoded_bytes(targets.size(), clip.info.width, clip.info.height, limits);
  SampledFrameDecoder decoder(bytes, container, clip, std::move(targets), limits);
  DecodedVideo video = decoder.run(access);
  GS_LOG_DEBUG << "video: " << video.info.codec << " " << video.info.width << "x"
               << video.info.height << ", " << video.frames.size() << " of "
               << video.info.total_frames << " frames after decoding " << video.stats.frames_decoded
               << " with " << video.stats.seeks << " seeks";
  return video;
}

}  // namespace gemmaserve::video::detail
