// PNG through libpng, unpacked the way Pillow's PngImagePlugin modes and convert("RGB") do:
// 16-bit samples keep their high byte, 16-bit grey (mode "I") clips to 0..255, 16-bit grey +
// alpha is "RGBA", palettes expand
// with Pillow's grey ramp past the PLTE entries, tRNS and LA alpha are dropped.
#include <png.h>

#include <csetjmp>
#include <cstring>
#include <string>

#include "io/image/image_formats.h"

namespace gemmaserve::image::detail {
namespace {

struct PngReader {
  std::span<const std::uint8_t> bytes;
  std::size_t offset = 0;
  std::string error;
};

void on_png_error(png_structp png, png_const_charp message) {
  auto* reader = static_cast<PngReader*>(png_get_error_ptr(png));
  reader->error = message ? message : "unknown error";
  png_longjmp(png, 1);
}

void on_png_warning(png_structp, png_const_charp) {}

void on_png_read(png_structp png, png_bytep out, png_size_t length) {
  auto* reader = static_cast<PngReader*>(png_get_io_ptr(png));
  if (length > reader->bytes.size() - reader->offset) png_error(png, "the data is truncated");
  std::memcpy(out, reader->bytes.data() + reader->offset, length);
  reader->offset += length;
}

// The libpng structures, released on every path (the error path included).
struct PngHandles {
  png_structp png = nullptr;
  png_infop info = nullptr;
  ~PngHandles() { png_destroy_read_struct(&png, info ? &info : nullptr, nullptr); }
};

struct PngHeader {
  png_uint_32 width = 0, height = 0;
  int bit_depth = 0, color_type = 0;
  int exif_orientation = 1;
  std::vector<std::uint8_t> palette;  // RGB triples
};

// Everything between setjmp and a possible longjmp lives in the caller's frame: no C++ object
// with a destructor is skipped by the jump.
bool read_png(PngHandles& h, const DecodeOptions& options, PngHeader& header,
              std::vector<std::uint8_t>& raw, std::vector<png_bytep>& rows) {
  if (setjmp(png_jmpbuf(h.png))) return false;
  png_set_user_limits(h.png, 0x7fffffff, 0x7fffffff);  // our own pixel limit applies instead
  png_read_info(h.png, h.info);
  png_get_IHDR(h.png, h.info, &header.width, &header.height, &header.bit_depth, &header.color_type,
               nullptr, nullptr, nullptr);
  check_dimensions(ImageFormat::kPng, header.width, header.height, options);
  png_bytep exif = nullptr;
  png_uint_32 exif_length = 0;
  if (png_get_eXIf_1(h.png, h.info, &exif_length, &exif) && exif) {
    header.exif_orientation = exif_orientation({exif, exif_length});
  }
  if (header.color_type == PNG_COLOR_TYPE_PALETTE) {
    png_colorp palette = nullptr;
    int entries = 0;
    if (png_get_PLTE(h.png, h.info, &palette, &entries)) {
      for (int i = 0; i < entries; ++i) {
        header.palette.insert(header.palette.end(),
                              {palette[i].red, palette[i].green, palette[i].blue});
      }
    }
  }
  if (header.bit_depth < 8) {
    if (header.color_type == PNG_COLOR_TYPE_GRAY) {
      png_set_expand_gray_1_2_4_to_8(h.png);  // Pillow's "1", "L;2", "L;4": scaled to 0..255
    } else {
      png_set_packing(h.png);  // palette indices, one per byte
    }
  }
  png_set_interlace_handling(h.png);
  png_read_update_info(h.png, h.info);
  const std::size_t row_bytes = png_get_rowbytes(h.png, h.info);
  raw.resize(row_bytes * header.height);
  rows.resize(header.height);
  for (png_uint_32 y = 0; y < header.height; ++y) rows[y] = raw.data() + y * row_bytes;
  png_read_image(h.png, rows.data());
  return true;
}

}  // namespace

DecodedPixels decode_png(std::span<const std::uint8_t> bytes, const DecodeOptions& options) {
  PngReader reader;
  reader.bytes = bytes;
  PngHandles h;
  h.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &reader, on_png_error, on_png_warning);
  if (!h.png) throw_invalid(ImageFormat::kPng, "out of memory");
  h.info = png_create_info_struct(h.png);
  if (!h.info) throw_invalid(ImageFormat::kPng, "out of memory");
  png_set_read_fn(h.png, &reader, on_png_read);
  PngHeader header;
  std::vector<std::uint8_t> raw;
  std::vector<png_bytep> rows;
  if (!read_png(h, options, header, raw, rows)) {
    throw_invalid(ImageFormat::kPng, reader.error);
  }

  DecodedPixels out;
  out.width = static_cast<int>(header.width);
  out.height = static_cast<int>(header.height);
  out.exif_orientation = header.exif_orientation;
  const std::size_t pixels = std::size_t(header.width) * header.height;
  const bool wide = header.bit_depth == 16;
  const std::size_t sample = wide ? 2 : 1;  // big-endian: the high byte comes first
  // Pillow opens 16-bit grey + alpha as "RGBA" (rawmode "LA;16B"), 8-bit as "LA".
  const bool rgba_mode = header.color_type == PNG_COLOR_TYPE_RGB_ALPHA ||
                         (header.color_type == PNG_COLOR_TYPE_GRAY_ALPHA && wide);
  out.channels = rgba_mode ? 4 : 3;
  out.data.resize(pixels * out.channels);
  std::uint8_t* o = out.data.data();
  const std::uint8_t* in = raw.data();
  for (std::size_t i = 0; i < pixels; ++i) {
    switch (header.color_type) {
      case PNG_COLOR_TYPE_GRAY: {
        std::uint8_t v = in[0];
        if (wide) {  // mode "I" -> RGB clips to 0..255
          const std::uint32_t full = (std::uint32_t{in[0]} << 8) | in[1];
          v = static_cast<std::uint8_t>(full > 255 ? 255 : full);
        }
        o[0] = o[1] = o[2] = v;
        in += sample;
        o += 3;
        break;
      }
      case PNG_COLOR_TYPE_GRAY_ALPHA:
        o[0] = o[1] = o[2] = in[0];
        if (rgba_mode) o[3] = in[sample];
        in += 2 * sample;
        o += out.channels;
        break;
      case PNG_COLOR_TYPE_PALETTE: {
        const std::size_t index = in[0];
        for (int c = 0; c < 3; ++c) {
          o[c] = index * 3 < header.palette.size() ? header.palette[index * 3 + c]
                                                   : static_cast<std::uint8_t>(index);
        }
        in += 1;
        o += 3;
        break;
      }
      case PNG_COLOR_TYPE_RGB:
        for (int c = 0; c < 3; ++c) o[c] = in[c * sample];
        in += 3 * sample;
        o += 3;
        break;
      case PNG_COLOR_TYPE_RGB_ALPHA:
        for (int c = 0; c < 4; ++c) o[c] = in[c * sample];
        in += 4 * sample;
        o += 4;
        break;
      default:
        throw_invalid(ImageFormat::kPng, "unknown color type " + std::to_string(header.color_type));
    }
  }
  return out;
}

}  // namespace gemmaserve::image::detail
