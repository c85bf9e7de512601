// `gemmaserve tokenize`, `detokenize` and `export-tokenizer`: output formats, flags, and errors
// (through the command functions, and exit code 2 through the built binary).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli/tokenize_command.h"
#include "core/error.h"
#include "test_support.h"
#include "tokenizer/hf_tokenizer_json.h"
#include "tokenizer/text_pipeline.h"
#include "tokenizer/tokenizer.h"

namespace gemmaserve {
namespace {

namespace fs = std::filesystem;
using Args = std::vector<std::string>;

// ids: 0 <pad> 1 <eos> 2 <bos> 3 <unk> 4 ▁ 5 H 6 i 7 Hi 8 ▁Hi, bytes <0x00>.. at 9..264.
TokenizerSpec tiny_spec() {
  TokenizerSpec spec;
  spec.source = "tiny";
  spec.vocab = {"<pad>", "<eos>", "<bos>", "<unk>", "\u2581", "H", "i", "Hi", "\u2581Hi"};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    spec.vocab.push_back(name);
  }
  spec.merges = {{5, 6}, {4, 7}};
  spec.bpe = {"<unk>", true, true, false};
  for (int32_t id : {0, 1, 2, 3})
    spec.added_tokens.push_back({id, spec.vocab[id], true, false, false, false});
  spec.normalizer = gemma_normalizer();
  spec.pre_tokenizer = gemma_pre_tokenizer();
  spec.decoder = gemma_decoder();
  spec.prefix_ids = {2};
  spec.bos_id = 2;
  spec.eos_ids = {1};
  return spec;
}

class TokenizeCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (dir_.path() / "tokenizer.json").string();
    std::ofstream(path_) << to_hf_tokenizer_json(tiny_spec());
  }
  std::string run(int (*command)(const Args&, std::ostream&), Args args) {
    std::ostringstream out;
    EXPECT_EQ(command(args, out), 0);
    return out.str();
  }
  std::string error(int (*command)(const Args&, std::ostream&), Args args) {
    std::ostringstream out;
    try {
      command(args, out);
    } catch (const InputError& e) {
      return e.what();
    }
    return "(no error)";
  }

  testing::TempDir dir_;
  std::string path_;
};

TEST_F(TokenizeCliTest, TokenizePrintsIdsOrJson) {
  EXPECT_EQ(run(run_tokenize, {"--tokenizer", path_, "--", "Hi Hi"}), "7,8\n");
  EXPECT_EQ(run(run_tokenize, {"--tokenizer", path_, "--json", "--", "Hi Hi"}),
            "{\"tokens\":[7,8]}\n");
  EXPECT_EQ(run(run_tokenize, {"--tokenizer", path_, "--add-special", "--", "Hi"}), "2,7\n");
  EXPECT_EQ(run(run_tokenize, {"--tokenizer", path_, "--", "Hi", "Hi"}), "7,8\n");  // joined by " "
  EXPECT_EQ(run(run_tokenize, {"--tokenizer", path_, "--", ""}), "\n");
  EXPECT_EQ(run(run_tokenize, {"--tokenizer", path_, "--", "--json"}), "54,54,115,124,120,119\n");
  EXPECT_EQ(run(run_tokenize, {"--tokenizer", path_, "--", "<eos>"}), "1\n");
  EXPECT_EQ(run(run_tokenize, {"--tokenizer", path_, "--no-parse-special", "--", "<eos>"}),
            "69,110,120,124,71\n");
}

TEST_F(TokenizeCliTest, TokenizeJsonlBatch) {
  const fs::path lines = dir_.path() / "in.jsonl";
  std::ofstream(lines) << "\"Hi\"\n\"\"\n\"Hi\\nHi\"\n";
  EXPECT_EQ(run(run_tokenize, {"--tokenizer", path_, "--jsonl", lines.string()}),
            "{\"tokens\":[7]}\n{\"tokens\":[]}\n{\"tokens\":[7,19,7]}\n");
  std::ofstream(lines) << "\"Hi\"\n42\n";
  EXPECT_EQ(error(run_tokenize, {"--tokenizer", path_, "--jsonl", lines.string()}),
            lines.string() + ":2: expected a JSON string per line");
}

TEST_F(TokenizeCliTest, DetokenizePrintsTextOrJson) {
  EXPECT_EQ(run(run_detokenize, {"--tokenizer", path_, "--", "2,7,8"}), "<bos>Hi Hi");
  EXPECT_EQ(run(run_detokenize, {"--tokenizer", path_, "--skip-special", "--", "2,7,8"}), "Hi Hi");
  EXPECT_EQ(run(run_detokenize, {"--tokenizer", path_, "--", "2", "7", "8"}), "<bos>Hi Hi");
  EXPECT_EQ(run(run_detokenize, {"--tokenizer", path_, "--", "7, 8"}), "Hi Hi");
  // A byte run that is not valid UTF-8 renders as U+FFFD per byte, so JSON output stays valid.
  EXPECT_EQ(run(run_detokenize, {"--tokenizer", path_, "--json", "--", "7,19,8,233"}),
            "{\"text\":\"Hi\\n Hi\xEF\xBF\xBD\"}\n");
  EXPECT_EQ(run(run_detokenize, {"--tokenizer", path_, "--json", "--", "19,233"}),
            "{\"text\":\"\xEF\xBF\xBD\xEF\xBF\xBD\"}\n");
}

