// The tokenizer.json table scanner: what it reads, where it gives up, and that loading a file
// through it gives exactly what a whole-file nlohmann parse gives (the spec or the error message),
// on small variants and on the real Gemma 4 vocabulary.
#include "tokenizer/tokenizer_json_tables.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/gguf.h"
#include "io/json_file.h"
#include "test_support.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/hf_tokenizer_json.h"
#include "tokenizer/tokenizer.h"

namespace gemmaserve {
namespace {

namespace fs = std::filesystem;

// A small Gemma-shaped file; VOCAB and MERGES are replaced by the variants below.
const std::string kTemplate = R"({
  "version": "1.0",
  "added_tokens": [
    {"id": 0, "content": "<pad>", "single_word": false, "lstrip": false, "rstrip": false,
     "normalized": false, "special": true},
    {"id": 2, "content": "<bos>", "single_word": false, "lstrip": false, "rstrip": false,
     "normalized": false, "special": true}
  ],
  "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
  "pre_tokenizer": null,
  "post_processor": null,
  "decoder": {"type": "Sequence", "decoders": [
    {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
    {"type": "ByteFallback"}, {"type": "Fuse"}]},
  "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>", "fuse_unk": true,
            "byte_fallback": true, "ignore_merges": false,
            "vocab": VOCAB,
            "merges": MERGES}
})";

const std::string kVocab =
    R"({"<pad>": 0, "<eos>": 1, "<bos>": 2, "<unk>": 3, "a": 4, "b": 5, "ab": 6, "\u2581": 7,
        "\"q\\": 8, "\"q\\a": 9, "\ud83d\ude00": 10, "é": 11, "éa": 12,
        "\n\t\/\u0041": 13})";
const std::string kMerges = R"([["a", "b"], ["\"q\\", "a"], "é a"])";

std::string document(const std::string& vocab = kVocab, const std::string& merges = kMerges) {
  std::string s = kTemplate;
  s.replace(s.find("VOCAB"), 5, vocab);
  s.replace(s.find("MERGES"), 6, merges);
  return s;
}

// `s` with the first `what` replaced by `with`.
std::string replaced(std::string s, const std::string& what, const std::string& with) {
  s.replace(s.find(what), what.size(), with);
  return s;
}

const std::string kMergesMember = ",\n            \"merges\": " + kMerges;

// Everything a spec holds, as text: the tokenizer.json it writes back, plus the special ids.
std::string describe(const TokenizerSpec& spec) {
  std::string s = to_hf_tokenizer_json(spec) + "\nbos ";
  s += spec.bos_id ? std::to_string(*spec.bos_id) : "none";
  for (int32_t id : spec.eos_ids) s += " eos " + std::to_string(id);
  if (spec.pad_id) s += " pad " + std::to_string(*spec.pad_id);
  return s;
}

template <typename Load>
std::string outcome(Load load) {
  try {
    return describe(load());
  } catch (const InputError& e) {
    return std::string("error: ") + e.what();
  }
}

// The scanner's path (what Tokenizer::from_path runs) and a whole-file nlohmann parse.
std::string scanned(const fs::path& path) {
  return outcome([&] { return spec_from_hf_json_file(path, std::nullopt); });
}
std::string parsed(const fs::path& path) {
  return outcome([&] { return spec_from_hf_json(read_json_file(path), nullptr, path.string()); });
}

