// The tokenizer.json interpreter on small synthetic files: BPE merge order, byte fallback and
// <unk>, added tokens, normalizers, Split behaviors, decoders, post-processor, the writer, and the
// exact errors for unsupported or malformed files.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "test_support.h"
#include "tokenizer/hf_tokenizer_json.h"
#include "tokenizer/text_pipeline.h"
#include "tokenizer/tokenizer.h"

namespace gemmaserve {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Ids = std::vector<int32_t>;

// ids:  0 <pad> 1 <eos> 2 <bos> 3 <unk> 4 ▁ 5 a 6 b 7 c 8 ab 9 bc 10 abc 11 aa 12 ▁a
//       13 <0xE2> 14 <0x82> 15 <0xAC> 16 <0xFF> 17 x 18 <sep>
const std::vector<std::string> kVocab = {
    "<pad>", "<eos>", "<bos>",   "<unk>",  "\u2581", "a",      "b",      "c", "ab",   "bc",
    "abc",   "aa",    "\u2581a", "<0xE2>", "<0x82>", "<0xAC>", "<0xFF>", "x", "<sep>"};

json added(int id, const std::string& content, bool special, bool normalized = false) {
  return {{"id", id},        {"content", content},       {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", normalized}, {"special", special}};
}

// A Gemma-shaped tokenizer.json over kVocab with the given merges.
json gemma_json(const std::vector<std::pair<std::string, std::string>>& merges) {
  json vocab = json::object();
  for (size_t i = 0; i < kVocab.size(); ++i) vocab[kVocab[i]] = i;
  json m = json::array();
  for (const auto& [a, b] : merges) m.push_back({a, b});
  return {
      {"version", "1.0"},
      {"added_tokens",
       {added(0, "<pad>", true), added(1, "<eos>", true), added(2, "<bos>", true),
        added(3, "<unk>", true), added(18, "<sep>", true)}},
      {"normalizer", {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}}},
      {"pre_tokenizer",
       {{"type", "Split"},
        {"pattern", {{"String", " "}}},
        {"behavior", "MergedWithPrevious"},
        {"invert", false}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single",
         {{{"SpecialToken", {{"id", "<bos>"}, {"type_id", 0}}}},
          {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"special_tokens", {{"<bos>", {{"id", "<bos>"}, {"ids", {2}}, {"tokens", {"<bos>"}}}}}}}},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders",
         {{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
          {{"type", "ByteFallback"}},
          {{"type", "Fuse"}}}}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", "<unk>"},
        {"fuse_unk", true},
        {"byte_fallback", true},
        {"ignore_merges", false},
        {"vocab", vocab},
        {"merges", m}}},
  };
}

Tokenizer load(const json& j) { return Tokenizer::from_json(j, nullptr, "tok.json"); }

std::string load_error(const json& j, const json* config = nullptr) {
  try {
    Tokenizer::from_json(j, config, "tok.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(TokenizerBpeTest, MergesApplyInRankOrderNotTextOrder) {
  EXPECT_EQ(load(gemma_json({{"b", "c"}, {"a", "b"}})).encode("abc", false, true), (Ids{5, 9}));
  EXPECT_EQ(load(gemma_json({{"a", "b"}, {"b", "c"}})).encode("abc", false, true), (Ids{8, 7}));
  EXPECT_EQ(load(gemma_json({{"b", "c"}, {"a", "b"}, {"a", "bc"}})).encode("abc", false, true),
            (Ids{10}));
  // Legacy "a b" strings mean the same as pairs.
  json legacy = gemma_json({});
  legacy["model"]["merges"] = {"b c", "a bc"};
  EXPECT_EQ(load(legacy).encode("abc", false, true), (Ids{10}));
}

TEST(TokenizerBpeTest, EqualRanksMergeLeftmostFirst) {
  const Tokenizer t = load(gemma_json({{"a", "a"}}));
  EXPECT_EQ(t.encode("aaa", false, true), (Ids{11, 5}));
  EXPECT_EQ(t.encode("aaaa", false, true), (Ids{11, 11}));
  EXPECT_EQ(t.encode("a a", false, true), (Ids{5, 4, 5}));  // " " -> ▁, no ▁a merge here
}

TEST(TokenizerBpeTest, ByteFallbackUnknownAndFusing) {
  const Tokenizer t = load(gemma_json({}));
  EXPECT_EQ(t.encode("\u20AC", false, true), (Ids{13, 14, 15}));  // € has all three byte tokens
  EXPECT_EQ(t.encode("a\u00E9\u00E9b", false, true),
            (Ids{5, 3, 6}));  // é has none: one fused <unk>
  // As in tokenizers, byte tokens go in before a pending <unk> is flushed.
  EXPECT_EQ(t.encode("\u00E9\u20AC", false, true), (Ids{13, 14, 15, 3}));
  json no_fuse = gemma_json({});
  no_fuse["model"]["fuse_unk"] = false;
  EXPECT_EQ(load(no_fuse).encode("\u00E9\u00E9", false, true), (Ids{3, 3}));
  json no_unk = gemma_json({});
  no_unk["model"]["unk_token"] = nullptr;
  EXPECT_EQ(load(no_unk).encode("a\u00E9a", false, true), (Ids{5, 5}));  // dropped
  json no_fallback = gemma_json({});
  no_fallback["model"]["byte_fallback"] = false;
  EXPECT_EQ(load(no_fallback).encode("\u20AC", false, true), (Ids{3}));
}

TEST(TokenizerBpeTest, IgnoreMergesTakesWholeWordsFromTheVocabulary) {
  json j = gemma_json({{"a", "b"}});
  EXPECT_EQ(load(j).encode("abc", false, true), (Ids{8, 7}));
  j["model"]["ignore_merges"] = true;
  EXPECT_EQ(load(j).encode("abc", false, true), (Ids{10}));
}

TEST(TokenizerAddedTokensTest, LongestMatchAndSpecialHandling) {
  json j = gemma_json({});
  j["added_tokens"].push_back(added(20, "<x>", false));
  j["added_tokens"].push_back(added(21, "<x><y>", true));
  const Tokenizer t = load(j);
  EXPECT_EQ(t.vocab_size(), 22u);
  EXPECT_EQ(t.encode("a<x><y><x>b", false, true), (Ids{5, 21, 20, 6}));
  // Without parse_special the special "<x><y>" stays text, and (as tokenizers' non-overlapping
  // search does) the skipped match is consumed, so "<x>" inside it is not found: "<", "x", "><y>".
  EXPECT_EQ(t.encode("<x><y>", false, false), (Ids{3, 17, 3}));
  EXPECT_EQ(t.encode("<x>", false, false), (Ids{20}));
  EXPECT_EQ(t.encode("<sep>", false, false), (Ids{3}));
  EXPECT_EQ(t.encode("<sep>", false, true), (Ids{18}));
  EXPECT_EQ(t.id_to_piece(21), "<x><y>");
  EXPECT_EQ(t.piece_to_id("<x>"), 20);
  EXPECT_TRUE(t.is_special(21));
  EXPECT_FALSE(t.is_special(20));
  EXPECT_FALSE(t.contains(19));
  try {
    t.id_to_piece(19);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "token id 19 is not in the vocabulary");
  }
}

TEST(TokenizerAddedTokensTest, NormalizedTokensMatchAfterNormalization) {
  json j = gemma_json({});
  j["added_tokens"].push_back(added(20, "b c", false, /*normalized=*/true));
  const Tokenizer t = load(j);
  EXPECT_EQ(t.encode("ab c", false, true), (Ids{5, 20}));  // matched as "b▁c"
  EXPECT_EQ(t.encode("ab\u2581c", false, true), (Ids{5, 20}));
}

TEST(TokenizerAddedTokensTest, LstripAndRstripSwallowWhitespace) {
  json j = gemma_json({});
  json m = added(20, "<m>", false);
  m["lstrip"] = true;
  m["rstrip"] = true;
  j["added_tokens"].push_back(m);
  const Tokenizer t = load(j);
  EXPECT_EQ(t.encode("a \t<m>\u3000 b", false, true), (Ids{5, 20, 6}));
  EXPECT_EQ(t.encode("<m>", false, true), (Ids{20}));
}

TEST(TokenizerNormalizerTest, PrependAndStripAsInOlderGemmaFiles) {
  json j = gemma_json({{"\u2581", "a"}});
  j["normalizer"] = {
      {"type", "Sequence"},
      {"normalizers",
       {{{"type", "Prepend"}, {"prepend", "\u2581"}},
        {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}}}}};
  j["decoder"]["decoders"].push_back(
      {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  const Tokenizer t = load(j);
  EXPECT_EQ(t.encode("a", false, true), (Ids{12}));
  EXPECT_EQ(t.encode("a<sep>a", false, true), (Ids{12, 18, 12}));  // each segment is prepended
  EXPECT_EQ(t.encode("", false, true), Ids{});                     // nothing to prepend to
  EXPECT_EQ(t.decode(Ids{12, 12}, false), "a a");
}

TEST(TokenizerPreTokenizerTest, SplitBehaviorsMatchTokenizers) {
  auto split = [](SplitBehavior b, bool invert = false) {
    PreTokenizer p({PreTokenizerStep{"-", b, invert}});
    std::vector<std::string_view> words;
    p.split("the-final--countdown", words);
    return std::vector<std::string>(words.begin(), words.end());
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(split(SplitBehavior::kRemoved), (V{"the", "final", "countdown"}));
  EXPECT_EQ(split(SplitBehavior::kIsolated), (V{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(split(SplitBehavior::kMergedWithPrevious), (V{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(split(SplitBehavior::kMergedWithNext), (V{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(split(SplitBehavior::kContiguous), (V{"the", "-", "final", "--", "countdown"}));
  EXPECT_EQ(split(SplitBehavior::kRemoved, /*invert=*/true), (V{"-", "-", "-"}));
}

TEST(TokenizerDecoderTest, ByteRunsAndMissingDecoder) {
  const Tokenizer t = load(gemma_json({}));
  EXPECT_EQ(t.decode(Ids{5, 13, 14, 15, 4, 6}, false), "a\u20AC b");
  EXPECT_EQ(t.decode(Ids{13, 14, 5}, false), "\uFFFD\uFFFDa");
  EXPECT_EQ(t.decode_bytes(Ids{13, 14, 5}, false),
            "\xE2\x82"
            "a");
  json none = gemma_json({});
  none["decoder"] = nullptr;
  EXPECT_EQ(load(none).decode(Ids{5, 6, 4}, false), "a b \u2581");  // tokenizers joins with spaces
}

TEST(TokenizerPostProcessorTest, TemplateAddsPrefixAndSuffix) {
  json j = gemma_json({});
  j["post_processor"]["single"].push_back({{"SpecialToken", {{"id", "<eos>"}, {"type_id", 0}}}});
  j["post_processor"]["special_tokens"]["<eos>"] = {
      {"id", "<eos>"}, {"ids", {1}}, {"tokens", {"<eos>"}}};
  const Tokenizer t = load(j);
  EXPECT_EQ(t.encode("a", true, true), (Ids{2, 5, 1}));
  EXPECT_EQ(t.encode("a", false, true), (Ids{5}));
  EXPECT_EQ(t.bos_id(), 2);
  json none = gemma_json({});
  none["post_processor"] = nullptr;
  EXPECT_EQ(load(none).encode("a", true, true), (Ids{5}));
  EXPECT_FALSE(load(none).adds_bos());
  EXPECT_EQ(load(none).bos_id(), 2);  // still known from the special "<bos>"
}

TEST(TokenizerConfigTest, TokenizerConfigOverridesSpecialTokens) {
  const json config = {{"add_bos_token", true},
                       {"add_eos_token", true},
                       {"bos_token", {{"content", "<bos>"}}},
                       {"eos_token", "<sep>"},
                       {"added_tokens_decoder", {{"17", {{"content", "x"}, {"special", true}}}}}};
  const Tokenizer t = Tokenizer::from_json(gemma_json({}), &config, "tok.json");
  EXPECT_EQ(t.encode("a", true, true), (Ids{2, 5, 18}));
  EXPECT_EQ(t.eos_ids(), Ids{18});
  EXPECT_TRUE(t.is_special(17));
  EXPECT_EQ(t.decode(Ids{5, 17}, true), "a");
  const json bad = {{"eos_token", "<nope>"}};
  EXPECT_EQ(load_error(gemma_json({}), &bad),
            "tokenizer_config.json: 'eos_token' names '<nope>', which is not a token");
}

TEST(TokenizerWriterTest, WrittenJsonReadsBackToTheSameTokenizer) {
  json j = gemma_json({{"a", "b"}, {"ab", "c"}});
  j["added_tokens"].push_back(added(20, "<x>", false));
  const TokenizerSpec spec = spec_from_hf_json(j, nullptr, "tok.json");
  const std::string text = to_hf_tokenizer_json(spec);
  const json back = json::parse(text);
  std::vector<std::string> keys;
  for (const auto& item : back.items()) keys.push_back(item.key());
  EXPECT_EQ(back["model"]["vocab"]["\u2581a"], 12);
  EXPECT_EQ(back["model"]["merges"][1], json({"ab", "c"}));
  EXPECT_EQ(back["added_tokens"][5]["content"], "<x>");
  EXPECT_EQ(back["post_processor"]["single"][0]["SpecialToken"]["id"], "<bos>");
  const Tokenizer a = load(j);
  const Tokenizer b = load(back);
  for (const std::string s : {"abc ab<x>c", "\u20AC\u00E9 <sep>", ""}) {
    EXPECT_EQ(a.encode(s, true, true), b.encode(s, true, true)) << s;
  }
  EXPECT_NE(text.find("\"model\": {\n    \"type\": \"BPE\""), std::string::npos);
  // nlohmann sorts keys, so check the order in the text itself.
  EXPECT_LT(text.find("\"added_tokens\""), text.find("\"normalizer\""));
  EXPECT_LT(text.find("\"decoder\""), text.find("\"model\""));
}

TEST(TokenizerErrorsTest, UnsupportedComponentsAreNamed) {
  auto with = [](const char* key, json value) {
    json j = gemma_json({});
    j[key] = std::move(value);
    return load_error(j);
  };
  EXPECT_EQ(
      with("normalizer", {{"type", "NFC"}}),
      "tok.json: normalizer type 'NFC' is not supported (supported: Replace, Prepend, Sequence)");
  EXPECT_EQ(
      with("normalizer", {{"type", "Replace"}, {"pattern", {{"Regex", "\\s+"}}}, {"content", " "}}),
      "tok.json: normalizer Replace with a Regex pattern is not supported (only literal String "
      "patterns)");
  EXPECT_EQ(
      with("pre_tokenizer", {{"type", "ByteLevel"}}),
      "tok.json: pre_tokenizer type 'ByteLevel' is not supported (supported: Split, Sequence)");
  EXPECT_EQ(
      with("decoder", {{"type", "Metaspace"}}),
      "tok.json: decoder type 'Metaspace' is not supported (supported: Replace, ByteFallback, "
      "Fuse, Strip, Sequence)");
  EXPECT_EQ(with("post_processor", {{"type", "ByteLevel"}}),
            "tok.json: post_processor type 'ByteLevel' is not supported (only TemplateProcessing)");
  json model = gemma_json({})["model"];
  model["type"] = "Unigram";
  EXPECT_EQ(with("model", model), "tok.json: model type 'Unigram' is not supported (only BPE)");
  json single_word = gemma_json({});
  single_word["added_tokens"][0]["single_word"] = true;
  EXPECT_EQ(load_error(single_word),
            "tok.json: added token '<pad>' uses single_word, which is not supported");
  json dropout = gemma_json({});
  dropout["model"]["dropout"] = 0.1;
  EXPECT_EQ(load_error(dropout),
            "tok.json: 'model.dropout' is not supported (BPE dropout must be null)");
}

TEST(TokenizerErrorsTest, MalformedFilesNameTheField) {
  json no_model = gemma_json({});
  no_model.erase("model");
  EXPECT_EQ(load_error(no_model), "tok.json: missing field 'model'");
  json bad_vocab = gemma_json({});
  bad_vocab["model"]["vocab"]["a"] = 99;
  EXPECT_EQ(
      load_error(bad_vocab),
      "tok.json: 'model.vocab' ids must be 0..N-1 without gaps or repeats (piece 'a' has id 99)");
  EXPECT_EQ(load_error(gemma_json({{"a", "zz"}})),
            "tok.json: 'model.merges[0]' uses 'zz', which is not in model.vocab");
  EXPECT_EQ(load_error(gemma_json({{"a", "x"}})),
            "tok.json: merge 0 ('a' + 'x') makes a piece that is not in the vocabulary");
  json bad_merge = gemma_json({});
  bad_merge["model"]["merges"] = {"a b c"};
  EXPECT_EQ(load_error(bad_merge),
            "tok.json: 'model.merges[0]' must be two pieces separated by one space");
  json bad_behavior = gemma_json({});
  bad_behavior["pre_tokenizer"]["behavior"] = "Sideways";
  EXPECT_EQ(load_error(bad_behavior),
            "tok.json: unknown Split behavior 'Sideways' in 'pre_tokenizer'");
  json bad_flag = gemma_json({});
  bad_flag["model"]["byte_fallback"] = "yes";
  EXPECT_EQ(load_error(bad_flag), "tok.json: 'model.byte_fallback' must be true or false");
  EXPECT_EQ(load_error(json::array()), "tok.json: tokenizer.json must be a JSON object");
}

TEST(TokenizerErrorsTest, PathsThatHoldNoTokenizer) {
  testing::TempDir dir;
  auto error_of = [](const fs::path& p) -> std::string {
    try {
      Tokenizer::from_path(p);
    } catch (const InputError& e) {
      return e.what();
    }
    return "(no error)";
  };
  EXPECT_EQ(error_of(dir.path() / "missing.json"),
            (dir.path() / "missing.json").string() + ": no such file or directory");
  EXPECT_EQ(error_of(dir.path()), dir.path().string() + ": no tokenizer.json in this folder");
  EXPECT_FALSE(Tokenizer::from_model_dir(dir.path()).has_value());
  std::ofstream(dir.path() / "bad.json") << "{not json";
  EXPECT_EQ(error_of(dir.path() / "bad.json")
                .rfind((dir.path() / "bad.json").string() + ": malformed JSON", 0),
            0u);
  std::ofstream(dir.path() / "tokenizer.json") << gemma_json({}).dump();
  ASSERT_TRUE(Tokenizer::from_model_dir(dir.path()).has_value());
  EXPECT_EQ(Tokenizer::from_path(dir.path()).encode("ab", true, true), (Ids{2, 5, 6}));
}

}  // namespace
}  // namespace gemmaserve
