// `gemmaserve bench video` on the vision fixture (a small vision tower, the demo tokenizer for the
// timestamps) and a tiny clip: it prints the CPU, the clip, each decode, preprocess, image and
// video run with their medians, and the decode gaps around a video request; bad flags fail with
// why before any clip is made or model written. Not a timed test.
#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <vector>

#include "test_support.h"

namespace gemmaserve::testing {
namespace {

std::string vision_fixture() { return (source_dir() / "tests/data/golden/models/vision").string(); }
std::string demo_tokenizer() { return (source_dir() / "models/gemma4-demo").string(); }

TEST(BenchVideo, ReportsDecodeEncodeAndDecodeGaps) {
  const auto r = run_command(
      cli_binary().string() + " bench video --model " + vision_fixture() + " --tokenizer " +
      demo_tokenizer() +
      " --seconds 8 --width 64 --height 48 --fps 6 --keyframe-seconds 1 --runs 3 --streams 2"
      " --tokens-before 4 --media-io-kwargs '{\"video\": {\"num_frames\": 4}}'"
      " --kv-cache-memory 64M --threads 2 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const std::string number = "[0-9]+\\.[0-9]+";
  for (const std::string& line : std::vector<std::string>{
           R"(CPU .+, 2 thread\(s\)\n)",
           R"(CLIP 8\.00 s of 64x48 at 6 fps, H\.264 \(libx264 veryfast, a keyframe every 6 )"
           R"(frames\) in MP4: [0-9]+ bytes \()" +
               number + R"( Mbit/s\), made in )" + number + R"( s\n)",
           R"(VIDEO h264 in mov,mp4,m4a,3gp,3g2,mj2, 64x48, 48 frames at 6\.000 fps \(8\.00 s\)\n)",
           "DECODE run 1/3: " + number + " s \\(real-time factor " + number +
               R"(\): 4 of 48 frames sampled, [0-9]+ decoded, [0-9]+ seek\(s\)\n)",
           "DECODE median of 3 runs: " + number + " s, real-time factor " + number +
               R"( \(8\.00 s of clip\)\n)",
           R"(MODEL loading .+/vision\n)",
           R"(FRAMES 4 of 64x48, each resized to 72x56: 252 patches, 63 soft tokens\n)",
           "PREPROCESS run 3/3: " + number + " s \\(" + number + " ms per frame\\), 1008 patches\n",
           "PREPROCESS median of 3 runs: " + number + " s\n",
           "IMAGE run 1/3: one frame at 70 soft tokens: encoder " + number + " s, TTFT " + number +
               " s\n",
           "IMAGE median of 3 runs: encoder " + number + " s, TTFT " + number + " s\n",
           // BOS, then per frame 'mm:ss' (27 tokens in all) + <|image> + 63 x <|video|> + <image|>.
           R"(VIDEO prompt: 288 tokens \(4 frames with their timestamps\)\n)",
           "VIDEO run 2/3: encoder " + number + " s \\(" + number +
               R"( s per frame\) in [0-9]+ step\(s\), TTFT )" + number + " s\n",
           "VIDEO median of 3 runs: encoder " + number + " s, " + number +
               " s per frame = " + number + "x one image's encode; TTFT " + number + " s\n",
           R"(GAPS 2 decode stream\(s\), 4 tokens each before the video request, 3 run\(s\)\n)",
           "GAPS run 1/3 before the video request: [0-9]+ gaps, median " + number + " s, longest " +
               number + " s\n",
           "GAPS run 3/3 during the video request: [0-9]+ gaps, median " + number + " s, longest " +
               number + " s\n",
           R"(GAPS run 1/3 during, stream 0 in order \(s\):( [0-9.]+)+\n)",
           "GAPS run 2/3 video request: decode " + number + " s, TTFT " + number + " s; encoder " +
               number +
               R"( s in [0-9]+ step\(s\); [0-9]+ stream token\(s\) )"
               R"(meanwhile\n)",
           "GAPS median of 3 runs: longest gap during " + number + " s; TTFT " + number +
               " s; decode " + number + " s\n",
       }) {
    EXPECT_TRUE(std::regex_search(r.out, std::regex(line))) << line << "\n" << r.out;
  }
  // Frames 0, 15, 30 and 47 of 48 with a keyframe every 6: seeking skips most of the clip.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      r.out, m, std::regex(R"(DECODE run 1/3: .* ([0-9]+) decoded, ([0-9]+) seek)")));
  EXPECT_LT(std::stoi(m[1]), 24) << r.out;
  EXPECT_GE(std::stoi(m[2]), 1) << r.out;
}

TEST(BenchVideo, BadFlagsSayWhy) {
  const std::string bench = cli_binary().string() + " bench video";
  const std::string fixture = "--model " + vision_fixture() + " --tokenizer " + demo_tokenizer();
  expect_flag_errors(
      bench,
      {
          {"--runs 0 --tokenizer x", "--runs must be positive, got 0"},
          {"--preset 7b", "unknown preset '7b'"},
          {"--preset e2b",
           "error: bench video: the e2b preset has no tokenizer, and the frames' timestamps "
           "need one: pass --tokenizer (a Gemma 4 tokenizer.json or GGUF)\n"},
          {fixture + " --width 63",
           "error: --width and --height must be even (H.264 in 4:2:0), got 63x720\n"},
          {fixture + " --seconds 0", "error: --seconds must be positive, got 0\n"},
          {fixture + " --keyframe-seconds -1", "error: --keyframe-seconds must be positive"},
          {fixture + " --preset e2b", "--model and --preset: give one"},
          {fixture + " --tensor-parallel-size 2", "bench video runs one engine"},
          {"--model " + (source_dir() / "tests/data/golden/models/dense").string() +
               " --tokenizer " + demo_tokenizer() +
               " --seconds 1 --width 16 --height 16 --fps 2 --kv-cache-memory 64M",
           "has no vision tower (vision_config)\n"},
      },
      "usage: gemmaserve bench video");
}

}  // namespace
}  // namespace gemmaserve::testing
