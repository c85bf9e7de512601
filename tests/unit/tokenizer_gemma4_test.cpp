// The Gemma 4 vocabulary from shared/: llama.cpp's test strings (.inp, Hugging Face's ids in .out)
// through both the GGUF path and the tokenizer.json generated from it, special tokens, decoding,
// byte round-trips and speed on long inputs.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/gguf.h"
#include "test_support.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/hf_tokenizer_json.h"
#include "tokenizer/tokenizer.h"
#include "core/utf8.h"

namespace gemmaserve {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct VocabCase {
  std::string text;
  std::vector<int32_t> ids;
};

// llama.cpp's format: texts joined by "\n__ggml_vocab_test__\n" (a trailing separator may follow
// the last text), and one line of space-separated ids per text in .out.
std::vector<VocabCase> read_vocab_cases(const fs::path& inp, const fs::path& out) {
  const std::string separator = "\n__ggml_vocab_test__\n";
  const std::string inp_text = read_file(inp);
  std::vector<std::string> texts;
  size_t pos = 0;
  for (size_t hit; (hit = inp_text.find(separator, pos)) != std::string::npos;
       pos = hit + separator.size()) {
    texts.push_back(inp_text.substr(pos, hit - pos));
  }
  std::string last = inp_text.substr(pos);
  if (const std::string tail = "\n__ggml_vocab_test__";
      last.size() >= tail.size() &&
      last.compare(last.size() - tail.size(), tail.size(), tail) == 0) {
    last.resize(last.size() - tail.size());
  }
  if (!(last.empty() && pos == inp_text.size() && pos > 0)) texts.push_back(last);

  std::vector<std::vector<int32_t>> ids;
  std::istringstream lines(read_file(out));
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::vector<int32_t> row;
    for (int32_t id; words >> id;) row.push_back(id);
    ids.push_back(row);
  }
  EXPECT_EQ(texts.size(), ids.size()) << inp;
  std::vector<VocabCase> cases;
  for (size_t i = 0; i < std::min(texts.size(), ids.size()); ++i)
    cases.push_back({texts[i], ids[i]});
  return cases;
}

// Random text mixing scripts, emoji sequences, whitespace runs and special-token look-alikes.
// A literal "▁" decodes as a space (as in Hugging Face), so it is only in when `with_metaspace`.
std::string random_text(std::mt19937& rng, size_t pieces, bool with_metaspace = false) {
  static const std::vector<std::string> kPieces = {
      "Hello",
      " world",
      "the",
      " ",
      "  ",
      "    ",
      "\t",
      "\n",
      "\n\n",
      "\r\n",
      " \n ",
      "3",
      "333",
      "3.14",
      "!!!",
      "...",
      "'s",
      "Ä",
      "über",
      "нещо",
      "Български",
      "我想在",
      "工作",
      "カタカナ",
      "한국어",
      "العربية",
      "עברית",
      "हिन्दी",
      "ខ្មែរ",
      "ไทย",
      "🚀",
      "😶‍🌫️",
      "👍🏽",
      "🇫🇷",
      "✅",
      "🦙",
      "é",
      "e\u0301",
      "\u200b",
      "\u00a0",
      "\uFEFF",
      "<bos>",
      "<eos>",
      "<|turn>",
      "<turn|>",
      "<|\"|>",
      "<|image|>",
      "<|tool_call>",
      "<|tur",
      "<0x41>",
      "<unused3>",
      "[multimodal]",
      "\x01",
      "\x7f",
      "\U0010FFFD",
      "\uE000",
      "    def f(x):\n",
  };
  std::string s;
  std::uniform_int_distribution<size_t> pick(0, kPieces.size() - 1);
  std::uniform_int_distribution<int> kind(0, 9);
  std::uniform_int_distribution<uint32_t> cp(0x20, 0x10FFFF);
  for (size_t i = 0; i < pieces; ++i) {
    const int k = kind(rng);
    if (with_metaspace && k == 1) {
      s += "\u2581";
    } else if (k == 0) {
      uint32_t c = cp(rng);
      if (c >= 0xD800 && c <= 0xDFFF) c = 0x41;  // surrogates are not characters
      utf8::append(s, c);
    } else {
      s += kPieces[pick(rng)];
    }
  }
  return s;
}

