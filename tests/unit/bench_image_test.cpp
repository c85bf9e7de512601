// `gemmaserve bench image` on the tiny vision fixture: it reports an image request alone per
// quantization and beside a decoding request per step budget, and a bad flag fails with why.
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "test_support.h"

namespace gemmaserve::testing {
namespace {

TEST(BenchImage, ReportsTtftEncodeTimeAndTheDecodeGap) {
  const std::string model = (source_dir() / "tests/data/golden/models/vision").string();
  const auto r = run_command(cli_binary().string() + " bench image " + model +
                             " --image-size 32 --budgets 1048576,64 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  for (const char* line :
       {R"(ALONE none: image TTFT [0-9.]+ s, encoder [0-9.]+ s for 1 image\(s\))",
        R"(ALONE q8_0: image TTFT [0-9.]+ s, encoder [0-9.]+ s for 1 image\(s\))",
        R"(BESIDE DECODE budget 1048576: image TTFT [0-9.]+ s; decode tokens meanwhile [0-9]+, )"
        R"(longest gap [0-9.]+ s; encoder 1 step\(s\), [0-9.]+ s)",
        R"(BESIDE DECODE budget 64: image TTFT [0-9.]+ s; decode tokens meanwhile [0-9]+, )"
        R"(longest gap [0-9.]+ s; encoder [0-9]+ step\(s\), [0-9.]+ s)"}) {
    EXPECT_TRUE(std::regex_search(r.out, std::regex(line))) << line << "\n" << r.out;
  }
  // The sliced encode takes several steps; the one-shot budget one.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex(R"(budget 64: .*encoder ([0-9]+) step)")));
  EXPECT_GT(std::stoi(m[1]), 1) << r.out;
  const auto bad =
      run_command(cli_binary().string() + " bench image " + model + " --budgets 64,x 2>&1");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.out.find("--budgets: 'x' is not a number"), std::string::npos) << bad.out;
}

}  // namespace
}  // namespace gemmaserve::testing
