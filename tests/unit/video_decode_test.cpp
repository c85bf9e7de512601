// Video decoding: clips of every container and codec (encoded here, video_test_clips.h) decoded
// bit for bit as PyAV decodes them over the same FFmpeg (tests/python/video_reference.py, run
// live; OpenCV's own frames too where python3-opencv is installed), animated WebP as Pillow
// decodes it, vLLM's frame sampling against numpy.linspace, seeking against decoding in order,
// and the exact InputError of each kind of bad input.
#include "io/video/video_decode.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/video/video_formats.h"
#include "test_support.h"
#include "video_test_clips.h"

namespace gemmaserve {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<std::uint8_t>;
using testing::ClipSpec;
using testing::describe;
using testing::make_test_clip;
using video::DecodedVideo;
using video::VideoDecodeLimits;
using video::VideoSampling;

constexpr const char* kPython = "/usr/bin/python3";

Bytes read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const fs::path& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

std::string decode_error(const Bytes& bytes, const VideoDecodeLimits& limits = {},
                         const VideoSampling& sampling = {}) {
  return testing::input_error_of([&] { video::decode_video(bytes, sampling, limits); });
}

VideoSampling every_frame() { return VideoSampling{.num_frames = -1}; }

// One clip for the reference run: its bytes, the frames to compare and how they are sampled.
struct ReferenceClip {
  ClipSpec spec;
  VideoSampling sampling;
  Bytes bytes;
  std::string file;
  DecodedVideo decoded;  // ours
};

// Writes the clips and the linspace cases into a fresh folder and runs video_reference.py over
// them; a null manifest when PyAV / Pillow / numpy are missing.
struct Reference {
  std::unique_ptr<testing::TempDir> dir;
  nlohmann::json manifest;

