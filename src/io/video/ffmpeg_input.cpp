// The in-memory AVIOContext, the demuxer opened on it, and FFmpeg's log sent to ours at debug.
#include "io/video/ffmpeg_input.h"

extern "C" {
#include <libavutil/log.h>
#include <libavutil/mem.h>
}

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <new>

#include "core/logging.h"
#include "io/video/video_formats.h"

namespace gemmaserve::video::detail {

namespace {

// libavformat's read buffer: reads are copies out of the span, so its size only sets their count.
constexpr int kAvioBufferBytes = 64 << 10;

// FFmpeg's errors and warnings as gemmaserve debug lines (the clip's fault is in our InputError).
void forward_ffmpeg_log(void* context, int level, const char* format, va_list args) {
  if (level > AV_LOG_WARNING || log::level() > log::Level::kDebug) return;
  char line[1024];
  int print_prefix = 1;
  av_log_format_line2(context, level, format, args, line, sizeof(line), &print_prefix);
  std::size_t length = std::strlen(line);
  while (length > 0 && (line[length - 1] == '\n' || line[length - 1] == '\r')) --length;
  GS_LOG_DEBUG << "FFmpeg: " << std::string_view(line, length);
}

int refuse_io_open(AVFormatContext*, AVIOContext**, const char* url, int, AVDictionary**) {
  GS_LOG_DEBUG << "FFmpeg asked to open '" << (url ? url : "") << "' beside the video: refused";
  return AVERROR(EPERM);
}

}  // namespace

void AvioContextFreer::operator()(AVIOContext* context) const {
  av_freep(&context->buffer);  // libavformat may have replaced the buffer it was given
  avio_context_free(&context);
}

std::string ffmpeg_error_text(int error) {
  char text[AV_ERROR_MAX_STRING_SIZE] = {};
  if (av_strerror(error, text, sizeof(text)) < 0) {
    std::snprintf(text, sizeof(text), "error %d", error);
  }
  return text;
}

FfmpegInput::FfmpegInput(std::span<const std::uint8_t> bytes, const char* demuxer,
                         const char* container, const std::string& decoder_whitelist)
    : reader_{bytes} {
  // FFmpeg keeps one log callback per process; every input sets the same one, so no flag of ours
  // records that it was set.
  av_log_set_callback(forward_ffmpeg_log);

  auto* buffer = static_cast<unsigned char*>(av_malloc(kAvioBufferBytes));
  if (!buffer) throw std::bad_alloc();
  auto read = [](void* opaque, std::uint8_t* out, int size) -> int {
    auto* reader = static_cast<MemoryReader*>(opaque);
    const auto total = static_cast<std::int64_t>(reader->bytes.size());
    const std::int64_t count = std::clamp<std::int64_t>(total - reader->position, 0, size);
    if (count == 0) return AVERROR_EOF;
    std::memcpy(out, reader->bytes.data() + reader->position, static_cast<std::size_t>(count));
    reader->position += count;
    return static_cast<int>(count);
  };
  auto seek = [](void* opaque, std::int64_t offset, int whence) -> std::int64_t {
    auto* reader = static_cast<MemoryReader*>(opaque);
    const auto total = static_cast<std::int64_t>(reader->bytes.size());
    if (whence & AVSEEK_SIZE) return total;
    std::int64_t base = 0;
    switch (whence & ~AVSEEK_FORCE) {
      case SEEK_SET:
        break;
      case SEEK_CUR:
        base = reader->position;
        break;
      case SEEK_END:
        base = total;
        break;
      default:
        return AVERROR(EINVAL);
    }
    if (offset < -base || offset > INT64_MAX - base) return AVERROR(EINVAL);
    reader->position = base + offset;  // past the end is allowed, as in a file: reads give EOF
    return reader->position;
  };
  avio_.reset(avio_alloc_context(buffer, kAvioBufferBytes, 0, &reader_, read, nullptr, seek));
  if (!avio_) {
    av_free(buffer);
    throw std::bad_alloc();
  }

  AVFormatContext* context = avformat_alloc_context();
  if (!context) throw std::bad_alloc();
  context->pb = avio_.get();
  context->flags |= AVFMT_FLAG_CUSTOM_IO;
  context->io_open = refuse_io_open;
  AVDictionary* options = nullptr;
  av_dict_set(&options, "codec_whitelist", decoder_whitelist.c_str(), 0);
  av_dict_set(&options, "format_whitelist", demuxer, 0);
  const int opened =
      avformat_open_input(&context, nullptr, av_find_input_format(demuxer), &options);
  av_dict_free(&options);
  if (opened < 0) {  // avformat_open_input has freed the context
    throw_unreadable("the " + std::string(container) + " container is invalid (" +
                     ffmpeg_error_text(opened) + ")");
  }
  format_.reset(context);
}

}  // namespace gemmaserve::video::detail
