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
  add(clip_spec("mpeg4", "avi", 64, 48, 10, 25), ".avi");
  ClipSpec mjpeg = clip_spec("mjpeg", "avi", 48, 32, 6, 15);
  mjpeg.pixel_format = "yuvj420p";
  add(mjpeg, ".avi");
  add(clip_spec("mpeg4", "mp4", 64, 48, 8), ".mp4");
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
      "The file is not a video this server can read (expected MP4, MOV, WebM, MKV, AVI, GIF or "
      "WebP)";
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
  const Bytes avi = make_test_clip(clip_spec("mpeg4", "avi", 64, 48, 10));
  const Bytes cut_avi(avi.begin(), avi.begin() + avi.size() / 2);
  EXPECT_EQ(decode_error(cut_avi),
            "The video is truncated or corrupt: its RIFF chunk ends at byte " +
                std::to_string(avi.size()) + " but the file has " + std::to_string(cut_avi.size()) +
                " bytes");
  ClipSpec png = clip_spec("png", "mov", 64, 48, 3);
  png.pixel_format = "rgb24";
  EXPECT_EQ(decode_error(make_test_clip(png)),
            "Could not read the video: its codec is png; this server decodes H.264, H.265, VP8, "
            "VP9, AV1, MPEG-4 Part 2, Motion JPEG and GIF");
}

TEST(VideoDecode, CorruptFrameIsRefusedByIndex) {
  // No B-frames, so packet 20 in decode order is frame 20 on screen.
  ClipSpec spec = clip_spec("libx264", "mp4", 64, 48, 40);
  spec.b_frames = 0;
  Bytes h264 = make_test_clip(spec);
  const std::vector<testing::PacketSpan> packets = testing::video_packets(h264, ".mp4");
  ASSERT_EQ(packets.size(), 40u);
  std::mt19937 random(3);
  const testing::PacketSpan damaged = packets[20];
  for (int i = 2; i < damaged.size; ++i) {
    h264[static_cast<std::size_t>(damaged.offset + i)] = static_cast<std::uint8_t>(random());
  }
  EXPECT_EQ(decode_error(h264, {}, every_frame()),
            "The video is truncated or corrupt: frame 20 of 40 could not be decoded");
  // Frames before the damage are still there for whoever samples only them.
  VideoSampling first_frames{.num_frames = 2};
  VideoDecodeLimits limits;
  EXPECT_NO_THROW(video::decode_video(Bytes(h264), VideoSampling{.num_frames = 1}, limits));
  (void)first_frames;
}

TEST(VideoDecode, LooksLikeVideoByMagicBytes) {
  auto bytes = [](std::string_view text) { return Bytes(text.begin(), text.end()); };
  using std::string_view_literals::operator""sv;
  EXPECT_TRUE(
      video::looks_like_video(bytes("\0\0\0\x18"
                                    "ftypisom\0\0\2\0isomiso2"sv)));
  EXPECT_TRUE(
      video::looks_like_video(bytes("\0\0\0\x14"
                                    "ftypqt  \0\0\2\0qt  "sv)));
  EXPECT_TRUE(
      video::looks_like_video(bytes("\0\0\0\x08"
                                    "wide\0\0\0\x10mdat"sv)));
  EXPECT_TRUE(video::looks_like_video(bytes("\x1A\x45\xDF\xA3\x9F\x42\x86\x81\x01"sv)));
  EXPECT_TRUE(video::looks_like_video(bytes("GIF89a\x01\0\x01\0\0\0\0"sv)));
  EXPECT_TRUE(video::looks_like_video(bytes("GIF87a\x01\0\x01\0\0\0\0"sv)));
  EXPECT_TRUE(video::looks_like_video(bytes("RIFF\x30\0\0\0WEBPVP8X\x0a\0\0\0\x02\0\0\0"sv)));
  EXPECT_TRUE(video::looks_like_video(bytes("RIFF\x30\0\0\0AVI LIST"sv)));
  // Stills: HEIF / AVIF images, a WebP without the animation flag, PNG, JPEG.
  const Bytes heic = bytes(
      "\0\0\0\x18"
      "ftypheic\0\0\0\0mif1heic"sv);
  EXPECT_FALSE(video::looks_like_video(heic));
  EXPECT_FALSE(
      video::looks_like_video(bytes("\0\0\0\x1c"
                                    "ftypavif\0\0\0\0avifmif1miaf"sv)));
  EXPECT_FALSE(
      video::looks_like_video(bytes("\0\0\0\x18"
                                    "ftypmif1\0\0\0\0mif1heic"sv)));
  EXPECT_FALSE(video::looks_like_video(bytes("RIFF\x30\0\0\0WEBPVP8X\x0a\0\0\0\x10\0\0\0"sv)));
  EXPECT_FALSE(video::looks_like_video(bytes("RIFF\x30\0\0\0WEBPVP8 \x0a\0\0\0"sv)));
  EXPECT_FALSE(video::looks_like_video(bytes("\x89PNG\r\n\x1a\n\0\0\0\rIHDR"sv)));
  EXPECT_FALSE(video::looks_like_video(bytes("\xFF\xD8\xFF\xE0\0\x10JFIF\0"sv)));
  EXPECT_FALSE(video::looks_like_video({}));
  EXPECT_EQ(decode_error(heic),
            "The file is not a video this server can read (expected MP4, MOV, WebM, MKV, AVI, GIF "
            "or WebP)");
}

