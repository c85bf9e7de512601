// A video's frames preprocessed for the vision tower, against both references
// (tests/python/video_processor_reference.py, run live on clips made here with libavcodec):
// vLLM's Gemma 4 path (each decoded frame a PIL image through the image processor at the video
// budget) bit for bit, and transformers' Gemma4VideoProcessor (torchvision's antialiased bicubic
// on uint8 tensors) within the bound this test prints and holds: they differ only in the resize.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "gemmaserve/prompt_video.h"
#include "io/video/video_decode.h"
#include "model/gemma4_image_processor.h"
#include "test_support.h"
#include "video_test_clips.h"

namespace gemmaserve {
namespace {

namespace fs = std::filesystem;

std::vector<float> read_floats(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), {});
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

struct Case {
  testing::ClipSpec spec;
  float hf_bound;  // largest |difference| to torchvision's resize allowed, in pixel_values
};

testing::ClipSpec spec(int width, int height, int frames, int rate_num, int rate_den,
                       int rotation = 0, const std::string& encoder = "libx264",
                       const std::string& muxer = "mp4") {
  testing::ClipSpec s;
  s.encoder = encoder;
  s.muxer = muxer;
  s.width = width;
  s.height = height;
  s.frames = frames;
  s.rate_num = rate_num;
  s.rate_den = rate_den;
  s.rotation = rotation;
  return s;
}

TEST(VideoProcessor, FramesMatchVllmExactlyAndTransformersWithinTheResizeBound) {
  if (testing::run_command("/usr/bin/python3 -c 'import torch, torchvision, PIL, numpy' "
                           "2>/dev/null")
          .exit_code != 0) {
    if (testing::running_in_ci()) FAIL() << "python3-torchvision / python3-pil missing (setup)";
    GTEST_SKIP() << "python3-torchvision / python3-pil missing (run scripts/setup)";
  }
  // Upscaled small frames differ most (Pillow rounds and clips between its two passes, torch
  // does not); frames larger than the target differ by a level or so.
  const std::vector<Case> cases = {
      {spec(64, 48, 12, 10, 1), 32.f / 255},
      {spec(101, 77, 40, 30000, 1001, 0, "libvpx-vp9", "webm"), 32.f / 255},
      {spec(320, 240, 25, 25, 1, 90), 32.f / 255},
      {spec(160, 90, 9, 24, 1, 0, "libvpx-vp9", "webm"), 32.f / 255},
      {spec(1280, 720, 6, 30, 1), 12.f / 255},
  };
  testing::TempDir dir;
  nlohmann::json request = {{"max_soft_tokens", PromptVideo::kDefaultMaxSoftTokens},
                            {"frames", nlohmann::json::array()}};
  std::vector<std::pair<size_t, image::RgbImage>> frames;  // (case, frame)
  for (size_t c = 0; c < cases.size(); ++c) {
    const std::vector<uint8_t> clip = testing::make_test_clip(cases[c].spec);
    const video::DecodedVideo decoded = video::decode_video(clip, {.num_frames = 4});
    ASSERT_EQ(decoded.frames.size(), std::min<size_t>(4, cases[c].spec.frames));
    for (const image::RgbImage& f : decoded.frames) {
      const std::string file = "f" + std::to_string(frames.size()) + ".rgb";
      std::ofstream(dir.path() / file, std::ios::binary)
          .write(reinterpret_cast<const char*>(f.pixels.data()),
                 static_cast<std::streamsize>(f.pixels.size()));
      request["frames"].push_back({{"file", file}, {"width", f.width}, {"height", f.height}});
      frames.emplace_back(c, f);
    }
  }
  std::ofstream(dir.path() / "request.json") << request.dump();
  const auto run = testing::run_command(
      "/usr/bin/python3 '" +
      (testing::source_dir() / "tests/python/video_processor_reference.py").string() + "' '" +
      dir.path().string() + "'");
  ASSERT_EQ(run.exit_code, 0) << run.out;
  const nlohmann::json manifest =
      nlohmann::json::parse(std::ifstream(dir.path() / "manifest.json"));

  Gemma4ImageProcessorOptions options;
  options.max_soft_tokens = PromptVideo::kDefaultMaxSoftTokens;
  std::vector<float> worst(cases.size(), 0.f);
  for (size_t i = 0; i < frames.size(); ++i) {
    const auto& [c, frame] = frames[i];
    const Gemma4ImagePatches ours =
        gemma4_preprocess_image(frame.pixels, frame.width, frame.height, options);
    const std::string file = manifest["frames"][i]["file"];
    EXPECT_EQ(ours.num_soft_tokens, manifest["frames"][i]["num_soft_tokens"]) << file;
    const std::vector<float> vllm = read_floats(dir.path() / (file + ".vllm.f32"));
    const std::vector<float> hf = read_floats(dir.path() / (file + ".hf.f32"));
    ASSERT_EQ(vllm.size(), ours.pixel_values.size()) << file;
    ASSERT_EQ(hf.size(), ours.pixel_values.size()) << file;
    EXPECT_EQ(0, std::memcmp(vllm.data(), ours.pixel_values.data(), vllm.size() * sizeof(float)))
        << testing::describe(cases[c].spec) << " frame " << i << ": not vLLM's pixel values";
    for (size_t k = 0; k < hf.size(); ++k) {
      worst[c] = std::max(worst[c], std::abs(hf[k] - ours.pixel_values[k]));
    }
  }
  std::cout << "transformers' Gemma4VideoProcessor (torch " << manifest["torch"].get<std::string>()
            << ", torchvision " << manifest["torchvision"].get<std::string>()
            << ") vs these pixel values, max |difference|:";
  for (size_t c = 0; c < cases.size(); ++c) {
    std::cout << "\n  " << testing::describe(cases[c].spec) << ": " << worst[c] * 255 << "/255";
    EXPECT_LE(worst[c], cases[c].hf_bound) << testing::describe(cases[c].spec);
  }
  std::cout << "\n";
}

}  // namespace
}  // namespace gemmaserve