std::string random_bytes(std::mt19937& rng, size_t max_len) {
  std::uniform_int_distribution<size_t> len(0, max_len);
  std::uniform_int_distribution<int> byte(0, 255);
  std::string s(len(rng), '\0');
  for (char& c : s) c = static_cast<char>(byte(rng));
  return s;
}

class Gemma4TokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto shared = testing::shared_dir();
    if (!shared) return;
    dir_ = *shared / "data/gemma4-tokenizer";
    gguf_path_ = dir_ / "ggml-vocab-gemma-4.gguf";
    if (!fs::exists(gguf_path_)) return;
    from_gguf_ = std::make_unique<Tokenizer>(Tokenizer::from_path(gguf_path_));
  }
  static void TearDownTestSuite() {
    from_gguf_.reset();
    from_json_.reset();
    temp_.reset();
  }
  void SetUp() override {
    GS_REQUIRE_SHARED(shared);
    if (!from_gguf_) {
      if (testing::running_in_ci()) FAIL() << gguf_path_ << " is missing";
      GTEST_SKIP() << gguf_path_ << " is missing";
    }
  }

  static std::vector<VocabCase> cases() {
    return read_vocab_cases(dir_ / "ggml-vocab-gemma-4.gguf.inp",
                            dir_ / "ggml-vocab-gemma-4.gguf.out");
  }
  static const Tokenizer& gguf() { return *from_gguf_; }
  // The tokenizer.json generated from the GGUF, written and loaded on first use (about a second).
  static const Tokenizer& json() {
    if (!from_json_) {
      temp_ = std::make_unique<testing::TempDir>();
      json_path_ = temp_->path() / "tokenizer.json";
      std::ofstream(json_path_, std::ios::binary)
          << to_hf_tokenizer_json(tokenizer_spec_from_gguf(GgufFile(gguf_path_)));
      from_json_ = std::make_unique<Tokenizer>(Tokenizer::from_path(json_path_));
    }
    return *from_json_;
  }

  static inline fs::path dir_;
  static inline fs::path gguf_path_;
  static inline fs::path json_path_;
  static inline std::unique_ptr<testing::TempDir> temp_;
  static inline std::unique_ptr<Tokenizer> from_gguf_;
  static inline std::unique_ptr<Tokenizer> from_json_;
};

TEST_F(Gemma4TokenizerTest, ReadsAllLlamaCppCases) {
  const auto all = cases();
  EXPECT_EQ(all.size(), 46u);
  EXPECT_EQ(all.front().text, "ied 4 \u00bd months");
  EXPECT_EQ(all[2].text, "");
  EXPECT_TRUE(all[2].ids.empty());
  EXPECT_EQ(all.back().text.substr(all.back().text.size() - 4), "a'lL");  // no trailing newline
}

TEST_F(Gemma4TokenizerTest, GgufPathReproducesHuggingFaceIdsForEveryCase) {
  int passed = 0;
  for (const VocabCase& c : cases()) {
    EXPECT_EQ(gguf().encode(c.text, false, true), c.ids) << "text: " << c.text;
    passed += gguf().encode(c.text, false, true) == c.ids;
  }
  EXPECT_EQ(passed, 46);
}

TEST_F(Gemma4TokenizerTest, GeneratedTokenizerJsonReproducesHuggingFaceIdsForEveryCase) {
  int passed = 0;
  for (const VocabCase& c : cases()) {
    EXPECT_EQ(json().encode(c.text, false, true), c.ids) << "text: " << c.text;
    passed += json().encode(c.text, false, true) == c.ids;
  }
  EXPECT_EQ(passed, 46);
}

