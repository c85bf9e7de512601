// `gemmaserve bench audio` on the audio fixture (a small audio tower): it prints the CPU, each
// encode run and their median, the decode gaps before and during an audio request, and bad
// flags fail with why before any model is written or loaded. Not a timed test.
#include "bench/bench_audio.h"

#include <gtest/gtest.h>

#include <cmath>
#include <regex>
#include <string>

#include "test_support.h"

namespace gemmaserve::testing {
namespace {

std::string audio_fixture() { return (source_dir() / "tests/data/golden/models/audio").string(); }

TEST(BenchAudio, ReportsEncodeRunsAndDecodeGaps) {
  const auto r = run_command(cli_binary().string() + " bench audio --model " + audio_fixture() +
                             " --seconds 2 --runs 3 --streams 2 --tokens-before 4"
                             " --kv-cache-memory 64M --threads 2 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  for (const char* line :
       {R"(CPU .+, 2 thread\(s\)\n)",
        R"(AUDIO 2\.0 s synthetic \(tones \+ noise, 16 kHz\): 50 soft tokens\n)",
        R"(ENCODE run 1/3: encoder [0-9.]+ s, TTFT [0-9.]+ s\n)",
        R"(ENCODE run 3/3: encoder [0-9.]+ s, TTFT [0-9.]+ s\n)",
        R"(ENCODE median of 3 runs: encoder [0-9.]+ s, TTFT [0-9.]+ s\n)",
        R"(GAPS starting 2 decode stream\(s\), 4 tokens each before the audio request\n)",
        R"(GAPS before the audio request: [0-9]+ gaps, median [0-9.]+ s, longest [0-9.]+ s\n)",
        R"(GAPS during the audio request: [0-9]+ gaps, median [0-9.]+ s, longest [0-9.]+ s\n)",
        R"(GAPS during, stream 0 in order \(s\):( [0-9.]+)+\n)",
        R"(GAPS audio request: TTFT [0-9.]+ s; encoder [0-9.]+ s in 1 step\(s\); [0-9]+ )"
        R"(stream token\(s\) meanwhile\n)"}) {
    EXPECT_TRUE(std::regex_search(r.out, std::regex(line))) << line << "\n" << r.out;
  }
  // The streams had decoded --tokens-before tokens each before the audio arrived.
  std::smatch m;
  ASSERT_TRUE(
      std::regex_search(r.out, m, std::regex(R"(before the audio request: ([0-9]+) gaps)")));
  EXPECT_GE(std::stoi(m[1]), 2 * 3) << r.out;
}

TEST(BenchAudio, BadFlagsSayWhy) {
  const std::string bench = cli_binary().string() + " bench audio";
  expect_flag_errors(
      bench,
      {
          {"--runs 0", "--runs must be positive, got 0"},
          {"--preset tiny", "--preset tiny: no audio tower (e2b and e4b have one)"},
          {"--preset 7b", "unknown preset '7b'"},
          {"--seconds 31", "--seconds must be in (0, 30]"},
          {"--model " + audio_fixture() + " --preset e2b", "--model and --preset: give one"},
          {"--model " + audio_fixture() + " --tensor-parallel-size 2",
           "bench audio runs one engine"},
          {"--model " + (source_dir() / "tests/data/golden/models/vision").string() +
               " --kv-cache-memory 64M",
           "has no audio tower (audio_config)"},
      },
      "usage: gemmaserve bench audio");
}

// The clip is the same on every run: 16 kHz, in (-1, 1), not silent.
TEST(BenchAudio, ClipIsDeterministic) {
  const std::vector<float> a = bench_audio_clip(1.5), b = bench_audio_clip(1.5);
  ASSERT_EQ(a.size(), 24000u);
  EXPECT_EQ(a, b);
  double sq = 0;
  for (float x : a) {
    ASSERT_LT(std::fabs(x), 1.0f);
    sq += double{x} * x;
  }
  EXPECT_GT(std::sqrt(sq / a.size()), 0.1);
}

}  // namespace
}  // namespace gemmaserve::testing
