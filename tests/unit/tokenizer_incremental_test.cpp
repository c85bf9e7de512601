// IncrementalDetokenizer: only complete UTF-8 comes out, byte-fallback runs split across tokens are
// held until they end, and the pieces always add up to Tokenizer::decode() of the whole sequence.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "test_support.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/text_pipeline.h"
#include "tokenizer/tokenizer.h"
#include "core/utf8.h"

namespace gemmaserve {
namespace {

using Ids = std::vector<int32_t>;

// ids: 0 <bos> 1 ▁ 2 a 3 b, then <0x00>..<0xFF> at 4..259.
constexpr int32_t kBos = 0;
constexpr int32_t kA = 2;
constexpr int32_t kB = 3;
constexpr int32_t byte_id(int b) { return 4 + b; }

Tokenizer tiny_tokenizer(bool strip_after_fuse = false) {
  TokenizerSpec spec;
  spec.source = "tiny";
  spec.vocab = {"<bos>", "\u2581", "a", "b"};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    spec.vocab.push_back(name);
  }
  spec.bpe.byte_fallback = true;
  spec.added_tokens.push_back(AddedToken{kBos, "<bos>", true, false, false, false});
  spec.normalizer = gemma_normalizer();
  spec.pre_tokenizer = gemma_pre_tokenizer();
  spec.decoder = gemma_decoder();
  if (strip_after_fuse) spec.decoder->push_back({DecoderStep::Kind::kStrip, "", " ", 1, 0});
  spec.bos_id = kBos;
  return Tokenizer(std::move(spec));
}

// Feeds ids one at a time; checks each piece is whole UTF-8 and returns the pieces.
std::vector<std::string> stream(const Tokenizer& t, const Ids& ids, bool skip_special) {
  IncrementalDetokenizer d(t, skip_special);
  std::vector<std::string> pieces;
  for (int32_t id : ids) {
    pieces.push_back(d.feed(id));
    EXPECT_TRUE(utf8::is_valid(pieces.back()));
  }
  pieces.push_back(d.finish());
  EXPECT_TRUE(utf8::is_valid(pieces.back()));
  return pieces;
}

std::string joined(const std::vector<std::string>& pieces) {
  std::string s;
  for (const std::string& p : pieces) s += p;
  return s;
}

TEST(IncrementalDetokenizerTest, HoldsAByteRunUntilItEnds) {
  const Tokenizer t = tiny_tokenizer();
  const Ids ids = {kA, byte_id(0xE2), byte_id(0x82), byte_id(0xAC), kB};
  EXPECT_EQ(stream(t, ids, false), (std::vector<std::string>{"a", "", "", "", "\u20ACb", ""}));
  EXPECT_EQ(t.decode(ids, false), "a\u20ACb");
}

TEST(IncrementalDetokenizerTest, FinishRendersAnUnfinishedRunAsDecodeDoes) {
  const Tokenizer t = tiny_tokenizer();
  const Ids ids = {kA, byte_id(0xF0), byte_id(0x9F)};
  const auto pieces = stream(t, ids, false);
  EXPECT_EQ(pieces, (std::vector<std::string>{"a", "", "", "\uFFFD\uFFFD"}));
  EXPECT_EQ(joined(pieces), t.decode(ids, false));
}

TEST(IncrementalDetokenizerTest, SkippedSpecialTokensDoNotBreakAByteRun) {
  const Tokenizer t = tiny_tokenizer();
  const Ids ids = {byte_id(0xE2), kBos, byte_id(0x82), byte_id(0xAC), 1};
  EXPECT_EQ(joined(stream(t, ids, true)), "\u20AC ");
  EXPECT_EQ(t.decode(ids, true), "\u20AC ");
  EXPECT_EQ(joined(stream(t, ids, false)), t.decode(ids, false));
  EXPECT_EQ(t.decode(ids, false), "\uFFFD<bos>\uFFFD\uFFFD ");
}

TEST(IncrementalDetokenizerTest, NonLocalDecoderFallsBackToWholeDecodes) {
  const Tokenizer t = tiny_tokenizer(/*strip_after_fuse=*/true);
  const Ids ids = {1, kA, 1, byte_id(0xC3), byte_id(0xA9), kB};
  EXPECT_EQ(t.decode(ids, false), "a \u00E9b");
  const auto pieces = stream(t, ids, false);
  EXPECT_EQ(pieces[1], "a");
  EXPECT_EQ(joined(pieces), t.decode(ids, false));
}

TEST(IncrementalDetokenizerTest, RejectsUnknownIdsAndResets) {
  const Tokenizer t = tiny_tokenizer();
  IncrementalDetokenizer d(t);
  try {
    d.feed(260);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "token id 260 is out of range (vocabulary size 260)");
  }
  EXPECT_EQ(d.feed(byte_id(0xE2)), "");
  d.reset();
  EXPECT_EQ(d.feed(kA), "a");
  EXPECT_EQ(d.finish(), "");
}

TEST(IncrementalDetokenizerTest, HoldsTheTokenizerByReference) {
  // Binding to a temporary must not compile, so the tokenizer is never copied per request.
  static_assert(!std::is_constructible_v<IncrementalDetokenizer, Tokenizer&&, bool>);
  static_assert(std::is_constructible_v<IncrementalDetokenizer, const Tokenizer&, bool>);
  const Tokenizer t = tiny_tokenizer();
  IncrementalDetokenizer a(t), b(t, /*skip_special=*/true);
  EXPECT_EQ(a.feed(kBos), "<bos>");
  EXPECT_EQ(b.feed(kBos), "");
  EXPECT_EQ(a.feed(kA) + b.feed(kA), "aa");
}

TEST(IncrementalDetokenizerTest, RandomSequencesOfTheGemma4VocabularyMatchDecode) {
  GS_REQUIRE_SHARED(shared);
  const auto path = shared / "data/gemma4-tokenizer/ggml-vocab-gemma-4.gguf";
  if (!std::filesystem::exists(path)) {
    if (testing::running_in_ci()) FAIL() << path << " is missing";
    GTEST_SKIP() << path << " is missing";
  }
  const Tokenizer t = Tokenizer::from_path(path);
  std::mt19937 rng(42);
  std::uniform_int_distribution<int> kind(0, 9);
  std::uniform_int_distribution<int32_t> any(0, static_cast<int32_t>(t.vocab_size()) - 1);
  std::uniform_int_distribution<int32_t> byte(238, 493);  // <0x00>..<0xFF>
  const Ids specials = {1, 2, 52, 105, 106, 258880};
  std::uniform_int_distribution<size_t> special(0, specials.size() - 1);
  std::uniform_int_distribution<size_t> length(0, 60);
  for (int round = 0; round < 400; ++round) {
    Ids ids;
    for (size_t i = length(rng); i > 0; --i) {
      const int k = kind(rng);
      ids.push_back(k < 4 ? byte(rng) : k < 5 ? specials[special(rng)] : any(rng));
    }
    // Also real encodings of multi-byte characters that need byte fallback.
    if (round % 4 == 0) {
      for (int32_t id : t.encode("\U000F0000x\U0010FFFD \u20AC", false, true)) ids.push_back(id);
    }
    for (bool skip : {false, true}) {
      ASSERT_EQ(joined(stream(t, ids, skip)), t.decode(ids, skip)) << "round " << round;
    }
  }
}

}  // namespace
}  // namespace gemmaserve
