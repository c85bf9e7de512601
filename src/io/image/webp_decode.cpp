// WebP through libwebp's animation decoder, as Pillow's WebPImagePlugin reads every WebP file:
// the first frame composited on the canvas, non-premultiplied RGBA, mode "RGBA" only when the
// file declares alpha.
#include <webp/decode.h>
#include <webp/demux.h>

#include <cstring>
#include <memory>

#include "io/image/image_formats.h"

namespace gemmaserve::image::detail {
namespace {

struct AnimDecoderDeleter {
  void operator()(WebPAnimDecoder* decoder) const { WebPAnimDecoderDelete(decoder); }
};

struct DemuxDeleter {
  void operator()(WebPDemuxer* demux) const { WebPDemuxDelete(demux); }
};

int webp_exif_orientation(const WebPData& data) {
  std::unique_ptr<WebPDemuxer, DemuxDeleter> demux(WebPDemux(&data));
  if (!demux) return 1;
  WebPChunkIterator chunk;
  int orientation = 1;
  if (WebPDemuxGetChunk(demux.get(), "EXIF", 1, &chunk)) {
    orientation = exif_orientation({chunk.chunk.bytes, chunk.chunk.size});
    WebPDemuxReleaseChunkIterator(&chunk);
  }
  return orientation;
}

}  // namespace

DecodedPixels decode_webp(std::span<const std::uint8_t> bytes, const DecodeOptions& options) {
  // RIFF size (little-endian, after "RIFF"): the file must hold all of it.
  const std::uint64_t riff_size = std::uint64_t{bytes[4]} | std::uint64_t{bytes[5]} << 8 |
                                  std::uint64_t{bytes[6]} << 16 | std::uint64_t{bytes[7]} << 24;
  if (riff_size + 8 > bytes.size()) throw_invalid(ImageFormat::kWebp, "the data is truncated");
  WebPBitstreamFeatures features;
  const VP8StatusCode status = WebPGetFeatures(bytes.data(), bytes.size(), &features);
  if (status == VP8_STATUS_NOT_ENOUGH_DATA) {
    throw_invalid(ImageFormat::kWebp, "the data is truncated");
  }
  if (status != VP8_STATUS_OK) throw_invalid(ImageFormat::kWebp, "the header is malformed");
  check_dimensions(ImageFormat::kWebp, static_cast<std::uint64_t>(features.width),
                   static_cast<std::uint64_t>(features.height), options);

  const WebPData data{bytes.data(), bytes.size()};
  WebPAnimDecoderOptions decoder_options;
  if (!WebPAnimDecoderOptionsInit(&decoder_options)) {
    throw_invalid(ImageFormat::kWebp, "libwebp version mismatch");
  }
  decoder_options.color_mode = MODE_RGBA;
  decoder_options.use_threads = 0;
  std::unique_ptr<WebPAnimDecoder, AnimDecoderDeleter> decoder(
      WebPAnimDecoderNew(&data, &decoder_options));
  if (!decoder) throw_invalid(ImageFormat::kWebp, "the file structure is malformed or truncated");
  WebPAnimInfo info;
  if (!WebPAnimDecoderGetInfo(decoder.get(), &info)) {
    throw_invalid(ImageFormat::kWebp, "the file structure is malformed");
  }
  check_dimensions(ImageFormat::kWebp, info.canvas_width, info.canvas_height, options);
  std::uint8_t* rgba = nullptr;
  int timestamp = 0;
  if (!WebPAnimDecoderHasMoreFrames(decoder.get()) ||
      !WebPAnimDecoderGetNext(decoder.get(), &rgba, &timestamp) || !rgba) {
    throw_invalid(ImageFormat::kWebp, "the image data is corrupt or truncated");
  }

  DecodedPixels out;
  out.width = static_cast<int>(info.canvas_width);
  out.height = static_cast<int>(info.canvas_height);
  out.channels = features.has_alpha ? 4 : 3;
  out.exif_orientation = webp_exif_orientation(data);
  const std::size_t pixels = std::size_t(out.width) * out.height;
  out.data.resize(pixels * out.channels);
  if (out.channels == 4) {
    std::memcpy(out.data.data(), rgba, pixels * 4);
  } else {
    for (std::size_t i = 0; i < pixels; ++i) std::memcpy(&out.data[i * 3], &rgba[i * 4], 3);
  }
  return out;
}

}  // namespace gemmaserve::image::detail
