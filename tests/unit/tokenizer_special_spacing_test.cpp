// spaces_between_special_tokens as vLLM's fast-tokenizer detokenizer honours it: with special
// tokens kept and the setting off, an added token right after another added token comes out as
// its raw content; otherwise the text is the tokenizer's decode. For Gemma 4's vocabulary (no added
// token holds a "▁") the setting changes nothing.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "test_support.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/text_pipeline.h"
#include "tokenizer/tokenizer.h"

namespace gemmaserve {
namespace {

using Ids = std::vector<int32_t>;

// ids: 0 <s> (special) 1 ▁ 2 a, 3 <t▁x> (special, holds a ▁), 4 ▁w▁ (added, not special).
constexpr int32_t kS = 0, kA = 2, kT = 3, kW = 4;

Tokenizer spaced_added_tokens() {
  TokenizerSpec spec;
  spec.source = "spaced";
  spec.vocab = {"<s>", "\u2581", "a", "<t\u2581x>", "\u2581w\u2581"};
  spec.added_tokens.push_back(AddedToken{kS, "<s>", true, false, false, false});
  spec.added_tokens.push_back(AddedToken{kT, "<t\u2581x>", true, false, false, false});
  spec.added_tokens.push_back(AddedToken{kW, "\u2581w\u2581", false, false, false, false});
  spec.normalizer = gemma_normalizer();
  spec.pre_tokenizer = gemma_pre_tokenizer();
  spec.decoder = gemma_decoder();
  return Tokenizer(std::move(spec));
}

std::string stream(const Tokenizer& t, const Ids& ids, bool skip_special, bool spaces) {
  IncrementalDetokenizer d(t, skip_special, spaces);
  std::string text;
  for (int32_t id : ids) text += d.feed(id);
  return text + d.finish();
}

TEST(SpacesBetweenSpecialTokensTest, OnIsTheTokenizersDecode) {
  const Tokenizer t = spaced_added_tokens();
  const Ids ids = {kS, kT, kW, kA, kW};
  EXPECT_EQ(stream(t, ids, /*skip_special=*/false, /*spaces=*/true), "<s><t x> w a w ");
  EXPECT_EQ(stream(t, ids, false, true), t.decode(ids, /*skip_special=*/false));
}

TEST(SpacesBetweenSpecialTokensTest, OffGivesRawContentForAnAddedTokenAfterAnAddedToken) {
  const Tokenizer t = spaced_added_tokens();
  // <t▁x> and ▁w▁ follow added tokens: raw; the last ▁w▁ follows "a": decoded.
  EXPECT_EQ(stream(t, {kS, kT, kW, kA, kW}, false, false), "<s><t\u2581x>\u2581w\u2581a w ");
  // The first added token of the output is decoded, like vLLM's stream (no previous token).
  EXPECT_EQ(stream(t, {kT, kW}, false, false), "<t x>\u2581w\u2581");
}

TEST(SpacesBetweenSpecialTokensTest, SkippingSpecialTokensTurnsTheRuleOff) {
  const Tokenizer t = spaced_added_tokens();
  // vLLM: spaces_between_special_tokens counts as on whenever skip_special_tokens is.
  EXPECT_EQ(stream(t, {kS, kW, kW, kA}, /*skip_special=*/true, /*spaces=*/false), " w  w a");
}

TEST(SpacesBetweenSpecialTokensTest, ResetForgetsThePreviousAddedToken) {
  const Tokenizer t = spaced_added_tokens();
  IncrementalDetokenizer d(t, false, false);
  EXPECT_EQ(d.feed(kS), "<s>");
  d.reset();
  EXPECT_EQ(d.feed(kW), " w ");
}

TEST(SpacesBetweenSpecialTokensTest, Gemma4VocabularyIsUnchanged) {
  GS_REQUIRE_SHARED(shared);
  const Tokenizer t =
      Tokenizer::from_path(shared / "data/gemma4-tokenizer/ggml-vocab-gemma-4.gguf");
  // Markers back to back, the way thinking and tool calls are written, plus text between.
  Ids ids = {2, 105, 100, 101, 48, 52, 52, 49, 50, 51, 106, 1};
  const std::vector<int32_t> text = t.encode("Hello <|\"|>world", false, true);
  ids.insert(ids.end(), text.begin(), text.end());
  EXPECT_EQ(stream(t, ids, false, false), stream(t, ids, false, true));
  EXPECT_EQ(stream(t, ids, false, false), t.decode(ids, false));
}

}  // namespace
}  // namespace gemmaserve