fs::path write(const testing::TempDir& dir, const std::string& name, const std::string& text) {
  const fs::path path = dir.path() / name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

TEST(TokenizerJsonTablesTest, ReadsPiecesWithEscapesAndBothMergeForms) {
  const auto tables = scan_tokenizer_json_tables(document());
  ASSERT_TRUE(tables.has_value());
  ASSERT_EQ(tables->vocab.size(), 14u);
  EXPECT_EQ(tables->vocab[7], "\u2581");
  EXPECT_EQ(tables->vocab[8], "\"q\\");
  EXPECT_EQ(tables->vocab[10], "\U0001F600");
  EXPECT_EQ(tables->vocab[11], "\u00e9");
  EXPECT_EQ(tables->vocab[13], "\n\t/A");
  EXPECT_EQ(tables->merges, (std::vector<std::pair<int32_t, int32_t>>{{4, 5}, {8, 4}, {11, 4}}));
  EXPECT_NE(tables->rest.find("\"vocab\": {},"), std::string::npos);
  EXPECT_NE(tables->rest.find("\"merges\": []}"), std::string::npos);
  EXPECT_EQ(tables->rest.find("\"ab\""), std::string::npos);
}

TEST(TokenizerJsonTablesTest, PlacesPiecesByIdWhenTheVocabIsOutOfOrder) {
  const auto tables = scan_tokenizer_json_tables(
      document(R"({"b": 2, "a": 0, "<unk>": 1, "ab": 3})", R"(["a b"])"));
  ASSERT_TRUE(tables.has_value());
  EXPECT_EQ(tables->vocab, (std::vector<std::string>{"a", "<unk>", "b", "ab"}));
  EXPECT_EQ(tables->merges, (std::vector<std::pair<int32_t, int32_t>>{{0, 2}}));
}

TEST(TokenizerJsonTablesTest, ReadsMergesWrittenBeforeTheVocab) {
  const std::string text = replaced(replaced(document(), kMergesMember, ""), "\"vocab\"",
                                    "\"merges\": " + kMerges + ", \"vocab\"");
  const auto tables = scan_tokenizer_json_tables(text);
  ASSERT_TRUE(tables.has_value());
  EXPECT_EQ(tables->merges.size(), 3u);
  EXPECT_NE(tables->rest.find("\"merges\": [],"), std::string::npos);
}

TEST(TokenizerJsonTablesTest, GivesUpOnWhatOnlyTheFullParserShouldJudge) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"byte-order mark", "\xEF\xBB\xBF" + document()},
      {"trailing text", document() + " x"},
      {"duplicate piece", document(R"({"a": 0, "a": 1})", "[]")},
      {"gap in ids", document(R"({"a": 0, "b": 2})", "[]")},
      {"repeated id", document(R"({"a": 0, "b": 0})", "[]")},
      {"fractional id", document(R"({"a": 0.0})", "[]")},
      {"negative id", document(R"({"a": -1})", "[]")},
      {"leading zero", document(R"({"a": 00})", "[]")},
      {"merge of an unknown piece", document(R"({"a": 0})", R"([["a", "z"]])")},
      {"merge with two spaces", document(R"({"a": 0})", R"(["a a a"])")},
      {"merge with three pieces", document(R"({"a": 0})", R"([["a", "a", "a"]])")},
      {"lone surrogate", document(R"({"\ud800": 0})", "[]")},
      {"control character", document("{\"\x01\": 0}", "[]")},
      {"invalid UTF-8", document("{\"\xC0\xAF\": 0}", "[]")},
      {"unknown escape", document(R"({"\q": 0})", "[]")},
      {"vocab not an object", document("[]", "[]")},
      {"no merges", replaced(document(), kMergesMember, "")},
      {"bad literal elsewhere", replaced(document(), "null", "nul")},
      {"bad number elsewhere", replaced(document(), "null", "1.")},
      {"missing comma elsewhere", replaced(document(), "\"1.0\",", "\"1.0\"")},
  };
  for (const auto& [name, text] : cases) {
    EXPECT_FALSE(scan_tokenizer_json_tables(text).has_value()) << name;
  }
}

TEST(TokenizerJsonTablesTest, LoadsExactlyAsTheWholeFileParserOnEveryVariant) {
  testing::TempDir dir;
  const std::vector<std::string> variants = {
      document(),
      document(R"({"b": 2, "a": 0, "<unk>": 1, "ab": 3})", R"(["a b"])"),
      "\xEF\xBB\xBF" + document(),
      document() + " x",
      document(R"({"a": 0, "a": 1})", "[]"),
      document(R"({"a": 0, "b": 2})", "[]"),
      document(R"({"a": 0.0})", "[]"),
      document(R"({"a": 0})", R"([["a", "z"]])"),
      document(R"({"a": 0})", R"(["a a a"])"),
      document(R"({"a": 0, "b": 1})", R"([["a", "b"]])"),  // "ab" is not a piece
      document(R"({"\ud800": 0})", "[]"),
      document("{\"\xC0\xAF\": 0}", "[]"),
      document("[]", "[]"),
      replaced(document(), "\"fuse_unk\": true", "\"fuse_unk\": 1"),
      replaced(document(), kMergesMember, ""),
      replaced(document(), "null", "nul"),
      "{not json",
      "[]",
  };
  for (size_t i = 0; i < variants.size(); ++i) {
    const fs::path path = write(dir, "v" + std::to_string(i) + ".json", variants[i]);
    EXPECT_EQ(scanned(path), parsed(path)) << variants[i];
  }
  EXPECT_EQ(scanned(dir.path() / "missing.json"), parsed(dir.path() / "missing.json"));
}