TEST_F(TokenizeCliTest, ErrorsNameTheProblem) {
  EXPECT_EQ(error(run_detokenize, {"--tokenizer", path_, "--", "7,x"}),
            "token ids: 'x' is not an integer (expected a list like 2,45,67)");
  EXPECT_EQ(error(run_detokenize, {"--tokenizer", path_, "--", "7,9999"}),
            "token id 9999 is out of range (vocabulary size 265)");
  EXPECT_EQ(error(run_detokenize, {"--tokenizer", path_, "--", "-1"}),
            "token id -1 is out of range (vocabulary size 265)");
  EXPECT_EQ(error(run_detokenize, {"--tokenizer", path_}).rfind("detokenize needs token ids", 0),
            0u);
  EXPECT_EQ(error(run_tokenize, {"--", "Hi"}).rfind("missing --tokenizer PATH\n", 0), 0u);
  EXPECT_EQ(
      error(run_tokenize, {"--tokenizer", path_}).rfind("tokenize needs the text after --", 0), 0u);
  EXPECT_EQ(error(run_tokenize, {"--tokenizer", "/nonexistent/tok.json", "--", "Hi"}),
            "/nonexistent/tok.json: no such file or directory");
  EXPECT_EQ(error(run_tokenize, {"--bogus"}), "unknown flag --bogus");
  EXPECT_NE(run(run_tokenize, {"--help"}).find("usage: gemmaserve tokenize"), std::string::npos);
  EXPECT_NE(run(run_detokenize, {"--help"}).find("usage: gemmaserve detokenize"),
            std::string::npos);
  EXPECT_EQ(error(run_export_tokenizer, {"--out", "x.json"})
                .rfind("export-tokenizer needs --from and --out", 0),
            0u);
}

TEST_F(TokenizeCliTest, BinaryExitsWithCodeTwoOnBadInput) {
  const std::string bin = testing::cli_binary().string();
  auto r = testing::run_command(bin + " detokenize --tokenizer " + path_ + " -- 9999 2>&1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("token id 9999 is out of range (vocabulary size 265)"), std::string::npos)
      << r.out;
  r = testing::run_command(bin + " tokenize --tokenizer /nonexistent.json -- hi 2>&1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("/nonexistent.json: no such file or directory"), std::string::npos) << r.out;
  r = testing::run_command(bin + " tokenize --tokenizer " + path_ + " --json -- 'Hi Hi'");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, "{\"tokens\":[7,8]}\n");
}

TEST(TokenizerExportTest, ExportsTheGgufVocabularyAsTokenizerJson) {
  GS_REQUIRE_SHARED(shared);
  const fs::path gguf = shared / "data/gemma4-tokenizer/ggml-vocab-gemma-4.gguf";
  if (!fs::exists(gguf)) {
    if (testing::running_in_ci()) FAIL() << gguf << " is missing";
    GTEST_SKIP() << gguf << " is missing";
  }
  testing::TempDir dir;
  std::ostringstream out;
  const fs::path folder = dir.path() / "tok";
  ASSERT_EQ(run_export_tokenizer({"--from", gguf.string(), "--out", folder.string()}, out), 0);
  ASSERT_EQ(run_export_tokenizer(
                {"--from", gguf.string(), "--out", (dir.path() / "t.json").string()}, out),
            0);
  const nlohmann::json config =
      nlohmann::json::parse(std::ifstream(folder / "tokenizer_config.json"));
  EXPECT_EQ(config["bos_token"], "<bos>");
  EXPECT_EQ(config["eos_token"], "<eos>");
  EXPECT_EQ(config["add_bos_token"], true);
  EXPECT_EQ(config["added_tokens_decoder"]["106"]["content"], "<turn|>");
  EXPECT_TRUE(config.contains("chat_template"));
  const Tokenizer from_folder = Tokenizer::from_path(folder);
  const Tokenizer from_file = Tokenizer::from_path(dir.path() / "t.json");
  const Tokenizer from_gguf = Tokenizer::from_path(gguf);
  const std::string text = "<|turn>user\nHello, world! \U0001F680<turn|>";
  EXPECT_EQ(from_folder.encode(text, true, true), from_gguf.encode(text, true, true));
  EXPECT_EQ(from_file.encode(text, true, true), from_gguf.encode(text, true, true));
}

}  // namespace
}  // namespace gemmaserve
