// StopChecker with the real Gemma 4 vocabulary: stop strings across token boundaries and inside
// one token, held-back text that never leaks a stop string, stop ids, min_tokens, max_tokens, the
// model length, and byte-fallback characters split across steps.
#include "engine/stop_checker.h"

#include <gtest/gtest.h>

#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "test_support.h"
#include "tokenizer/tokenizer.h"
#include "core/utf8.h"

namespace gemmaserve {
namespace {

using Ids = std::vector<int32_t>;

constexpr int32_t kEos = 1;
constexpr int32_t kToolResponse = 50;  // <|tool_response>: an eos id of the checkpoint, not special
constexpr int32_t kTurnEnd = 106;      // <turn|>
const std::set<int32_t> kGemma4Stops = {kEos, kToolResponse, kTurnEnd};

struct Outcome {
  std::vector<std::string> deltas;
  std::string text;  // the deltas joined
  StopUpdate last;
  int consumed = 0;   // tokens appended until finished (or all of them)
  std::string shown;  // checker.text() at the end
};

Outcome run(const Tokenizer* t, const SamplingParams& p, const Ids& ids,
            const std::set<int32_t>& stops = kGemma4Stops, int prompt_len = 0, int max_total = 0) {
  StopChecker checker(p, stops, t, prompt_len, max_total);
  Outcome r;
  for (int32_t id : ids) {
    r.last = checker.append(id);
    ++r.consumed;
    EXPECT_TRUE(utf8::is_valid(r.last.text_delta)) << "half a character after token " << id;
    r.deltas.push_back(r.last.text_delta);
    r.text += r.last.text_delta;
    EXPECT_EQ(checker.text(), r.text);
    if (r.last.finished) break;
  }
  EXPECT_EQ(checker.num_generated(), r.consumed);
  r.shown = checker.text();
  return r;
}

class StopCheckerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GS_REQUIRE_SHARED(shared);
    if (!cached()) {
      cached().emplace(
          Tokenizer::from_path(shared / "data/gemma4-tokenizer/ggml-vocab-gemma-4.gguf"));
    }
  }
  // Loaded once for the suite: the 262k-entry vocabulary takes a while to parse.
  static std::optional<Tokenizer>& cached() {
    static std::optional<Tokenizer> tokenizer;
    return tokenizer;
  }
  const Tokenizer& tok() const { return *cached(); }
  Ids encode(const std::string& s) const { return tok().encode(s, false, true); }
  Outcome run(const SamplingParams& p, const Ids& ids,
              const std::set<int32_t>& stops = kGemma4Stops, int prompt_len = 0,
              int max_total = 0) const {
    return gemmaserve::run(&tok(), p, ids, stops, prompt_len, max_total);
  }
  static SamplingParams params(std::vector<std::string> stop = {}, bool include = false) {
    SamplingParams p;
    p.max_tokens = 1000;
    p.stop = std::move(stop);
    p.include_stop_str_in_output = include;
    return p;
  }
};

TEST_F(StopCheckerTest, StopStringSpanningTwoTokens) {
  const Ids ids = encode("Hello ENDworld and more");
  ASSERT_EQ(tok().decode(Ids(ids.begin(), ids.begin() + 3), false), "Hello ENDworld");
  const Outcome r = run(params({"Dwo"}), ids);
  EXPECT_EQ(r.consumed, 3);  // "Hello", " END", "world": the stop completes in the third
  EXPECT_TRUE(r.last.finished);
  EXPECT_EQ(r.last.finish_reason, "stop");
  EXPECT_EQ(r.last.stop_reason_text, "Dwo");
  EXPECT_FALSE(r.last.stop_reason_token);
  EXPECT_EQ(r.text, "Hello EN");
  // vLLM holds back len("Dwo") - 1 = 2 characters while streaming.
  EXPECT_EQ(r.deltas, (std::vector<std::string>{"Hel", "lo E", "N"}));
}

TEST_F(StopCheckerTest, StopStringInsideOneToken) {
  const Ids ids = encode("The answer is 42.");
  const Outcome r = run(params({"nsw"}), ids);
  EXPECT_EQ(r.consumed, 2);  // "▁answer"
  EXPECT_EQ(r.last.finish_reason, "stop");
  EXPECT_EQ(r.last.stop_reason_text, "nsw");
  EXPECT_EQ(r.text, "The a");  // the rest of the token goes with the stop string
}

TEST_F(StopCheckerTest, IncludeStopStrInOutputKeepsItAndCutsWhatFollows) {
  const Outcome r = run(params({"Dwo"}, /*include=*/true), encode("Hello ENDworld and more"));
  EXPECT_EQ(r.consumed, 3);
  EXPECT_EQ(r.last.stop_reason_text, "Dwo");
  EXPECT_EQ(r.text, "Hello ENDwo");
  // Nothing is held back when the stop string is shown anyway (vLLM).
  EXPECT_EQ(r.deltas, (std::vector<std::string>{"Hello", " END", "wo"}));
}