TEST(TokenizerJsonTablesTest, ModelFolderWithConfigLoadsAsBefore) {
  testing::TempDir dir;
  write(dir, "tokenizer.json", document());
  write(dir, "tokenizer_config.json",
        R"({"add_bos_token": true, "bos_token": "<bos>", "eos_token": {"content": "<eos>"}})");
  const Tokenizer t = Tokenizer::from_path(dir.path());
  EXPECT_EQ(t.bos_id(), 2);
  EXPECT_EQ(t.eos_ids(), (std::vector<int32_t>{1}));
  EXPECT_EQ(t.encode("ab", true, true), (std::vector<int32_t>{2, 6}));
  EXPECT_EQ(t.encode("éa", false, true), (std::vector<int32_t>{12}));
}

// Loading writes nothing anywhere near the model (its folder may be read-only).
TEST(TokenizerJsonTablesTest, ReadOnlyModelFolderLoadsAndStaysUntouched) {
  testing::TempDir dir;
  write(dir, "tokenizer.json", document());
  const auto entries = [&] {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir.path())) names.push_back(e.path().string());
    return names;
  };
  const std::vector<std::string> before = entries();
  fs::permissions(dir.path(), fs::perms::owner_read | fs::perms::owner_exec);
  const Tokenizer t = Tokenizer::from_path(dir.path());
  fs::permissions(dir.path(), fs::perms::owner_all);
  EXPECT_EQ(t.encode("ab", false, true), (std::vector<int32_t>{6}));
  EXPECT_EQ(entries(), before);
}

TEST(TokenizerJsonTablesTest, BenchCommandTimesBothWays) {
  testing::TempDir dir;
  const fs::path path = write(dir, "tokenizer.json", document());
  const std::string bin = testing::cli_binary().string();
  auto r =
      testing::run_command(bin + " bench tokenizer-load " + path.string() + " --runs 2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["vocab_size"], 14);
  EXPECT_EQ(j["runs"], 2);
  EXPECT_GT(j["load_cpu_s"].get<double>(), 0.0);
  EXPECT_GT(j["nlohmann_cpu_s"].get<double>(), 0.0);
  r = testing::run_command(bin + " bench tokenizer-load 2>&1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out.substr(0, r.out.find('\n')), "error: bench tokenizer-load needs TOKENIZER_JSON");
}

// The tokenizer.json exported from the real Gemma 4 vocabulary, loaded both ways.
TEST(TokenizerJsonTablesTest, RealGemma4FileLoadsExactlyAsTheWholeFileParser) {
  GS_REQUIRE_SHARED(shared);
  const fs::path gguf = shared / "data/gemma4-tokenizer/ggml-vocab-gemma-4.gguf";
  if (!fs::exists(gguf)) {
    if (testing::running_in_ci()) FAIL() << gguf << " is missing";
    GTEST_SKIP() << gguf << " is missing";
  }
  testing::TempDir dir;
  const std::string text = to_hf_tokenizer_json(tokenizer_spec_from_gguf(GgufFile(gguf)));
  const fs::path path = write(dir, "tokenizer.json", text);
  ASSERT_TRUE(scan_tokenizer_json_tables(text).has_value()) << "the scanner gave up on the file";
  const TokenizerSpec fast = spec_from_hf_json_file(path, std::nullopt);
  EXPECT_EQ(fast.vocab.size(), 262144u);
  EXPECT_EQ(fast.merges.size(), 514906u);
  EXPECT_EQ(describe(fast), parsed(path));
}

}  // namespace
}  // namespace gemmaserve
