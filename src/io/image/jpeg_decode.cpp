// JPEG through libjpeg-turbo with Pillow's decoder settings (libjpeg defaults: islow IDCT, fancy
// upsampling), grey and CMYK converted as Pillow's convert("RGB") does. libjpeg's fatal errors
// longjmp back here instead of calling exit(); running out of data is an error, as in Pillow.
#include <csetjmp>
#include <cstddef>
#include <cstdio>
#include <string>

#include "io/image/image_formats.h"
// jpeglib.h needs size_t and FILE declared before it.
#include <jpeglib.h>  // NOLINT(build/include_order)

namespace gemmaserve::image::detail {
namespace {

struct JpegErrorManager {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void on_jpeg_error(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// Pillow ignores libjpeg's warnings (corrupt-data notes) and keeps decoding; so do we.
void on_jpeg_message(j_common_ptr, int) {}

constexpr const char* kTruncated = "the data is truncated";

void init_source(j_decompress_ptr) {}

boolean fill_input_buffer(j_decompress_ptr cinfo) {
  auto* err = reinterpret_cast<JpegErrorManager*>(cinfo->err);
  std::snprintf(err->message, sizeof(err->message), "%s", kTruncated);
  std::longjmp(err->jump, 1);
}

void skip_input_data(j_decompress_ptr cinfo, long count) {
  if (count <= 0) return;
  jpeg_source_mgr* src = cinfo->src;
  if (static_cast<unsigned long>(count) > src->bytes_in_buffer) fill_input_buffer(cinfo);
  src->next_input_byte += count;
  src->bytes_in_buffer -= static_cast<std::size_t>(count);
}

void term_source(j_decompress_ptr) {}

struct JpegHandles {
  jpeg_decompress_struct cinfo{};
  JpegErrorManager err{};
  jpeg_source_mgr source{};
  bool created = false;
  ~JpegHandles() {
    if (created) jpeg_destroy_decompress(&cinfo);
  }
};

struct JpegHeader {
  int width = 0, height = 0, components = 0;
  J_COLOR_SPACE out_space = JCS_RGB;
  int exif_orientation = 1;
};

// No C++ object with a destructor lives in this frame: longjmp may leave it at any libjpeg call.
bool read_jpeg(JpegHandles& h, const DecodeOptions& options, JpegHeader& header,
               std::vector<std::uint8_t>& raw) {
  if (setjmp(h.err.jump)) return false;
  jpeg_create_decompress(&h.cinfo);
  h.created = true;
  h.cinfo.src = &h.source;
  jpeg_save_markers(&h.cinfo, JPEG_APP0 + 1, 0xffff);
  jpeg_read_header(&h.cinfo, TRUE);
  check_dimensions(ImageFormat::kJpeg, h.cinfo.image_width, h.cinfo.image_height, options);
  for (jpeg_saved_marker_ptr m = h.cinfo.marker_list; m; m = m->next) {
    if (m->marker == JPEG_APP0 + 1 && m->data_length >= 6) {
      header.exif_orientation = exif_orientation({m->data, m->data_length});
      break;
    }
  }
  // Pillow's modes: 1 component "L", 3 "RGB", 4 "CMYK" (raw "CMYK;I", Adobe's inverted CMYK).
  switch (h.cinfo.num_components) {
    case 1:
      h.cinfo.out_color_space = JCS_GRAYSCALE;
      break;
    case 3:
      h.cinfo.out_color_space = JCS_RGB;
      break;
    case 4:
      h.cinfo.out_color_space = JCS_CMYK;
      break;
    default:
      std::snprintf(h.err.message, sizeof(h.err.message), "%d color components are not supported",
                    h.cinfo.num_components);
      return false;
  }
  jpeg_start_decompress(&h.cinfo);
  header.width = static_cast<int>(h.cinfo.output_width);
  header.height = static_cast<int>(h.cinfo.output_height);
  header.components = h.cinfo.output_components;
  header.out_space = h.cinfo.out_color_space;
  const std::size_t stride = std::size_t(header.width) * header.components;
  raw.resize(stride * header.height);
  while (h.cinfo.output_scanline < h.cinfo.output_height) {
    JSAMPROW row = raw.data() + stride * h.cinfo.output_scanline;
    jpeg_read_scanlines(&h.cinfo, &row, 1);
  }
  // Pillow stops once the pixels are decoded; what follows (EOI, trailing data) is not read.
  return true;
}

// Pillow's cmyk2rgb on "CMYK;I" data: c' = 255 - raw, out = nk - c'*nk/255 with nk = 255 - k'.
std::uint8_t cmyk_channel(std::uint8_t raw_c, std::uint8_t raw_k) {
  const int c = 255 - raw_c;
  const int nk = raw_k;  // 255 - (255 - raw_k)
  const int t = c * nk + 128;
  const int v = nk - (((t >> 8) + t) >> 8);
  return static_cast<std::uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
}

}  // namespace

DecodedPixels decode_jpeg(std::span<const std::uint8_t> bytes, const DecodeOptions& options) {
  JpegHandles h;
  h.cinfo.err = jpeg_std_error(&h.err.pub);
  h.err.pub.error_exit = on_jpeg_error;
  h.err.pub.emit_message = on_jpeg_message;
  h.source.next_input_byte = bytes.data();
  h.source.bytes_in_buffer = bytes.size();
  h.source.init_source = init_source;
  h.source.fill_input_buffer = fill_input_buffer;
  h.source.skip_input_data = skip_input_data;
  h.source.resync_to_restart = jpeg_resync_to_restart;
  h.source.term_source = term_source;
  JpegHeader header;
  std::vector<std::uint8_t> raw;
  if (!read_jpeg(h, options, header, raw)) throw_invalid(ImageFormat::kJpeg, h.err.message);

  DecodedPixels out;
  out.width = header.width;
  out.height = header.height;
  out.exif_orientation = header.exif_orientation;
  const std::size_t pixels = std::size_t(header.width) * header.height;
  if (header.out_space == JCS_RGB) {
    out.data = std::move(raw);
    return out;
  }
  out.data.resize(pixels * 3);
  for (std::size_t i = 0; i < pixels; ++i) {
    std::uint8_t* o = &out.data[i * 3];
    if (header.out_space == JCS_GRAYSCALE) {
      o[0] = o[1] = o[2] = raw[i];
    } else {
      const std::uint8_t* in = &raw[i * 4];
      for (int c = 0; c < 3; ++c) o[c] = cmyk_channel(in[c], in[3]);
    }
  }
  return out;
}

}  // namespace gemmaserve::image::detail