  Reference(std::vector<ReferenceClip>& clips,
            const std::vector<std::pair<std::int64_t, std::int64_t>>& linspace) {
    if (testing::run_command(std::string(kPython) + " -c 'import av, numpy, PIL' 2>/dev/null")
            .exit_code != 0) {
      return;
    }
    dir = std::make_unique<testing::TempDir>();
    nlohmann::json request = {{"clips", nlohmann::json::array()}, {"linspace", linspace}};
    for (ReferenceClip& clip : clips) {
      write_bytes(dir->path() / clip.file, clip.bytes);
      request["clips"].push_back({{"file", clip.file},
                                  {"indices", clip.decoded.frame_indices},
                                  {"rotation", clip.spec.rotation}});
    }
    std::ofstream(dir->path() / "request.json") << request.dump();
    const testing::CommandResult result =
        testing::run_command(std::string(kPython) + " '" +
                             (testing::source_dir() / "tests/python/video_reference.py").string() +
                             "' '" + dir->path().string() + "'");
    if (result.exit_code != 0) return;
    std::ifstream in(dir->path() / "manifest.json");
    manifest = nlohmann::json::parse(in);
  }
  Bytes raw(const nlohmann::json& name) const {
    return read_bytes(dir->path() / name.get<std::string>());
  }
};

#define REQUIRE_REFERENCE(ref)                                                                  \
  if (ref.manifest.is_null()) {                                                                 \
    if (testing::running_in_ci()) FAIL() << "python3-av / python3-pil / numpy missing (setup)"; \
    GTEST_SKIP() << "python3-av / python3-pil / python3-numpy missing (run scripts/setup)";     \
  }

// A clip's spec; the other fields keep their defaults.
ClipSpec clip_spec(const std::string& encoder, const std::string& muxer, int width, int height,
                   int frames, int rate_num = 24, int rate_den = 1) {
  ClipSpec spec;
  spec.encoder = encoder;
  spec.muxer = muxer;
  spec.width = width;
  spec.height = height;
  spec.frames = frames;
  spec.rate_num = rate_num;
  spec.rate_den = rate_den;
  return spec;
}

// The clips of every container, codec, size, rate and rotation, decoded by PyAV (Pillow for
// WebP) and by us.
std::vector<ReferenceClip> format_clips() {
  std::vector<ReferenceClip> clips;
  auto add = [&](const ClipSpec& spec, const std::string& extension,
                 VideoSampling sampling = every_frame()) {
    const std::string file = "clip" + std::to_string(clips.size()) + extension;
    clips.push_back(ReferenceClip{spec, sampling, make_test_clip(spec), file, {}});
  };
  add(clip_spec("libx264", "mp4", 64, 48, 10), ".mp4");
  ClipSpec ntsc = clip_spec("libx264", "mp4", 98, 74, 30, 30000, 1001);
  ntsc.keyframe_interval = 12;
  add(ntsc, ".mp4", VideoSampling{.num_frames = 7});
  add(clip_spec("libx264", "mov", 50, 30, 12, 30), ".mov");
  ClipSpec odd_444 = clip_spec("libx264", "mp4", 65, 49, 8, 10);
  odd_444.pixel_format = "yuv444p";
  add(odd_444, ".mp4");
  add(clip_spec("libx264", "matroska", 66, 50, 12), ".mkv");
  add(clip_spec("libx265", "mp4", 98, 74, 12), ".mp4");
  add(clip_spec("libvpx", "webm", 65, 49, 20, 10), ".webm");
  add(clip_spec("libvpx-vp9", "webm", 66, 50, 37, 2997, 100), ".webm",
      VideoSampling{.num_frames = 9});
  add(clip_spec("libaom-av1", "webm", 33, 17, 12), ".webm");
  add(clip_spec("libaom-av1", "matroska", 64, 48, 10, 30), ".mkv");
  add(clip_spec("gif", "gif", 65, 49, 12, 10), ".gif");
  add(clip_spec("libwebp_anim", "webp", 40, 30, 8, 10), ".webp");
  for (const int rotation : {90, 180, 270}) {
    ClipSpec turned = clip_spec("libx264", "mp4", 64, 32, 6);
    turned.rotation = rotation;
    add(turned, ".mp4");
  }
  // A variable rate: frames 40, 60, 30 and 70 ms apart.
  ClipSpec variable = clip_spec("libx264", "mp4", 64, 48, 9);
  variable.frame_times_ms = {0, 40, 100, 130, 200, 240, 300, 330, 400};
  add(variable, ".mp4");
  // Long enough to seek: 8 of 300 frames with a keyframe every 30.
  ClipSpec long_clip = clip_spec("libx264", "mp4", 64, 48, 300, 30);
  long_clip.keyframe_interval = 30;
  add(long_clip, ".mp4", VideoSampling{.num_frames = 8});
  return clips;
}

TEST(VideoDecode, EveryFormatDecodesBitExactlyAsPyAVAndPillow) {
  std::vector<ReferenceClip> clips = format_clips();
  for (ReferenceClip& clip : clips) {
    SCOPED_TRACE(describe(clip.spec));
    ASSERT_TRUE(video::looks_like_video(clip.bytes));
    ASSERT_NO_THROW(clip.decoded = video::decode_video(clip.bytes, clip.sampling));
  }
  const Reference ref(clips, {});
  REQUIRE_REFERENCE(ref);
  int frames = 0, opencv_frames = 0;
  for (std::size_t c = 0; c < clips.size(); ++c) {
    const ReferenceClip& clip = clips[c];
    const DecodedVideo& ours = clip.decoded;
    const nlohmann::json& want = ref.manifest["clips"][c];
    SCOPED_TRACE(describe(clip.spec));
    const bool webp = clip.spec.muxer == "webp";
    const std::int64_t total = want["nb_frames"].get<std::int64_t>() > 0
                                   ? want["nb_frames"].get<std::int64_t>()
                                   : want["decoded"].get<std::int64_t>();
    EXPECT_EQ(ours.info.total_frames, clip.spec.frames);
    EXPECT_EQ(ours.info.total_frames, total);
    EXPECT_EQ(ours.info.rotation, clip.spec.rotation);
    const bool quarter_turn = clip.spec.rotation % 180 != 0;
    EXPECT_EQ(ours.info.width, quarter_turn ? clip.spec.height : clip.spec.width);
    EXPECT_EQ(ours.info.height, quarter_turn ? clip.spec.width : clip.spec.height);
    if (webp) {
      double milliseconds = 0;
      for (const auto& d : want["durations_ms"]) milliseconds += d.get<double>();
      EXPECT_DOUBLE_EQ(ours.info.fps, clip.spec.frames / (milliseconds / 1000));
      EXPECT_EQ(ours.info.codec, "webp");
    } else {
      const auto& rate = want["guessed_rate"];
      EXPECT_DOUBLE_EQ(ours.info.fps, rate[0].get<double>() / rate[1].get<double>());
    }
    EXPECT_DOUBLE_EQ(ours.info.duration, ours.info.fps > 0 ? total / ours.info.fps : 0);
    EXPECT_EQ(ours.frame_indices,
              video::sample_frame_indices(total, ours.info.duration, clip.sampling));
    // python3-opencv is optional. Debian's 4.6 turns quarter-turned videos the wrong way
    // (OpenCV issue 22088, fixed in 4.7; vLLM takes >= 4.11), so those frames are not compared.
    const nlohmann::json opencv = want.value("opencv", nlohmann::json());
    const bool opencv_sees_rotation =
        opencv.is_object() && opencv.value("opened", false) &&
        (opencv["rotation"].get<int>() == ours.info.rotation || !quarter_turn);
    if (opencv.is_object() && opencv.value("opened", false)) {
      EXPECT_EQ(ours.info.total_frames, opencv["frame_count"].get<std::int64_t>()) << "OpenCV";
    }
    ASSERT_EQ(ours.frames.size(), ours.frame_indices.size());
    for (std::size_t i = 0; i < ours.frames.size(); ++i) {
      const std::string index = std::to_string(ours.frame_indices[i]);
      SCOPED_TRACE("frame " + index);
      const image::RgbImage& frame = ours.frames[i];
      EXPECT_EQ(frame.width, ours.info.width);
      EXPECT_EQ(frame.height, ours.info.height);
      ASSERT_TRUE(want["frames"].contains(index));
      EXPECT_TRUE(frame.pixels == ref.raw(want["frames"][index])) << "pixels differ from PyAV's";
      ++frames;
      if (opencv_sees_rotation && opencv["frames"].contains(index)) {
        EXPECT_TRUE(frame.pixels == ref.raw(opencv["frames"][index]))
            << "pixels differ from OpenCV's";
        ++opencv_frames;
      }
    }
  }
  std::cout << "[ video ] " << frames << " frames of " << clips.size()
            << " clips bit-identical to PyAV 10 / Pillow (FFmpeg 5.1, libwebp)";
  if (opencv_frames > 0) std::cout << "; " << opencv_frames << " to python3-opencv's too";
  std::cout << "\n";
}

TEST(VideoDecode, ProbeGivesTheInfoDecodingDoes) {
  ClipSpec turned = clip_spec("libx264", "mp4", 64, 48, 5);
  turned.rotation = 90;
  for (const ClipSpec& spec :
       {turned, clip_spec("libvpx-vp9", "webm", 64, 48, 7, 30),
        clip_spec("gif", "gif", 64, 48, 4, 10), clip_spec("libwebp_anim", "webp", 64, 48, 3, 10)}) {
    SCOPED_TRACE(describe(spec));
    const Bytes bytes = make_test_clip(spec);
    const video::VideoInfo probed = video::probe_video(bytes);
    const video::VideoInfo decoded = video::decode_video(bytes).info;
    EXPECT_EQ(probed.container, decoded.container);
    EXPECT_EQ(probed.codec, decoded.codec);
    EXPECT_EQ(probed.width, decoded.width);
    EXPECT_EQ(probed.height, decoded.height);
    EXPECT_EQ(probed.rotation, decoded.rotation);
    EXPECT_EQ(probed.total_frames, spec.frames);
    EXPECT_EQ(probed.total_frames, decoded.total_frames);
    EXPECT_EQ(probed.fps, decoded.fps);
    EXPECT_EQ(probed.duration, decoded.duration);
  }
  const Bytes mp4 = make_test_clip(clip_spec("libx264", "mp4", 64, 48, 3));
  EXPECT_EQ(video::probe_video(mp4).container, "mov,mp4,m4a,3gp,3g2,mj2");
  EXPECT_EQ(video::probe_video(mp4).codec, "h264");
  const Bytes webm = make_test_clip(clip_spec("libvpx", "webm", 64, 48, 3));
  EXPECT_EQ(video::probe_video(webm).container, "matroska,webm");
  EXPECT_EQ(video::probe_video(webm).codec, "vp8");
}

// The end of the first top-level MP4 box of `type` (what the truncation message names).
std::uint64_t mp4_box_end(const Bytes& bytes, const std::string& type) {
  std::uint64_t offset = 0;
  while (offset + 8 <= bytes.size()) {
    std::uint64_t size = 0;
    for (int i = 0; i < 4; ++i) size = size << 8 | bytes[offset + i];
    if (std::string(bytes.begin() + offset + 4, bytes.begin() + offset + 8) == type) {
      return offset + size;
    }
    offset += size;
  }
  return 0;
}

TEST(VideoDecode, RefusesBadInputWithItsReason) {
  EXPECT_EQ(decode_error({}), "The video is empty (0 bytes)");
  std::mt19937 random(7);
  Bytes noise(4096);
  for (std::uint8_t& b : noise) b = static_cast<std::uint8_t>(random());
  const std::string not_a_video =
      "The file is not a video this server can read (expected MP4, MOV, WebM, MKV, GIF or WebP)";
  EXPECT_EQ(decode_error(noise), not_a_video);
  EXPECT_EQ(testing::input_error_of([&] { video::probe_video(noise); }), not_a_video);

  const Bytes mp4 = make_test_clip(clip_spec("libx264", "mp4", 64, 48, 10));
  VideoDecodeLimits small_file;
  small_file.max_bytes = 1000;
  EXPECT_EQ(decode_error(mp4, small_file),
            "The video is " + std::to_string(mp4.size()) + " bytes; the limit is 1000");

  // Cut in half: the moov box at the end is gone, or (faststart) the media data is cut short.
  for (const bool faststart : {false, true}) {
    ClipSpec spec = clip_spec("libx264", "mp4", 64, 48, 40);
    spec.faststart = faststart;
    const Bytes whole = make_test_clip(spec);
    const Bytes half(whole.begin(), whole.begin() + whole.size() / 2);
    EXPECT_EQ(decode_error(half),
              "The video is truncated or corrupt: its 'mdat' box ends at byte " +
                  std::to_string(mp4_box_end(whole, "mdat")) + " but the file has " +
                  std::to_string(half.size()) + " bytes");
  }
  const Bytes webm = make_test_clip(clip_spec("libvpx-vp9", "webm", 64, 48, 24));
  const Bytes webm_half(webm.begin(), webm.begin() + webm.size() / 2);
  EXPECT_EQ(decode_error(webm_half).rfind("The video is truncated or corrupt: its Matroska "
                                          "segment ends at byte ",
                                          0),
            0u)
      << decode_error(webm_half);
  // A GIF says nothing of its size: its last frame, cut, is the one that cannot be read.
  const Bytes gif = make_test_clip(clip_spec("gif", "gif", 64, 48, 12, 10));
  EXPECT_EQ(decode_error(Bytes(gif.begin(), gif.end() - 10)),
            "The video is truncated or corrupt: frame 11 of 12 could not be decoded");

  VideoDecodeLimits short_clips;
  short_clips.max_duration_seconds = 0.5;
  EXPECT_EQ(decode_error(webm, short_clips), "The video is 1.0 s long; the limit is 0.5 s");
  VideoDecodeLimits few_pixels;
  few_pixels.max_pixels_per_frame = 1000;
  EXPECT_EQ(decode_error(mp4, few_pixels),
            "The video's frames are 64x48 = 3072 pixels; the limit is 1000");
  VideoDecodeLimits few_frames;
  few_frames.max_total_frames = 5;
  EXPECT_EQ(decode_error(mp4, few_frames), "The video has 10 frames; the limit is 5");
  EXPECT_EQ(decode_error(webm, few_frames), "The video has more than 5 frames; the limit is 5");
  VideoDecodeLimits little_memory;
  little_memory.max_decoded_bytes = 10000;
  EXPECT_EQ(decode_error(mp4, little_memory),
            "The 10 sampled frames of 64x48 would take 92160 bytes decoded; the limit is 10000");
  EXPECT_EQ(decode_error(make_test_clip(clip_spec("mpeg4", "mp4", 64, 48, 3))),
            "Could not read the video: its codec is mpeg4; this server decodes H.264, H.265, "
            "VP8, VP9, AV1 and GIF");
}

}  // namespace
}  // namespace gemmaserve