TEST_F(Gemma4TokenizerTest, BothPathsAgreeOnRandomTextAndMetadata) {
  std::mt19937 rng(1234);
  for (int i = 0; i < 1000; ++i) {
    const std::string s = random_text(rng, 1 + i % 40, /*with_metaspace=*/true);
    for (bool parse_special : {true, false}) {
      ASSERT_EQ(gguf().encode(s, true, parse_special), json().encode(s, true, parse_special)) << s;
    }
  }
  EXPECT_EQ(gguf().vocab_size(), 262144u);
  EXPECT_EQ(json().vocab_size(), 262144u);
  EXPECT_EQ(gguf().bos_id(), json().bos_id());
  EXPECT_EQ(gguf().eos_ids(), json().eos_ids());
  for (int32_t id = 0; id < 262144; id += 97) {
    ASSERT_EQ(gguf().id_to_piece(id), json().id_to_piece(id));
    ASSERT_EQ(gguf().is_special(id), json().is_special(id));
  }
}

TEST_F(Gemma4TokenizerTest, SpecialTokenIds) {
  for (const Tokenizer* t : {&gguf(), &json()}) {
    EXPECT_EQ(t->piece_to_id("<pad>"), 0);
    EXPECT_EQ(t->piece_to_id("<eos>"), 1);
    EXPECT_EQ(t->piece_to_id("<bos>"), 2);
    EXPECT_EQ(t->piece_to_id("<unk>"), 3);
    EXPECT_EQ(t->piece_to_id("<|tool>"), 46);
    EXPECT_EQ(t->piece_to_id("<|tool_response>"), 50);
    EXPECT_EQ(t->piece_to_id("<|\"|>"), 52);
    EXPECT_EQ(t->piece_to_id("<|think|>"), 98);
    EXPECT_EQ(t->piece_to_id("<|channel>"), 100);
    EXPECT_EQ(t->piece_to_id("<channel|>"), 101);
    EXPECT_EQ(t->piece_to_id("<|turn>"), 105);
    EXPECT_EQ(t->piece_to_id("<turn|>"), 106);
    EXPECT_EQ(t->piece_to_id("\n"), 107);
    EXPECT_EQ(t->piece_to_id("<|image>"), 255999);
    EXPECT_EQ(t->piece_to_id("<|image|>"), 258880);
    EXPECT_EQ(t->piece_to_id("not a piece"), std::nullopt);
    EXPECT_EQ(t->bos_id(), 2);
    EXPECT_EQ(t->eos_ids(), std::vector<int32_t>{1});
    EXPECT_TRUE(t->adds_bos());
    EXPECT_TRUE(t->is_special(2));
    EXPECT_TRUE(t->is_special(106));
    EXPECT_FALSE(t->is_special(52));  // user-defined in the GGUF: an added token, not special
    EXPECT_FALSE(t->is_special(107));
    EXPECT_EQ(t->id_to_piece(236743), "\u2581");
    EXPECT_EQ(t->id_to_piece(248), "<0x0A>");
  }
}

TEST_F(Gemma4TokenizerTest, EncodesChatMarkupWithSpecialTokens) {
  const std::vector<int32_t> ids =
      gguf().encode("<|turn>user\nHi<turn|>\n<|turn>model\n", true, true);
  ASSERT_GE(ids.size(), 5u);
  EXPECT_EQ(ids[0], 2);
  EXPECT_EQ(ids[1], 105);
  EXPECT_EQ(gguf().encode("<|image|><|\"|>x<|\"|>", false, true),
            (std::vector<int32_t>{258880, 52, gguf().encode("x", false, true)[0], 52}));
  // Adjacent specials and a longest match: "<|image|>" wins over "<|image>" at the same start.
  EXPECT_EQ(gguf().encode("<bos><bos>", false, true), (std::vector<int32_t>{2, 2}));
  EXPECT_EQ(gguf().encode("<|image><|image|>", false, true),
            (std::vector<int32_t>{255999, 258880}));
}

