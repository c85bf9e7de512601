// Audio decoding against the gemma4-tiny fixture's references (tests/data/audio/, values from
// ref/audio.json: the mono float32 waveform vLLM's loader gives, by sha256 and first samples),
// round trips through FLAC / Vorbis / Opus / MP3 and 8-32 bit WAV written with libsndfile, the
// soxr resampler on a 22.05 kHz file, and the exact InputError of each kind of bad input.
#include "io/audio/audio_decode.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sndfile.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <functional>
#include <memory>
#include <numbers>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/block_hash.h"
#include "io/audio/audio_resample.h"
#include "test_support.h"

namespace gemmaserve {
namespace {

using audio::AudioDecodeLimits;
using audio::decode_audio;
using audio::DecodedAudio;
using Bytes = std::vector<std::uint8_t>;

Bytes read_fixture(const std::string& name) {
  std::ifstream in(testing::source_dir() / "tests/data/audio" / name, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), {});
}

std::string sha256_f32le(const std::vector<float>& samples) {
  static_assert(std::endian::native == std::endian::little, "the reference hashes f32le bytes");
  Sha256 sha;
  sha.update(std::span(reinterpret_cast<const std::uint8_t*>(samples.data()),
                       samples.size() * sizeof(float)));
  return BlockHash{sha.finish()}.hex();
}

std::string decode_error(const Bytes& bytes, const AudioDecodeLimits& limits = {}) {
  return testing::input_error_of([&] { decode_audio(bytes, limits); });
}

// A growable in-memory file for libsndfile's virtual I/O, to write (and re-read) test files.
struct MemoryFile {
  Bytes bytes;
  sf_count_t position = 0;
};

SF_VIRTUAL_IO memory_io() {
  SF_VIRTUAL_IO io{};
  io.get_filelen = [](void* user) -> sf_count_t {
    return static_cast<sf_count_t>(static_cast<MemoryFile*>(user)->bytes.size());
  };
  io.seek = [](sf_count_t offset, int whence, void* user) -> sf_count_t {
    auto* f = static_cast<MemoryFile*>(user);
    const auto size = static_cast<sf_count_t>(f->bytes.size());
    f->position = (whence == SEEK_SET ? 0 : whence == SEEK_CUR ? f->position : size) + offset;
    return f->position;
  };
  io.read = [](void* out, sf_count_t count, void* user) -> sf_count_t {
    auto* f = static_cast<MemoryFile*>(user);
    const sf_count_t n = std::max<sf_count_t>(
        0, std::min<sf_count_t>(count, sf_count_t(f->bytes.size()) - f->position));
    if (n == 0) return 0;
    std::copy_n(f->bytes.data() + f->position, n, static_cast<std::uint8_t*>(out));
    f->position += n;
    return n;
  };
  io.write = [](const void* data, sf_count_t count, void* user) -> sf_count_t {
    auto* f = static_cast<MemoryFile*>(user);
    if (f->bytes.size() < std::size_t(f->position + count)) f->bytes.resize(f->position + count);
    std::copy_n(static_cast<const std::uint8_t*>(data), count, f->bytes.data() + f->position);
    f->position += count;
    return count;
  };
  io.tell = [](void* user) -> sf_count_t { return static_cast<MemoryFile*>(user)->position; };
  return io;
}

struct SndfileCloser {
  void operator()(SNDFILE* sf) const { sf_close(sf); }
};
using SndfilePtr = std::unique_ptr<SNDFILE, SndfileCloser>;

// The file libsndfile writes in `format`, or nullopt when this build cannot write it.
std::optional<Bytes> encode(int format, int channels, int rate,
                            const std::function<void(SNDFILE*)>& write) {
  MemoryFile file;
  SF_VIRTUAL_IO io = memory_io();
  SF_INFO info{};
  info.format = format;
  info.channels = channels;
  info.samplerate = rate;
  {
    SndfilePtr sf(sf_open_virtual(&io, SFM_WRITE, &info, &file));
    if (!sf) return std::nullopt;
    write(sf.get());
  }  // closing writes the headers' final sizes
  return file.bytes;
}

// The interleaved 16-bit values of a PCM_16 file, as stored.
std::vector<short> read_shorts(const Bytes& wav, int channels) {
  MemoryFile file{wav};
  SF_VIRTUAL_IO io = memory_io();
  SF_INFO info{};
  SndfilePtr sf(sf_open_virtual(&io, SFM_READ, &info, &file));
  if (!sf) {
    ADD_FAILURE() << "libsndfile cannot open the fixture: " << sf_strerror(nullptr);
    return {};
  }
  EXPECT_EQ(info.channels, channels);
  std::vector<short> values(static_cast<std::size_t>(info.frames) * info.channels);
  EXPECT_EQ(sf_readf_short(sf.get(), values.data(), info.frames), info.frames);
  return values;
}

// Amplitude of the `hz` component of x[from, to) (Hann-windowed projection).
double amplitude(const std::vector<float>& x, int rate, double hz, std::size_t from,
                 std::size_t to) {
  double re = 0, im = 0, weight = 0;
  for (std::size_t i = from; i < to; ++i) {
    const double w =
        0.5 - 0.5 * std::cos(2 * std::numbers::pi * double(i - from) / double(to - from));
    const double phase = 2 * std::numbers::pi * hz * double(i) / rate;
    re += w * x[i] * std::cos(phase);
    im += w * x[i] * std::sin(phase);
    weight += w;
  }
  return 2 * std::hypot(re, im) / weight;
}

// What ref/audio.json says of each fixture file (decoded_waveform_sha256_f32le, decoded_first8).
struct FixtureCase {
  const char* file;
  const char* subtype;
  int channels;
  int sample_rate;
  std::size_t num_samples;
  const char* sha256;
  float first8[8];
};

constexpr FixtureCase kFixtures[] = {
    {"speech_16k_mono_s16.wav",
     "PCM_16",
     1,
     16000,
     27200,
     "d7d1f802540315699b2541ef6c337a90e2d021f803f712fc7bb2c4ce73eb2a8c",
     {0.0f, 3.0517578125e-05f, 9.1552734375e-05f, 0.0001220703125f, 0.00018310546875f,
      0.000335693359375f, 0.000640869140625f, 0.001129150390625f}},
    {"sweep_16k_mono_f32.wav",
     "FLOAT",
     1,
     16000,
     9600,
     "508ae5adf80f88324258987c5e552bf4f494870d3238f1e09ccec89c852d4f49",
     {0.0f, 9.420853075425839e-07f, 7.5344182732806075e-06f, 2.541190588090103e-05f,
      6.017429768689908e-05f, 0.00011736594751710072f, 0.00020245564519427717f,
      0.00032081655808724463f}},
    {"stereo_16k_s16.wav",
     "PCM_16",
     2,
     16000,
     35200,
     "555c9b3e174d7e4dc35c280cc55099e167eecabf4bb85dc4f8bb3c553730a67e",
     {0.0f, 0.0f, 1.52587890625e-05f, 0.0f, 1.52587890625e-05f, 1.52587890625e-05f,
      9.1552734375e-05f, 0.0002288818359375f}},
    {"stereo_16k_f32.wav",
     "FLOAT",
     2,
     16000,
     7200,
     "6bfde0d4838652bb31cf2ef25eb25265dd34fa8c2cecc4b4c97a5e030a3ad41b",
     {0.0f, 3.957669832743704e-05f, 0.00018310190353076905f, 0.00020306506485212594f,
      7.654834189452231e-05f, 0.0003974157152697444f, 0.0014855614863336086f,
      0.002374318428337574f}},
    {"blip_16k_mono_s16.wav",
     "PCM_16",
     1,
     16000,
     1234,
     "3003ad0b0a9f6ec8f80a27cfddf6d3cf3c0ec07b38ae8e774eb34b508ba78330",
     {0.01751708984375f, 0.58648681640625f, 0.831085205078125f, 0.579071044921875f,
      -0.003631591796875f, -0.55633544921875f, -0.829437255859375f, -0.531036376953125f}},
};

TEST(AudioDecodeTest, FixtureWavsDecodeToTheReferenceMonoWaveform) {
  for (const FixtureCase& c : kFixtures) {
    SCOPED_TRACE(c.file);
    const DecodedAudio audio = decode_audio(read_fixture(c.file));
    EXPECT_EQ(audio.format, "WAV");
    EXPECT_EQ(audio::sniff_audio_format(read_fixture(c.file)), "WAV");
    EXPECT_EQ(audio.subtype, c.subtype);
    EXPECT_EQ(audio.channels, c.channels);
    EXPECT_EQ(audio.source_sample_rate, c.sample_rate);
    EXPECT_EQ(audio.sample_rate, c.sample_rate);
    EXPECT_EQ(audio.source_frames, std::int64_t(c.num_samples));
    ASSERT_EQ(audio.samples.size(), c.num_samples);
    for (int i = 0; i < 8; ++i) EXPECT_EQ(audio.samples[i], c.first8[i]) << "sample " << i;
    EXPECT_EQ(sha256_f32le(audio.samples), c.sha256);
  }
}

TEST(AudioDecodeTest, StereoDownMixIsTheChannelMeanNotOneChannel) {
  // L = c + d, R = c - d: the mean is the tones c; either channel alone carries the noise d.
  const DecodedAudio audio = decode_audio(read_fixture("stereo_16k_s16.wav"));
  const std::vector<short> lr = read_shorts(read_fixture("stereo_16k_s16.wav"), 2);
  ASSERT_EQ(lr.size(), 2 * audio.samples.size());
  for (std::size_t i = 0; i < audio.samples.size(); ++i) {
    ASSERT_EQ(audio.samples[i], (lr[2 * i] / 32768.0f + lr[2 * i + 1] / 32768.0f) / 2.0f) << i;
  }
  std::vector<float> left(audio.samples.size());
  for (std::size_t i = 0; i < left.size(); ++i) left[i] = lr[2 * i] / 32768.0f;
  EXPECT_NE(sha256_f32le(left), kFixtures[2].sha256);
}

TEST(AudioDecodeTest, ManyChannelsAreAveragedAsNumpyMeanDoes) {
  // 3 frames of 9 float channels and numpy 1.24's np.mean(y.T, axis=0): its pairwise sum from 8
  // values on rounds differently from a running sum in frames 0 and 1.
  const std::vector<float> frames = {
      0x1.3aeb54p+0f,   0x1.2abedcp+8f,   -0x1.12234ap+8f,  -0x1.c7fba8p-1f,  -0x1.d19538p-2f,
      -0x1.fbb918p-1f,  0x1.f88568p-15f,  0x1.571858p+0f,   -0x1.f804fcp-2f,  -0x1.454ebcp-11f,
      0x1.e9d79p+8f,    0x1.76392p-12f,   0x1.ba23bp-14f,   -0x1.e7d54ep-11f, -0x1.d40776p+4f,
      0x1.5ba6dp+9f,    -0x1.500dbcp+10f, -0x1.dfd84cp-12f, -0x1.db4e42p+10f, -0x1.4a1f26p+0f,
      -0x1.d77bf2p+0f,  -0x1.ed0598p-13f, -0x1.44776p+0f,   0x1.0f43aep+8f,   0x1.4106b6p-3f,
      -0x1.8805cap-13f, -0x1.42252ep+1f};
  const std::vector<float> mean9 = {0x1.5a4c12p+1f, -0x1.4ecbcp+4f, -0x1.6bb70ap+7f};
  const std::vector<float> mean3 = {0x1.139a96p+3f, 0x1.468faap+7f, -0x1.3d647p+9f};
  const auto wav9 = encode(SF_FORMAT_WAV | SF_FORMAT_FLOAT, 9, 16000,
                           [&](SNDFILE* sf) { sf_writef_float(sf, frames.data(), 3); });
  ASSERT_TRUE(wav9);
  EXPECT_EQ(decode_audio(*wav9).samples, mean9);
  std::vector<float> first3;
  for (int f = 0; f < 3; ++f) first3.insert(first3.end(), &frames[f * 9], &frames[f * 9 + 3]);
  const auto wav3 = encode(SF_FORMAT_WAV | SF_FORMAT_FLOAT, 3, 16000,
                           [&](SNDFILE* sf) { sf_writef_float(sf, first3.data(), 3); });
  ASSERT_TRUE(wav3);
  EXPECT_EQ(decode_audio(*wav3).samples, mean3);
}

TEST(AudioDecodeTest, PcmWidthsDecodeToValueOverTwoToTheBitsMinusOne) {
  // libsndfile stores the top bits of what it is given; its float read divides by 2^(bits-1).
  const std::vector<int> v8 = {-128, -1, 0, 1, 127}, v24 = {-8388608, -1, 0, 1, 8388607};
  const std::vector<int> v32 = {INT32_MIN, -1, 0, 1, 123456789, INT32_MAX};
  struct Width {
    int subtype;
    const char* name;
    std::vector<int> values;
    int shift;
    float scale;
  };
  const Width widths[] = {{SF_FORMAT_PCM_U8, "PCM_U8", v8, 24, 128.0f},
                          {SF_FORMAT_PCM_24, "PCM_24", v24, 8, 8388608.0f},
                          {SF_FORMAT_PCM_32, "PCM_32", v32, 0, 2147483648.0f}};
  for (const Width& w : widths) {
    SCOPED_TRACE(w.name);
    std::vector<int> stored;
    for (int v : w.values) stored.push_back(static_cast<int>(std::uint32_t(v) << w.shift));
    const auto wav = encode(SF_FORMAT_WAV | w.subtype, 1, 8000, [&](SNDFILE* sf) {
      sf_writef_int(sf, stored.data(), sf_count_t(stored.size()));
    });
    ASSERT_TRUE(wav);
    const DecodedAudio audio = decode_audio(*wav);
    EXPECT_EQ(audio.subtype, w.name);
    ASSERT_EQ(audio.samples.size(), w.values.size());
    for (std::size_t i = 0; i < w.values.size(); ++i) {
      EXPECT_EQ(audio.samples[i], static_cast<float>(w.values[i]) / w.scale) << w.values[i];
    }
  }
}

TEST(AudioDecodeTest, FloatWavAndFlacRoundTripsAreExact) {
  const DecodedAudio sweep = decode_audio(read_fixture("sweep_16k_mono_f32.wav"));
  const auto wav = encode(SF_FORMAT_WAV | SF_FORMAT_FLOAT, 1, 16000, [&](SNDFILE* sf) {
    sf_writef_float(sf, sweep.samples.data(), sf_count_t(sweep.samples.size()));
  });
  ASSERT_TRUE(wav);
  EXPECT_EQ(sha256_f32le(decode_audio(*wav).samples), kFixtures[1].sha256);

  for (const char* name : {"speech_16k_mono_s16.wav", "stereo_16k_s16.wav"}) {
    SCOPED_TRACE(name);
    const DecodedAudio original = decode_audio(read_fixture(name));
    const std::vector<short> values = read_shorts(read_fixture(name), original.channels);
    const auto flac =
        encode(SF_FORMAT_FLAC | SF_FORMAT_PCM_16, original.channels, 16000, [&](SNDFILE* sf) {
          sf_writef_short(sf, values.data(), sf_count_t(values.size() / original.channels));
        });
    if (!flac) GTEST_SKIP() << "this libsndfile cannot write FLAC";
    EXPECT_EQ(audio::sniff_audio_format(*flac), "FLAC");
    const DecodedAudio decoded = decode_audio(*flac);
    EXPECT_EQ(decoded.format, "FLAC");
    EXPECT_EQ(decoded.subtype, "PCM_16");
    EXPECT_EQ(decoded.channels, original.channels);
    EXPECT_EQ(decoded.samples, original.samples);
  }
}

TEST(AudioDecodeTest, LossyContainersDecodeCloseToTheSource) {
  // Two steady tones at 16 kHz. Lossy codecs keep each tone's amplitude but not the samples
  // (and may pad or delay by a frame), so the check is each tone's amplitude within 0.03 of
  // 0.5 / 0.25 away from the edges, and the length within one codec frame (2048 samples).
  const int rate = 16000;
  std::vector<float> tones(rate);
  for (int i = 0; i < rate; ++i) {
    const double t = double(i) / rate;
    tones[i] = float(0.5 * std::sin(2 * std::numbers::pi * 440 * t) +
                     0.25 * std::sin(2 * std::numbers::pi * 1000 * t));
  }
  struct Lossy {
    int format;
    const char* container;
    const char* subtype;
  };
  const Lossy formats[] = {{SF_FORMAT_OGG | SF_FORMAT_VORBIS, "OGG", "VORBIS"},
                           {SF_FORMAT_OGG | SF_FORMAT_OPUS, "OGG", "OPUS"},
                           {SF_FORMAT_MPEG | SF_FORMAT_MPEG_LAYER_III, "MP3", "MPEG_LAYER_III"}};
  std::vector<std::string> skipped;
  for (const Lossy& f : formats) {
    SCOPED_TRACE(f.subtype);
    const auto bytes = encode(f.format, 1, rate, [&](SNDFILE* sf) {
      sf_writef_float(sf, tones.data(), sf_count_t(tones.size()));
    });
    if (!bytes) {
      skipped.push_back(f.subtype);
      continue;
    }
    EXPECT_EQ(audio::sniff_audio_format(*bytes), f.container);
    const DecodedAudio audio = decode_audio(*bytes);
    EXPECT_EQ(audio.format, f.container);
    EXPECT_EQ(audio.subtype, f.subtype);
    EXPECT_EQ(audio.sample_rate, rate);
    EXPECT_NEAR(double(audio.samples.size()), double(tones.size()), 2048);
    ASSERT_GE(audio.samples.size(), 12000u);
    EXPECT_NEAR(amplitude(audio.samples, rate, 440, 2000, 12000), 0.5, 0.03);
    EXPECT_NEAR(amplitude(audio.samples, rate, 1000, 2000, 12000), 0.25, 0.03);
  }
  if (!skipped.empty()) {
    GTEST_SKIP() << "this libsndfile cannot write " << ::testing::PrintToString(skipped);
  }
}

TEST(AudioDecodeTest, ResampledTo16kHzHasLibrosasLengthAndKeepsTheTones) {
  const Bytes bytes = read_fixture("tone_22k05_mono_s16.wav");
  const DecodedAudio native = decode_audio(bytes);
  ASSERT_EQ(native.sample_rate, 22050);
  ASSERT_EQ(native.samples.size(), 17640u);
  const DecodedAudio audio = audio::load_audio(bytes, 16000);
  EXPECT_EQ(audio.source_sample_rate, 22050);
  EXPECT_EQ(audio.sample_rate, 16000);
  // ceil(17640 * 16000 / 22050) = 12800, librosa.resample's fix_length.
  ASSERT_EQ(audio.samples.size(), 12800u);
  // 0.4 at 523.25 Hz and 0.25 at 1760 Hz survive; 9.5 kHz is past the new Nyquist and must be
  // filtered out, not folded to 16000 - 9500 = 6500 Hz (where a naive resampler puts 0.15).
  EXPECT_NEAR(amplitude(audio.samples, 16000, 523.25, 1000, 11800), 0.4, 0.004);
  EXPECT_NEAR(amplitude(audio.samples, 16000, 1760, 1000, 11800), 0.25, 0.004);
  EXPECT_LT(amplitude(audio.samples, 16000, 6500, 1000, 11800), 0.002);
  EXPECT_NE(audio.samples.back(), 0.0f) << "soxr's flushed tail must reach the end";
}

TEST(AudioDecodeTest, ResamplingKeepsEqualRatesAndLengthsOfOtherRatios) {
  const DecodedAudio blip = decode_audio(read_fixture("blip_16k_mono_s16.wav"));
  EXPECT_EQ(audio::resample_audio(blip.samples, 16000, 16000), blip.samples);
  EXPECT_EQ(audio::load_audio(read_fixture("blip_16k_mono_s16.wav"), 16000).samples, blip.samples);
  EXPECT_EQ(audio::resample_audio(blip.samples, 16000, 44100).size(), 3402u);  // ceil(3401.2)
  EXPECT_EQ(audio::resample_audio(blip.samples, 16000, 8000).size(), 617u);
  EXPECT_EQ(audio::resample_audio(std::vector<float>{}, 22050, 16000).size(), 0u);
  EXPECT_EQ(testing::input_error_of([&] { audio::resample_audio(blip.samples, 0, 16000); }),
            "cannot resample audio from 0 Hz to 16000 Hz");
}

TEST(AudioDecodeTest, StreamedWavWithoutADataSizeDecodesWhole) {
  // A writer that cannot seek back leaves 0xFFFFFFFF as the data size: not a truncation.
  Bytes speech = read_fixture("speech_16k_mono_s16.wav");
  const DecodedAudio whole = decode_audio(speech);
  std::fill(speech.begin() + 40, speech.begin() + 44, 0xFF);
  EXPECT_EQ(decode_audio(speech).samples, whole.samples);
}

TEST(AudioDecodeTest, BadInputGivesTheExactError) {
  EXPECT_EQ(decode_error({}), "audio data is empty");

  Bytes noise(4096);
  std::mt19937 rng(20240611);
  for (auto& b : noise) b = static_cast<std::uint8_t>(rng() & 0x7F);  // no MPEG frame sync (0xFF)
  EXPECT_EQ(audio::sniff_audio_format(noise), "");
  EXPECT_EQ(decode_error(noise), std::string("unsupported or invalid audio data (libsndfile: ") +
                                     sf_error_number(SF_ERR_UNRECOGNISED_FORMAT) + ")");

  const Bytes speech = read_fixture("speech_16k_mono_s16.wav");  // 44-byte header, 27200 frames
  const Bytes cut(speech.begin(), speech.begin() + 44 + 2 * 10000 + 1);
  EXPECT_EQ(decode_error(cut),
            "truncated or corrupt WAV PCM_16 audio: the header promises 27200 frames but only "
            "10000 could be decoded");

  const std::vector<short> values = read_shorts(speech, 1);
  const auto flac = encode(SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 1, 16000, [&](SNDFILE* sf) {
    sf_writef_short(sf, values.data(), sf_count_t(values.size()));
  });
  ASSERT_TRUE(flac);
  // How many frames the first half holds depends on libFLAC's block layout, not on this code.
  EXPECT_THAT(decode_error(Bytes(flac->begin(), flac->begin() + flac->size() / 2)),
              ::testing::MatchesRegex("truncated or corrupt FLAC PCM_16 audio: the header promises "
                                      "27200 frames but only [0-9]+ could be decoded"));

  EXPECT_EQ(decode_error(speech, {.max_bytes = 1000, .max_seconds = 60, .max_seconds_source = ""}),
            "audio is 54444 bytes, over the limit of 1000 bytes");
  EXPECT_EQ(
      decode_error(speech, {.max_bytes = 1 << 20, .max_seconds = 1.5, .max_seconds_source = ""}),
      "audio is 1.7 s long; the limit is 1.5 s");
  EXPECT_EQ(decode_error(speech, {.max_bytes = 1 << 20,
                                  .max_seconds = 1.5,
                                  .max_seconds_source = "--max-audio-seconds"}),
            "audio is 1.7 s long; the limit is 1.5 s (--max-audio-seconds)");
}

}  // namespace
}  // namespace gemmaserve