TEST(VideoDecode, SeekingGivesTheFramesDecodingInOrderDoes) {
  struct Case {
    ClipSpec spec;
    VideoSampling sampling;
    bool seeks;  // whether seeking pays off for this clip
  };
  auto with_keyframes = [](ClipSpec spec, int interval) {
    spec.keyframe_interval = interval;
    return spec;
  };
  ClipSpec variable = with_keyframes(clip_spec("libx264", "mp4", 64, 48, 120), 20);
  for (int i = 0, ms = 0; i < variable.frames; ++i, ms += 25 + (i * 7) % 40) {
    variable.frame_times_ms.push_back(ms);
  }
  ClipSpec turned = with_keyframes(clip_spec("libx264", "mov", 48, 32, 120, 30), 20);
  turned.rotation = 90;
  const VideoSampling eight{.num_frames = 8};
  const std::vector<Case> cases = {
      {with_keyframes(clip_spec("libx264", "mp4", 64, 48, 300, 30), 30), eight, true},
      {with_keyframes(clip_spec("libx264", "mp4", 64, 48, 300, 30), 30),
       VideoSampling{.num_frames = 32, .fps = 2}, true},
      {with_keyframes(clip_spec("libx264", "matroska", 64, 48, 240, 30), 30), eight, true},
      {with_keyframes(clip_spec("libx265", "mp4", 64, 48, 120), 24), eight, true},
      {with_keyframes(clip_spec("libvpx", "webm", 64, 48, 150, 25), 25), eight, true},
      {with_keyframes(clip_spec("libvpx-vp9", "webm", 64, 48, 300, 30), 30), eight, true},
      {with_keyframes(clip_spec("libaom-av1", "webm", 64, 48, 120), 24), eight, true},
      {variable, eight, true},
      {turned, eight, true},
      // Every frame wanted, or a GIF (each frame drawn on the last): nothing to skip.
      {with_keyframes(clip_spec("libx264", "mp4", 64, 48, 60, 30), 10), every_frame(), false},
      {clip_spec("gif", "gif", 64, 48, 40, 10), eight, false},
  };
  std::int64_t decoded_seeking = 0, decoded_in_order = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(describe(c.spec));
    const Bytes bytes = make_test_clip(c.spec);
    const DecodedVideo seeking = video::detail::decode_video_with(
        bytes, c.sampling, {}, video::detail::FrameAccess::kSeekToKeyframes);
    const DecodedVideo in_order = video::detail::decode_video_with(
        bytes, c.sampling, {}, video::detail::FrameAccess::kSequential);
    ASSERT_EQ(seeking.frame_indices, in_order.frame_indices);
    ASSERT_EQ(seeking.frames.size(), in_order.frames.size());
    for (std::size_t i = 0; i < seeking.frames.size(); ++i) {
      EXPECT_TRUE(seeking.frames[i].pixels == in_order.frames[i].pixels)
          << "frame " << seeking.frame_indices[i];
    }
    EXPECT_EQ(in_order.stats.seeks, 0);
    EXPECT_EQ(in_order.stats.frames_decoded, c.spec.frames);
    if (c.seeks) {
      EXPECT_GT(seeking.stats.seeks, 0);
      EXPECT_LT(seeking.stats.frames_decoded, in_order.stats.frames_decoded);
    } else {
      EXPECT_EQ(seeking.stats.seeks, 0);
    }
    decoded_seeking += seeking.stats.frames_decoded;
    decoded_in_order += in_order.stats.frames_decoded;
  }
  std::cout << "[ video ] seeking decoded " << decoded_seeking << " frames where decoding in "
            << "order decoded " << decoded_in_order << ", same frames, over " << cases.size()
            << " clips\n";
}