TEST_F(StopCheckerTest, EarliestEndingStopStringWinsThenListOrder) {
  const Ids ids = encode("abcdef");
  ASSERT_EQ(ids.size(), 1u);
  EXPECT_EQ(run(params({"cdef", "bc"}), ids).last.stop_reason_text, "bc");
  EXPECT_EQ(run(params({"bcd", "abcd"}), ids).last.stop_reason_text, "bcd");
  EXPECT_EQ(run(params({"abcd", "bcd"}), ids).last.stop_reason_text, "abcd");
  EXPECT_EQ(run(params({"abcd", "bcd"}), ids).text, "");
}

TEST_F(StopCheckerTest, DeltasNeverLeakTextThatAStopStringLaterRemoves) {
  // Every substring of the text as a stop string: the streamed pieces are always a prefix of
  // the final text, which ends right before the first occurrence.
  const std::string text = "One two, three\u20AC four \U0001F600 five\U000F0000 six seven.";
  const Ids ids = encode(text);
  const std::string full = tok().decode(ids, true);
  ASSERT_EQ(full, text);
  int checked = 0;
  for (size_t len = 1; len <= 7; ++len) {
    for (size_t at = 0; at + len <= full.size(); ++at) {
      const std::string stop = full.substr(at, len);
      if (!utf8::is_valid(stop)) continue;
      for (bool include : {false, true}) {
        const Outcome r = run(params({stop, "never appears"}, include), ids);
        const size_t first = full.find(stop);
        const std::string expected = full.substr(0, first + (include ? stop.size() : 0));
        ASSERT_EQ(r.text, expected) << "stop '" << stop << "' include " << include;
        ASSERT_EQ(r.last.stop_reason_text, stop);
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 300);
}

TEST_F(StopCheckerTest, TurnEndIsAStopIdWithoutText) {
  Ids ids = encode("Hello world");
  ids.push_back(kTurnEnd);
  for (int32_t id : encode(" after")) ids.push_back(id);
  for (bool skip : {true, false}) {
    SamplingParams p = params();
    p.skip_special_tokens = skip;
    const Outcome r = run(p, ids);
    EXPECT_EQ(r.consumed, 3);
    EXPECT_EQ(r.last.finish_reason, "stop");
    EXPECT_EQ(r.last.stop_reason_token, kTurnEnd);
    EXPECT_FALSE(r.last.stop_reason_text);
    EXPECT_EQ(r.text, "Hello world");
  }
  // <|tool_response> is not a special token, yet as a stop id it is not shown either.
  ids[2] = kToolResponse;
  const Outcome tool = run(params(), ids);
  EXPECT_EQ(tool.last.stop_reason_token, kToolResponse);
  EXPECT_EQ(tool.text, "Hello world");
  // include_stop_str_in_output shows the stop token as its text would be (vLLM).
  SamplingParams shown = params({}, /*include=*/true);
  EXPECT_EQ(run(shown, ids).text, "Hello world<|tool_response>");
  ids[2] = kTurnEnd;
  EXPECT_EQ(run(shown, ids).text, "Hello world");  // special, skipped
  shown.skip_special_tokens = false;
  EXPECT_EQ(run(shown, ids).text, "Hello world<turn|>");
}

TEST_F(StopCheckerTest, TheTokenizersEosLeavesStopReasonUnset) {
  Ids ids = encode("Hi");
  ids.push_back(kEos);
  const Outcome r = run(params(), ids);
  EXPECT_EQ(r.last.finish_reason, "stop");
  EXPECT_FALSE(r.last.stop_reason_token);  // vLLM: stop_reason None for the eos token
  EXPECT_EQ(r.text, "Hi");
  // With ignore_eos the caller leaves eos out of the set; it is then ordinary (special) text.
  SamplingParams p = params();
  p.ignore_eos = true;
  p.max_tokens = 3;
  ids.push_back(encode(" there")[0]);
  const Outcome ignored = run(p, ids, {kTurnEnd});
  EXPECT_EQ(ignored.consumed, 3);
  EXPECT_EQ(ignored.last.finish_reason, "length");
  EXPECT_EQ(ignored.text, "Hi there");
  p.skip_special_tokens = false;
  EXPECT_EQ(run(p, ids, {kTurnEnd}).text, "Hi<eos> there");
  // A stop_token_ids entry equal to eos under ignore_eos does name the id.
  p.stop_token_ids = {kEos};
  EXPECT_EQ(run(p, ids, {kEos}).last.stop_reason_token, kEos);
}

TEST_F(StopCheckerTest, MinTokensHoldsOffStopIdsAndStopStrings) {
  const Ids hello = encode("Hello");
  const Ids world = encode(" world");
  SamplingParams p = params();
  p.min_tokens = 3;
  const Ids ids = {hello[0], kEos, world[0], kTurnEnd, world[0]};
  const Outcome r = run(p, ids);
  EXPECT_EQ(r.consumed, 4);  // the eos at 2 < min_tokens is generated and passed over
  EXPECT_EQ(r.last.stop_reason_token, kTurnEnd);
  EXPECT_EQ(r.text, "Hello world");

  // Stop strings: text of the first min_tokens tokens is not searched (vLLM #22014).
  const Ids words = encode("Hello world Hello again");
  ASSERT_EQ(words.size(), 4u);
  SamplingParams s = params({"Hello"});
  s.min_tokens = 1;
  const Outcome late = run(s, words);
  EXPECT_EQ(late.consumed, 3);
  EXPECT_EQ(late.text, "Hello world ");
  s.min_tokens = 0;
  EXPECT_EQ(run(s, words).text, "");
  // A match may still start in gated text when it ends in new text.
  SamplingParams across = params({"lo w"});
  across.min_tokens = 1;
  const Outcome a = run(across, words);
  EXPECT_EQ(a.consumed, 2);
  EXPECT_EQ(a.text, "Hel");
}

TEST_F(StopCheckerTest, MaxTokensEndsWithLength) {
  const Ids ids = encode("one two three four five");
  SamplingParams p = params();
  p.max_tokens = 3;
  const Outcome r = run(p, ids);
  EXPECT_EQ(r.consumed, 3);
  EXPECT_EQ(r.last.finish_reason, "length");
  EXPECT_FALSE(r.last.stop_reason_token);
  EXPECT_EQ(r.text, "one two three");
  // A stop id as the last allowed token is a stop (vLLM checks stops before the length).
  const Outcome stop = run(p, Ids{ids[0], ids[1], kTurnEnd});
  EXPECT_EQ(stop.last.finish_reason, "stop");
  // So is a stop string completed by that token.
  p.stop = {"three"};
  const Outcome str = run(p, ids);
  EXPECT_EQ(str.last.finish_reason, "stop");
  EXPECT_EQ(str.last.stop_reason_text, "three");
  EXPECT_EQ(str.text, "one two ");
  // Held-back text is released when the sequence ends by length.
  p.stop = {"three and more"};
  EXPECT_EQ(run(p, ids).text, "one two three");
}

TEST_F(StopCheckerTest, ModelLengthLimitEndsWithLengthEvenUnderMinTokens) {
  const Ids ids = encode("one two three four five");
  SamplingParams p = params();
  const Outcome r = run(p, ids, kGemma4Stops, /*prompt_len=*/10, /*max_total=*/12);
  EXPECT_EQ(r.consumed, 2);
  EXPECT_EQ(r.last.finish_reason, "length");
  EXPECT_EQ(r.text, "one two");
  p.min_tokens = 4;
  EXPECT_EQ(run(p, ids, kGemma4Stops, 10, 12).consumed, 2);
}

TEST_F(StopCheckerTest, ByteFallbackCharactersNeverComeOutHalfway) {
  const std::string text = "a\U000F0000b\U000F0001\U000F0002 c";
  const Ids ids = encode(text);
  ASSERT_GT(ids.size(), 8u);  // each plane-15 character is four <0xNN> tokens
  const Outcome r = run(params(), ids);
  EXPECT_EQ(r.text, text);
  for (const std::string& d : r.deltas) EXPECT_TRUE(d.empty() || utf8::is_valid(d));
  EXPECT_EQ(r.deltas[4], "");  // the run's last byte: still waiting for the run to end
  EXPECT_EQ(r.deltas[5], "\U000F0000b");

  // A stop string equal to the byte-fallback character.
  const Outcome stop = run(params({"\U000F0001"}), ids);
  EXPECT_EQ(stop.text, "a\U000F0000b");
  // max_tokens in the middle of a run renders the unfinished bytes as decode() does.
  SamplingParams p = params();
  p.max_tokens = 3;
  const Outcome cut = run(p, ids);
  EXPECT_EQ(cut.text, tok().decode(Ids(ids.begin(), ids.begin() + 3), true));
  EXPECT_TRUE(utf8::is_valid(cut.text));
}

TEST_F(StopCheckerTest, AppendAfterTheEndIsAnError) {
  SamplingParams p = params();
  p.max_tokens = 1;
  StopChecker c(p, kGemma4Stops, &tok(), 0, 0);
  EXPECT_TRUE(c.append(encode("Hi")[0]).finished);
  EXPECT_THROW(c.append(encode("Hi")[0]), std::logic_error);
}

TEST(StopCheckerNoTokenizerTest, TokenIdsOnlyStillStop) {
  SamplingParams p;
  p.max_tokens = 5;
  p.stop = {"ignored without text"};
  const Outcome r = run(nullptr, p, {7, 8, 9, 4, 9, 9}, {4});
  EXPECT_EQ(r.consumed, 4);
  EXPECT_EQ(r.last.finish_reason, "stop");
  EXPECT_EQ(r.last.stop_reason_token, 4);
  EXPECT_EQ(r.text, "");
  const Outcome len = run(nullptr, p, {7, 8, 9, 9, 9, 9}, {4});
  EXPECT_EQ(len.consumed, 5);
  EXPECT_EQ(len.last.finish_reason, "length");
}

}  // namespace
}  // namespace gemmaserve
