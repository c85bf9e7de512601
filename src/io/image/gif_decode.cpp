// GIF's first frame through giflib, laid out as Pillow 9.4's GifImagePlugin loads frame 0: the
// logical screen (grown to hold the frame), filled with the frame's transparent index (else 0)
// outside the frame, indices expanded through the local or global palette (Pillow's grey ramp
// past its end), transparency dropped by convert("RGB").
#include <gif_lib.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "io/image/image_formats.h"

namespace gemmaserve::image::detail {
namespace {

struct GifReader {
  std::span<const std::uint8_t> bytes;
  std::size_t offset = 0;
  bool hit_end = false;
};

int on_gif_read(GifFileType* gif, GifByteType* out, int length) {
  auto* reader = static_cast<GifReader*>(gif->UserData);
  const std::size_t left = reader->bytes.size() - reader->offset;
  std::size_t n = static_cast<std::size_t>(std::max(length, 0));
  if (n > left) {
    n = left;
    reader->hit_end = true;
  }
  std::memcpy(out, reader->bytes.data() + reader->offset, n);
  reader->offset += n;
  return static_cast<int>(n);
}

struct GifCloser {
  void operator()(GifFileType* gif) const {
    int error = 0;
    DGifCloseFile(gif, &error);
  }
};

[[noreturn]] void gif_failed(const GifReader& reader, int error) {
  if (reader.hit_end) throw_invalid(ImageFormat::kGif, "the data is truncated");
  const char* message = GifErrorString(error);
  throw_invalid(ImageFormat::kGif, message ? message : "decoding failed");
}

}  // namespace

DecodedPixels decode_gif(std::span<const std::uint8_t> bytes, const DecodeOptions& options) {
  GifReader reader;
  reader.bytes = bytes;
  int error = 0;
  std::unique_ptr<GifFileType, GifCloser> gif(DGifOpen(&reader, on_gif_read, &error));
  if (!gif) gif_failed(reader, error);

  int transparency = -1;  // the graphic control extension's transparent index, if any
  for (;;) {
    GifRecordType record;
    if (DGifGetRecordType(gif.get(), &record) == GIF_ERROR) gif_failed(reader, gif->Error);
    if (record == TERMINATE_RECORD_TYPE) {
      throw_invalid(ImageFormat::kGif, "it contains no image");
    }
    if (record == EXTENSION_RECORD_TYPE) {
      int code = 0;
      GifByteType* block = nullptr;
      if (DGifGetExtension(gif.get(), &code, &block) == GIF_ERROR) gif_failed(reader, gif->Error);
      // Graphic control extension: block[0] is the length, then flags, delay (2), index.
      if (code == GRAPHICS_EXT_FUNC_CODE && block && block[0] >= 4) {
        transparency = (block[1] & 1) ? block[4] : -1;
      }
      while (block) {
        if (DGifGetExtensionNext(gif.get(), &block) == GIF_ERROR) gif_failed(reader, gif->Error);
      }
      continue;
    }
    if (record != IMAGE_DESC_RECORD_TYPE) continue;
    if (DGifGetImageDesc(gif.get()) == GIF_ERROR) gif_failed(reader, gif->Error);
    break;
  }

  const GifImageDesc& frame = gif->Image;
  const std::uint64_t frame_right = std::uint64_t(frame.Left) + std::uint64_t(frame.Width);
  const std::uint64_t frame_bottom = std::uint64_t(frame.Top) + std::uint64_t(frame.Height);
  const std::uint64_t width = std::max<std::uint64_t>(gif->SWidth, frame_right);
  const std::uint64_t height = std::max<std::uint64_t>(gif->SHeight, frame_bottom);
  check_dimensions(ImageFormat::kGif, width, height, options);

  std::vector<std::uint8_t> indices(width * height,
                                    static_cast<std::uint8_t>(std::max(transparency, 0)));
  if (frame.Width > 0 && frame.Height > 0) {
    std::vector<GifPixelType> line(static_cast<std::size_t>(frame.Width));
    auto read_row = [&](std::uint64_t row) {
      if (DGifGetLine(gif.get(), line.data(), frame.Width) == GIF_ERROR) {
        gif_failed(reader, gif->Error);
      }
      std::memcpy(&indices[(frame.Top + row) * width + frame.Left], line.data(), line.size());
    };
    if (frame.Interlace) {
      static constexpr int kStart[4] = {0, 4, 2, 1};
      static constexpr int kStep[4] = {8, 8, 4, 2};
      for (int pass = 0; pass < 4; ++pass) {
        for (std::uint64_t row = kStart[pass]; row < std::uint64_t(frame.Height);
             row += kStep[pass]) {
          read_row(row);
        }
      }
    } else {
      for (std::uint64_t row = 0; row < std::uint64_t(frame.Height); ++row) read_row(row);
    }
  }

  const ColorMapObject* map = frame.ColorMap ? frame.ColorMap : gif->SColorMap;
  const int entries = map ? map->ColorCount : 0;
  DecodedPixels out;
  out.width = static_cast<int>(width);
  out.height = static_cast<int>(height);
  out.data.resize(indices.size() * 3);
  for (std::size_t i = 0; i < indices.size(); ++i) {
    const int index = indices[i];
    std::uint8_t* o = &out.data[i * 3];
    if (index < entries) {
      o[0] = map->Colors[index].Red;
      o[1] = map->Colors[index].Green;
      o[2] = map->Colors[index].Blue;
    } else {
      o[0] = o[1] = o[2] = static_cast<std::uint8_t>(index);
    }
  }
  return out;
}

}  // namespace gemmaserve::image::detail