TEST_F(Gemma4TokenizerTest, WithoutParseSpecialSpecialTokensAreText) {
  const std::vector<int32_t> as_text = gguf().encode("<bos>", false, false);
  EXPECT_EQ(as_text, (std::vector<int32_t>{236820, 46757, 236813}));  // "<", "bos", ">"
  EXPECT_EQ(gguf().decode(as_text, true), "<bos>");
  EXPECT_EQ(gguf().encode("<turn|>", false, false).size() > 1, true);
  // Non-special added tokens are still matched, as with HF's split_special_tokens.
  EXPECT_EQ(gguf().encode("<|\"|>", false, false), std::vector<int32_t>{52});
  EXPECT_EQ(gguf().encode("Hi", true, false),
            (std::vector<int32_t>{2, gguf().encode("Hi", false, true)[0]}));
}

TEST_F(Gemma4TokenizerTest, DecodeKeepsOrSkipsSpecialTokens) {
  const std::vector<int32_t> ids = gguf().encode("<|turn>user\nHello world<turn|>", true, true);
  EXPECT_EQ(gguf().decode(ids, false), "<bos><|turn>user\nHello world<turn|>");
  EXPECT_EQ(gguf().decode(ids, true), "user\nHello world");
  // Non-special added tokens stay even when skipping.
  EXPECT_EQ(gguf().decode(std::vector<int32_t>{52, 2, 52}, true), "<|\"|><|\"|>");
}

TEST_F(Gemma4TokenizerTest, DecodeRejectsIdsOutsideTheVocabulary) {
  try {
    gguf().decode(std::vector<int32_t>{2, 262144}, false);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "token id 262144 is out of range (vocabulary size 262144)");
  }
  EXPECT_THROW(gguf().decode(std::vector<int32_t>{-1}, false), InputError);
  EXPECT_THROW(gguf().id_to_piece(300000), InputError);
}

TEST_F(Gemma4TokenizerTest, ByteFallbackAndItsDecoding) {
  // A plane-15 private-use character has no token: its UTF-8 bytes come out as byte tokens.
  EXPECT_EQ(gguf().encode("\U000F0000", false, true),
            (std::vector<int32_t>{238 + 0xF3, 238 + 0xB0, 238 + 0x80, 238 + 0x80}));
  // Invalid UTF-8 in the input is encoded byte by byte, and decode() renders an invalid run the
  // way Hugging Face does: one U+FFFD per byte of the run. decode_bytes() gives the bytes back.
  const std::string invalid =
      "a\xE2\x82"
      "b\xFF";
  const std::vector<int32_t> ids = gguf().encode(invalid, false, true);
  EXPECT_EQ(ids, (std::vector<int32_t>{gguf().encode("a", false, true)[0], 238 + 0xE2, 238 + 0x82,
                                       gguf().encode("b", false, true)[0], 238 + 0xFF}));
  EXPECT_EQ(gguf().decode(ids, false), "a\uFFFD\uFFFDb\uFFFD");
  EXPECT_EQ(gguf().decode_bytes(ids, false), invalid);
  // A valid run decodes to its character; a run with any invalid byte becomes all U+FFFD.
  EXPECT_EQ(gguf().decode(std::vector<int32_t>{238 + 0xE2, 238 + 0x82, 238 + 0xAC}, false),
            "\u20AC");
  EXPECT_EQ(
      gguf().decode(std::vector<int32_t>{238 + 0xE2, 238 + 0x82, 238 + 0xAC, 238 + 0xFF}, false),
      "\uFFFD\uFFFD\uFFFD\uFFFD");
}

TEST_F(Gemma4TokenizerTest, RandomTextRoundTrips) {
  std::mt19937 rng(99);
  for (int i = 0; i < 1000; ++i) {
    const std::string s = random_text(rng, 1 + i % 60);
    ASSERT_EQ(gguf().decode(gguf().encode(s, false, true), false), s);
    ASSERT_EQ(gguf().decode(gguf().encode(s, false, false), false), s);
    ASSERT_EQ(gguf().decode(gguf().encode(s, true, false), true), s);  // BOS added and skipped
  }
}