TEST(SampleFrameIndices, FollowsVllmsRule) {
  using video::sample_frame_indices;
  const std::vector<std::int64_t> all = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  EXPECT_EQ(sample_frame_indices(10, 1, VideoSampling{.num_frames = 4}),
            (std::vector<std::int64_t>{0, 3, 6, 9}));
  EXPECT_EQ(sample_frame_indices(100, 4, VideoSampling{.num_frames = 8}),
            (std::vector<std::int64_t>{0, 14, 28, 42, 56, 70, 84, 99}));
  EXPECT_EQ(sample_frame_indices(10, 1, VideoSampling{.num_frames = -1}), all);
  EXPECT_EQ(sample_frame_indices(10, 1, VideoSampling{.num_frames = 0}), all);
  EXPECT_EQ(sample_frame_indices(10, 1, VideoSampling{.num_frames = 32}), all);
  // fps caps the count at floor(duration * fps), never below one frame.
  EXPECT_EQ(sample_frame_indices(300, 10, VideoSampling{.num_frames = 32, .fps = 2}).size(), 20u);
  EXPECT_EQ(sample_frame_indices(300, 10, VideoSampling{.num_frames = 8, .fps = 2}).size(), 8u);
  EXPECT_EQ(sample_frame_indices(300, 10, VideoSampling{.num_frames = -1, .fps = 0.35}).size(), 3u);
  EXPECT_EQ(sample_frame_indices(300, 10, VideoSampling{.num_frames = -1, .fps = 0.05}),
            (std::vector<std::int64_t>{0}));
  EXPECT_EQ(sample_frame_indices(5, 0, VideoSampling{.num_frames = 32, .fps = 2}),
            (std::vector<std::int64_t>{0}));
  EXPECT_EQ(sample_frame_indices(1, 0.04, VideoSampling{}), (std::vector<std::int64_t>{0}));
  EXPECT_TRUE(sample_frame_indices(0, 0, VideoSampling{}).empty());
}

TEST(SampleFrameIndices, MatchesNumpyLinspace) {
  std::vector<std::pair<std::int64_t, std::int64_t>> pairs;
  for (const std::int64_t total :
       {1,   2,   3,   5,   7,   10,  16,  29,  30,   31,   32,   33,    64,    99,
        100, 101, 127, 240, 299, 300, 301, 997, 1000, 1799, 3001, 18000, 99999, 100000}) {
    for (const std::int64_t n :
         {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 48, 64, 100, 128, 1000}) {
      if (n <= total) pairs.emplace_back(total, n);
    }
  }
  std::mt19937_64 random(41);
  for (int i = 0; i < 400; ++i) {
    const auto total = static_cast<std::int64_t>(1 + random() % 100000);
    pairs.emplace_back(
        total, static_cast<std::int64_t>(1 + random() % std::min<std::int64_t>(total, 600)));
  }
  std::vector<ReferenceClip> no_clips;
  const Reference ref(no_clips, pairs);
  REQUIRE_REFERENCE(ref);
  ASSERT_EQ(ref.manifest["linspace"].size(), pairs.size());
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    const auto [total, n] = pairs[i];
    SCOPED_TRACE("total " + std::to_string(total) + ", n " + std::to_string(n));
    EXPECT_EQ(
        video::sample_frame_indices(total, 0, VideoSampling{.num_frames = static_cast<int>(n)}),
        ref.manifest["linspace"][i].get<std::vector<std::int64_t>>());
  }
  std::cout << "[ video ] sample_frame_indices equals numpy.linspace(0, total - 1, n, dtype=int) "
            << "for " << pairs.size() << " (total, n) pairs\n";
}

}  // namespace
}  // namespace gemmaserve
