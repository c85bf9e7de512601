// libsndfile over the request's bytes (virtual I/O), limits, truncation checks and the mono mix.
#include "io/audio/audio_decode.h"

#include <sndfile.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "core/error.h"
#include "io/audio/audio_mono.h"
#include "io/audio/audio_resample.h"
#include "io/audio/riff_wave.h"

namespace gemmaserve::audio {

namespace {

// The bytes as a read-only file for sf_open_virtual.
struct ByteSource {
  std::span<const std::uint8_t> bytes;
  sf_count_t position = 0;
};

SF_VIRTUAL_IO byte_source_io() {
  SF_VIRTUAL_IO io{};
  io.get_filelen = [](void* user) -> sf_count_t {
    return static_cast<sf_count_t>(static_cast<ByteSource*>(user)->bytes.size());
  };
  io.seek = [](sf_count_t offset, int whence, void* user) -> sf_count_t {
    auto* source = static_cast<ByteSource*>(user);
    const auto size = static_cast<sf_count_t>(source->bytes.size());
    const sf_count_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? source->position : size;
    if (offset < -base) return -1;
    source->position = base + offset;
    return source->position;
  };
  io.read = [](void* out, sf_count_t count, void* user) -> sf_count_t {
    auto* source = static_cast<ByteSource*>(user);
    const auto size = static_cast<sf_count_t>(source->bytes.size());
    const sf_count_t n =
        std::clamp<sf_count_t>(size - source->position, 0, std::max<sf_count_t>(count, 0));
    if (n == 0) return 0;  // the position may be past the end, where no pointer may be formed
    std::copy_n(source->bytes.data() + source->position, n, static_cast<std::uint8_t*>(out));
    source->position += n;
    return n;
  };
  io.write = [](const void*, sf_count_t, void*) -> sf_count_t { return 0; };
  io.tell = [](void* user) -> sf_count_t { return static_cast<ByteSource*>(user)->position; };
  return io;
}

struct SndfileCloser {
  void operator()(SNDFILE* file) const { sf_close(file); }
};
using SndfilePtr = std::unique_ptr<SNDFILE, SndfileCloser>;

// python-soundfile's names for libsndfile's major formats and subtypes; libsndfile's own
// description for the rare ones it lacks here.
std::string format_name(int code, bool major) {
  struct Name {
    int code;
    const char* name;
  };
  static constexpr Name kMajor[] = {
      {SF_FORMAT_WAV, "WAV"},  {SF_FORMAT_AIFF, "AIFF"},   {SF_FORMAT_AU, "AU"},
      {SF_FORMAT_W64, "W64"},  {SF_FORMAT_WAVEX, "WAVEX"}, {SF_FORMAT_FLAC, "FLAC"},
      {SF_FORMAT_CAF, "CAF"},  {SF_FORMAT_OGG, "OGG"},     {SF_FORMAT_RF64, "RF64"},
      {SF_FORMAT_MPEG, "MP3"}, {SF_FORMAT_NIST, "NIST"},   {SF_FORMAT_VOC, "VOC"}};
  static constexpr Name kSubtype[] = {{SF_FORMAT_PCM_S8, "PCM_S8"},
                                      {SF_FORMAT_PCM_16, "PCM_16"},
                                      {SF_FORMAT_PCM_24, "PCM_24"},
                                      {SF_FORMAT_PCM_32, "PCM_32"},
                                      {SF_FORMAT_PCM_U8, "PCM_U8"},
                                      {SF_FORMAT_FLOAT, "FLOAT"},
                                      {SF_FORMAT_DOUBLE, "DOUBLE"},
                                      {SF_FORMAT_ULAW, "ULAW"},
                                      {SF_FORMAT_ALAW, "ALAW"},
                                      {SF_FORMAT_IMA_ADPCM, "IMA_ADPCM"},
                                      {SF_FORMAT_MS_ADPCM, "MS_ADPCM"},
                                      {SF_FORMAT_GSM610, "GSM610"},
                                      {SF_FORMAT_VORBIS, "VORBIS"},
                                      {SF_FORMAT_OPUS, "OPUS"},
                                      {SF_FORMAT_ALAC_16, "ALAC_16"},
                                      {SF_FORMAT_ALAC_24, "ALAC_24"},
                                      {SF_FORMAT_MPEG_LAYER_I, "MPEG_LAYER_I"},
                                      {SF_FORMAT_MPEG_LAYER_II, "MPEG_LAYER_II"},
                                      {SF_FORMAT_MPEG_LAYER_III, "MPEG_LAYER_III"}};
  for (const Name& n : major ? std::span<const Name>(kMajor) : std::span<const Name>(kSubtype)) {
    if (n.code == code) return n.name;
  }
  SF_FORMAT_INFO info{};
  info.format = code;
  const int command = major ? SFC_GET_FORMAT_MAJOR : SFC_GET_FORMAT_SUBTYPE;
  if (sf_command(nullptr, command, &info, sizeof(info)) == 0 && info.name != nullptr) {
    return info.name;
  }
  char text[32];
  std::snprintf(text, sizeof(text), "format 0x%x", code);
  return text;
}

std::string seconds_text(double seconds, const char* style) {
  char text[64];
  std::snprintf(text, sizeof(text), style, seconds);
  return text;
}

[[noreturn]] void throw_too_long(double seconds, const AudioDecodeLimits& limits, bool at_least) {
  const std::string& source = limits.max_seconds_source;
  throw AudioTooLongError("audio is " + std::string(at_least ? "over " : "") +
                          seconds_text(seconds, "%.1f") + " s long; the limit is " +
                          seconds_text(limits.max_seconds, "%g") + " s" +
                          (source.empty() ? "" : " (" + source + ")"));
}

// The frames the header promises. libsndfile cuts a WAV's count to the bytes present (only its log
// says so), so for WAV with one block per frame the data chunk's own size is read instead.
sf_count_t promised_frames(std::span<const std::uint8_t> bytes, const SF_INFO& info) {
  const int major = info.format & SF_FORMAT_TYPEMASK;
  const int subtype = info.format & SF_FORMAT_SUBMASK;
  const bool linear = (subtype >= SF_FORMAT_PCM_S8 && subtype <= SF_FORMAT_DOUBLE) ||
                      subtype == SF_FORMAT_ULAW || subtype == SF_FORMAT_ALAW;
  if ((major == SF_FORMAT_WAV || major == SF_FORMAT_WAVEX) && linear) {
    const std::optional<std::int64_t> frames = detail::riff_wave_promised_frames(bytes);
    if (frames && *frames > info.frames) return *frames;
  }
  return info.frames;
}

// Frames read per sf_readf_float call: bounds the interleaved scratch buffer.
constexpr sf_count_t kBlockFrames = 1 << 14;
// No codec libsndfile reads packs more than 64 frames into a byte (Opus at 6 kb/s: 48000 / 750),
// so a header promising more than that is trusted for the reservation only as far as the bytes go.
constexpr sf_count_t kMaxFramesPerByte = 64;

}  // namespace

std::string_view sniff_audio_format(std::span<const std::uint8_t> b) {
  auto starts_with = [&](std::string_view magic, std::size_t offset = 0) {
    if (b.size() < offset + magic.size()) return false;
    return std::equal(magic.begin(), magic.end(), b.begin() + offset,
                      [](char m, std::uint8_t c) { return static_cast<std::uint8_t>(m) == c; });
  };
  if ((starts_with("RIFF") || starts_with("RIFX")) && starts_with("WAVE", 8)) return "WAV";
  if (starts_with("RF64") && starts_with("WAVE", 8)) return "RF64";
  if (starts_with("fLaC")) return "FLAC";
  if (starts_with("OggS")) return "OGG";
  if (starts_with("FORM") && (starts_with("AIFF", 8) || starts_with("AIFC", 8))) return "AIFF";
  if (starts_with("ID3") || (b.size() >= 2 && b[0] == 0xFF && (b[1] & 0xE0) == 0xE0)) return "MP3";
  return "";
}

DecodedAudio decode_audio(std::span<const std::uint8_t> bytes, const AudioDecodeLimits& limits) {
  if (bytes.empty()) throw InputError("audio data is empty");
  if (bytes.size() > limits.max_bytes) {
    throw InputError("audio is " + std::to_string(bytes.size()) + " bytes, over the limit of " +
                     std::to_string(limits.max_bytes) + " bytes");
  }
  ByteSource source{bytes};
  SF_VIRTUAL_IO io = byte_source_io();
  SF_INFO info{};
  SndfilePtr file(sf_open_virtual(&io, SFM_READ, &info, &source));
  if (!file) {
    // sf_strerror(nullptr) is libsndfile's last open error (process-wide, as soundfile reads it).
    throw InputError(std::string("unsupported or invalid audio data (libsndfile: ") +
                     sf_strerror(nullptr) + ")");
  }
  DecodedAudio audio;
  audio.format = format_name(info.format & SF_FORMAT_TYPEMASK, true);
  audio.subtype = format_name(info.format & SF_FORMAT_SUBMASK, false);
  const std::string what = audio.format + " " + audio.subtype + " audio";
  if (info.channels <= 0) {
    throw InputError("invalid " + what + ": " + std::to_string(info.channels) + " channels");
  }
  if (info.samplerate <= 0) {
    throw InputError("invalid " + what + ": sample rate " + std::to_string(info.samplerate) +
                     " Hz");
  }
  audio.channels = info.channels;
  audio.source_sample_rate = info.samplerate;
  audio.sample_rate = info.samplerate;
  const double max_frames = limits.max_seconds * info.samplerate;
  // libsndfile says SF_COUNT_MAX when the length is unknown (a stream): the limit applies as read.
  const bool known_length = info.frames >= 0 && info.frames != SF_COUNT_MAX;
  if (known_length) check_audio_length(info.frames, info.samplerate, limits);

  // soundfile's read(dtype="float32"): integers scaled by 1 / 2^(bits-1) (PCM16: v / 32768),
  // floats as stored. Normalisation is libsndfile's default; set here so it cannot drift.
  sf_command(file.get(), SFC_SET_NORM_FLOAT, nullptr, SF_TRUE);
  const sf_count_t byte_bound = static_cast<sf_count_t>(bytes.size()) * kMaxFramesPerByte;
  audio.samples.reserve(
      static_cast<std::size_t>(known_length ? std::min(info.frames, byte_bound) : kBlockFrames));
  std::vector<float> block(static_cast<std::size_t>(kBlockFrames) * info.channels);
  sf_count_t total = 0;
  while (true) {
    const sf_count_t got = sf_readf_float(file.get(), block.data(), kBlockFrames);
    if (got <= 0) break;
    total += got;
    if (double(total) > max_frames) {
      throw_too_long(double(total) / info.samplerate, limits, true);
    }
    append_mono(std::span<const float>(block.data(), static_cast<std::size_t>(got) * info.channels),
                info.channels, audio.samples);
  }
  if (sf_error(file.get()) != SF_ERR_NO_ERROR) {
    throw InputError("corrupt " + what + " after " + std::to_string(total) +
                     " frames (libsndfile: " + sf_strerror(file.get()) + ")");
  }
  const sf_count_t promised = promised_frames(bytes, info);
  // MP3 lengths without a Xing/LAME header are libmpg123's estimate, so only they may fall short.
  const bool exact_length = (info.format & SF_FORMAT_TYPEMASK) != SF_FORMAT_MPEG;
  if (known_length && exact_length && total < promised) {
    throw InputError("truncated or corrupt " + what + ": the header promises " +
                     std::to_string(promised) + " frames but only " + std::to_string(total) +
                     " could be decoded");
  }
  if (total == 0) throw InputError(what + " has no samples");
  audio.source_frames = total;
  return audio;
}

void check_audio_length(std::int64_t frames, int sample_rate, const AudioDecodeLimits& limits) {
  if (double(frames) > limits.max_seconds * sample_rate) {
    throw_too_long(double(frames) / sample_rate, limits, false);
  }
}

DecodedAudio load_audio(std::span<const std::uint8_t> bytes, int target_rate,
                        const AudioDecodeLimits& limits) {
  DecodedAudio audio = decode_audio(bytes, limits);
  if (audio.sample_rate != target_rate) {
    audio.samples = resample_audio(audio.samples, audio.sample_rate, target_rate);
    audio.sample_rate = target_rate;
  }
  return audio;
}

}  // namespace gemmaserve::audio