TEST_F(Gemma4TokenizerTest, RandomBytesRoundTripThroughByteFallback) {
  std::mt19937 rng(7);
  int invalid = 0;
  for (int i = 0; i < 1000; ++i) {
    const std::string s = random_bytes(rng, 64);
    const std::vector<int32_t> ids = gguf().encode(s, false, true);
    ASSERT_EQ(gguf().decode_bytes(ids, false), s);
    const std::string text = gguf().decode(ids, false);
    ASSERT_TRUE(utf8::is_valid(text));
    if (utf8::is_valid(s)) {
      ASSERT_EQ(text, s);
    } else {
      ++invalid;
    }
  }
  EXPECT_GT(invalid, 900);  // random bytes are almost never valid UTF-8
}

TEST_F(Gemma4TokenizerTest, LongInputsTokenizeFast) {
// clang 14 does not define GCC's __SANITIZE_ADDRESS__: ask it through __has_feature.
#if defined(__SANITIZE_ADDRESS__)
#define GS_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GS_UNDER_ASAN 1
#endif
#endif
#ifdef GS_UNDER_ASAN
  const double budget_s = 5.0;
#else
  const double budget_s = 1.0;
#endif
  std::mt19937 rng(5);
  std::string mixed;
  while (mixed.size() < 100000) mixed += random_text(rng, 50);
  for (const std::string& s : {mixed, std::string(100000, 'a'), std::string(100000, ' '),
                               std::string(100000, '\n'), std::string(100000, '3')}) {
    const auto start = std::chrono::steady_clock::now();
    const std::vector<int32_t> ids = gguf().encode(s, false, true);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(seconds, budget_s) << s.substr(0, 10);
    EXPECT_EQ(gguf().decode(ids, false), s);
  }
}

TEST_F(Gemma4TokenizerTest, LoadsModelFolderWithTokenizerConfig) {
  testing::TempDir dir;
  json();  // writes json_path_
  fs::copy_file(json_path_, dir.path() / "tokenizer.json");
  std::ofstream(dir.path() / "tokenizer_config.json")
      << R"({"add_bos_token": false, "bos_token": "<bos>", "eos_token": "<turn|>",
            "added_tokens_decoder": {"52": {"content": "<|\"|>", "special": true}}})";
  const Tokenizer t = Tokenizer::from_path(dir.path());
  EXPECT_EQ(t.encode("Hi", true, true), gguf().encode("Hi", false, true));  // no BOS added
  EXPECT_FALSE(t.adds_bos());
  EXPECT_EQ(t.eos_ids(), std::vector<int32_t>{106});
  EXPECT_TRUE(t.is_special(52));
  EXPECT_EQ(t.decode(std::vector<int32_t>{52, 107}, true), "\n");
}

TEST_F(Gemma4TokenizerTest, GgufReaderSeesTheTokenizerMetadata) {
  const GgufFile f(gguf_path_);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.get("tokenizer.ggml.model").as_string(), "gemma4");
  EXPECT_EQ(f.get("tokenizer.ggml.tokens").array_size(), 262144u);
  EXPECT_EQ(f.get("tokenizer.ggml.merges").array_size(), 514906u);
  EXPECT_EQ(f.get("tokenizer.ggml.token_type").as_int_array()[2], 3);
  EXPECT_EQ(f.get("tokenizer.ggml.bos_token_id").as_int(), 2);
  EXPECT_TRUE(f.get("tokenizer.ggml.add_bos_token").as_bool());
  EXPECT_EQ(f.get("general.architecture").as_string(), "gemma4");
  EXPECT_TRUE(f.tensors().empty());
}

}  // namespace
}  // namespace gemmaserve
