// Animated WebP through libwebp's WebPAnimDecoder (FFmpeg 5.1 cannot decode it): each frame
// composited on the canvas as browsers show it, its alpha dropped as swscale drops a GIF's, the
// fps from the frames' durations.
#include <webp/decode.h>
#include <webp/demux.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "io/video/video_formats.h"

namespace gemmaserve::video::detail {

namespace {

struct DemuxDeleter {
  void operator()(WebPDemuxer* demux) const { WebPDemuxDelete(demux); }
};
struct AnimDecoderDeleter {
  void operator()(WebPAnimDecoder* decoder) const { WebPAnimDecoderDelete(decoder); }
};

// The canvas, frame count and durations from the chunks, with every limit checked; no pixel is
// decoded.
VideoInfo inspect_webp(std::span<const std::uint8_t> bytes, const VideoDecodeLimits& limits) {
  const WebPData data{bytes.data(), bytes.size()};
  std::unique_ptr<WebPDemuxer, DemuxDeleter> demux(WebPDemux(&data));
  if (!demux) throw_unreadable("the WebP container is invalid");
  VideoInfo info;
  info.container = "webp";
  info.codec = "webp";
  info.width = static_cast<int>(WebPDemuxGetI(demux.get(), WEBP_FF_CANVAS_WIDTH));
  info.height = static_cast<int>(WebPDemuxGetI(demux.get(), WEBP_FF_CANVAS_HEIGHT));
  check_pixels(info.width, info.height, limits);
  info.total_frames = WebPDemuxGetI(demux.get(), WEBP_FF_FRAME_COUNT);
  if (info.total_frames <= 0) throw_unreadable("the WebP file has no frames");
  check_total_frames(info.total_frames, limits);
  std::int64_t milliseconds = 0;
  WebPIterator frame;
  if (WebPDemuxGetFrame(demux.get(), 1, &frame)) {
    do {
      milliseconds += std::max(frame.duration, 0);
    } while (WebPDemuxNextFrame(&frame));
    WebPDemuxReleaseIterator(&frame);
  }
  info.duration = static_cast<double>(milliseconds) / 1000;
  check_duration(info.duration, limits);
  // Durations all 0 (a still image, or an animation that never says): no rate, as OpenCV's 0.
  info.fps = milliseconds > 0 ? static_cast<double>(info.total_frames) / info.duration : 0;
  return info;
}

}  // namespace

VideoInfo probe_webp(std::span<const std::uint8_t> bytes, const VideoDecodeLimits& limits) {
  return inspect_webp(bytes, limits);
}

DecodedVideo decode_webp(std::span<const std::uint8_t> bytes, const VideoSampling& sampling,
                         const VideoDecodeLimits& limits) {
  DecodedVideo video;
  video.info = inspect_webp(bytes, limits);
  const VideoInfo& info = video.info;
  video.frame_indices = sample_frame_indices(info.total_frames, info.duration, sampling);
  check_decoded_bytes(video.frame_indices.size(), info.width, info.height, limits);

  const WebPData data{bytes.data(), bytes.size()};
  WebPAnimDecoderOptions options;
  if (!WebPAnimDecoderOptionsInit(&options)) throw_unreadable("libwebp's version is unexpected");
  options.color_mode = MODE_RGBA;
  options.use_threads = 0;
  std::unique_ptr<WebPAnimDecoder, AnimDecoderDeleter> decoder(WebPAnimDecoderNew(&data, &options));
  if (!decoder) throw_unreadable("the WebP animation is invalid");

  const std::size_t pixels = static_cast<std::size_t>(info.width) * info.height;
  video.frames.reserve(video.frame_indices.size());
  std::int64_t index = 0;
  for (const std::int64_t wanted : video.frame_indices) {
    std::uint8_t* rgba = nullptr;
    int timestamp = 0;
    // Every frame up to the wanted one is decoded: each is drawn over the canvas of the last.
    for (; index <= wanted; ++index) {
      if (!WebPAnimDecoderGetNext(decoder.get(), &rgba, &timestamp) || !rgba) {
        throw_frame_failed(index, info.total_frames);
      }
      ++video.stats.frames_decoded;
    }
    image::RgbImage& frame = video.frames.emplace_back();
    frame.width = info.width;
    frame.height = info.height;
    frame.pixels.resize(pixels * 3);
    for (std::size_t i = 0; i < pixels; ++i) {
      std::copy_n(rgba + i * 4, 3, frame.pixels.data() + i * 3);
    }
  }
  return video;
}

}  // namespace gemmaserve::video::detail
