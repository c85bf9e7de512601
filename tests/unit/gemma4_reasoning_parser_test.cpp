// Gemma 4 reasoning parser (thought channel) and the special-token text helpers.
#include "server/shared/gemma4_reasoning_parser.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "server/shared/special_token_text.h"

namespace gemmaserve {
namespace {

const std::string OPEN = "<|channel>";
const std::string CLOSE = "<channel|>";

bool has_marker(std::string_view s) { return find_marker(s).pos != std::string_view::npos; }

void expect_reasoning(const std::string& text, std::optional<std::string> reasoning,
                      const std::string& content, bool starts_in_channel = false) {
  ReasoningResult r = extract_gemma4_reasoning(text, starts_in_channel);
  EXPECT_EQ(r.reasoning, reasoning) << "input: " << text;
  EXPECT_EQ(r.content, content) << "input: " << text;
}

TEST(Gemma4Reasoning, NoChannelIsContent) {
  expect_reasoning("Just an answer.", std::nullopt, "Just an answer.");
  expect_reasoning("", std::nullopt, "");
  expect_reasoning("thoughtful words", std::nullopt, "thoughtful words");
  expect_reasoning("thought", std::nullopt, "thought");
}

TEST(Gemma4Reasoning, ThoughtChannel) {
  expect_reasoning(OPEN + "thought\nLet me think.\nStep 2.\n" + CLOSE + "The answer is 4.",
                   "Let me think.\nStep 2.", "The answer is 4.");
  // Whitespace right after the channel is not content.
  expect_reasoning(OPEN + "thought\nHmm" + CLOSE + "\n\nAnswer\n", "Hmm", "Answer\n");
  // No label: everything inside is reasoning.
  expect_reasoning(OPEN + "Hmm" + CLOSE + "A", "Hmm", "A");
}

TEST(Gemma4Reasoning, EmptyChannelWhenThinkingIsOff) {
  // The E2B/E4B template does not pre-fill the empty channel, so the model writes it.
  expect_reasoning(OPEN + "thought\n" + CLOSE + "Hello!", std::nullopt, "Hello!");
  expect_reasoning(OPEN + "thought" + CLOSE + "Hello!", std::nullopt, "Hello!");
  expect_reasoning(OPEN + CLOSE + "Hello!", std::nullopt, "Hello!");
}

TEST(Gemma4Reasoning, ChannelNeverClosed) {
  // Truncated by max_tokens: all of it is reasoning (vLLM).
  expect_reasoning(OPEN + "thought\nStill thinking about", "Still thinking about", "");
  expect_reasoning(OPEN + "thou", std::nullopt, "");
}

TEST(Gemma4Reasoning, SpuriousLabelWithoutChannel) {
  // The label without <|channel> (vLLM strips it; the prompt may have opened the channel).
  expect_reasoning("thought\nPlan." + CLOSE + "Done.", "Plan.", "Done.");
  expect_reasoning("thought" + CLOSE + "Done.", std::nullopt, "Done.");
  expect_reasoning(CLOSE + "Done.", std::nullopt, "Done.");
}

TEST(Gemma4Reasoning, PromptEndsInOpenChannel) {
  expect_reasoning("More thinking" + CLOSE + "Answer", "More thinking", "Answer", true);
  expect_reasoning("thought\nX" + CLOSE + "Y", "X", "Y", true);
  EXPECT_TRUE(prompt_ends_in_open_thought_channel("<|turn>model\n<|channel>thought\n"));
  EXPECT_FALSE(prompt_ends_in_open_thought_channel("<|turn>model\n<|channel>thought\n<channel|>"));
  EXPECT_FALSE(prompt_ends_in_open_thought_channel("<|channel>x<channel|><|turn>model\n"));
  EXPECT_FALSE(prompt_ends_in_open_thought_channel("<|turn>user\nhi<turn|>\n<|turn>model\n"));
}

TEST(Gemma4Reasoning, ToolCallEndsTheChannel) {
  expect_reasoning(OPEN + "thought\nNeed weather.\n<|tool_call>call:f{}<tool_call|>",
                   "Need weather.", "<|tool_call>call:f{}<tool_call|>");
  expect_reasoning(OPEN + "thought\nNeed weather.\n" + CLOSE + "<|tool_call>call:f{}<tool_call|>",
                   "Need weather.", "<|tool_call>call:f{}<tool_call|>");
}

TEST(Gemma4Reasoning, MarkersInsideAndOutside) {
  // Several blocks concatenate; a repeated <|channel> inside is swallowed; a stray close is
  // dropped; other markers stay in content for the next parser but never enter reasoning.
  expect_reasoning(OPEN + "thought\nA" + CLOSE + "x" + OPEN + "thought\nB" + CLOSE + "y", "AB",
                   "xy");
  expect_reasoning(OPEN + "thought\nA" + OPEN + "B<turn|>" + CLOSE + "z" + CLOSE + "w", "AB", "zw");
  expect_reasoning("Answer<turn|>", std::nullopt, "Answer<turn|>");
  expect_reasoning("<|\"|>x", std::nullopt, "<|\"|>x");
}

// Streams `text` in every two-piece split, byte by byte and in random chunks.
// True when every '<' in `text` starts a complete marker.
bool only_markers_use_angle_brackets(std::string_view text) {
  for (size_t pos = text.find('<'); pos != std::string_view::npos; pos = text.find('<', pos + 1)) {
    if (marker_at(text, pos).empty()) return false;
  }
  return true;
}

void expect_streaming_matches(const std::string& text, bool starts_in_channel = false) {
  ReasoningResult whole = extract_gemma4_reasoning(text, starts_in_channel);
  const bool forbid_angle = only_markers_use_angle_brackets(text);
  auto check = [&](const std::vector<std::string>& pieces, const std::string& how) {
    Gemma4ReasoningStream s(starts_in_channel);
    std::string reasoning;
    std::string content;
    auto absorb = [&](const ReasoningDelta& d) {
      ASSERT_FALSE(has_marker(d.reasoning)) << how << ": " << d.reasoning;
      ASSERT_EQ(d.content.find(OPEN), std::string::npos) << how;
      ASSERT_EQ(d.content.find(CLOSE), std::string::npos) << how;
      if (forbid_angle) {  // then any '<' would be part of a marker: whole ones only in content
        ASSERT_EQ(d.reasoning.find('<'), std::string::npos) << how << ": " << d.reasoning;
        ASSERT_EQ(strip_special_token_text(d.content).find('<'), std::string::npos)
            << how << ": " << d.content;
      }
      reasoning += d.reasoning;
      content += d.content;
    };
    for (const std::string& p : pieces) absorb(s.feed(p));
    absorb(s.finish());
    ASSERT_EQ(reasoning, whole.reasoning.value_or("")) << how << "\ninput: " << text;
    ASSERT_EQ(content, whole.content) << how << "\ninput: " << text;
  };
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    check({text.substr(0, cut), text.substr(cut)}, "split at " + std::to_string(cut));
  }
  std::vector<std::string> bytes;
  for (char c : text) bytes.emplace_back(1, c);
  check(bytes, "byte by byte");
  std::mt19937 rng(static_cast<unsigned>(text.size()));
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<std::string> pieces;
    for (size_t i = 0; i < text.size();) {
      size_t n = std::uniform_int_distribution<size_t>(0, 10)(rng);
      pieces.push_back(text.substr(i, n));
      i += n;
    }
    check(pieces, "random chunks " + std::to_string(trial));
  }
}

TEST(Gemma4Reasoning, StreamingEqualsWholeAtEverySplit) {
  const std::vector<std::string> corpus = {
      "Just text, caf\xC3\xA9 \xF0\x9F\x8E\x89.",
      OPEN + "thought\nStep one.\n\nStep two.  \n" + CLOSE + "\n\nAnswer: 42<turn|>",
      OPEN + "thought\n" + CLOSE + "Hello",
      OPEN + "thought" + CLOSE + "Hello",
      OPEN + "thoughts differ" + CLOSE + "Hello",
      "thought\nspurious" + CLOSE + "tail",
      "thought",
      "though",
      OPEN + "thought\nCall it.\n<|tool_call>call:f{a:<|\"|>x<|\"|>}<tool_call|><|tool_response>",
      OPEN + "thought\nunclosed <|chan not a marker",
      "a <channel| b <|channel c",
  };
  for (const std::string& text : corpus) {
    expect_streaming_matches(text);
    expect_streaming_matches(text, true);
  }
}

TEST(Gemma4Reasoning, StreamingHoldsTheLabelAndPartialMarkers) {
  Gemma4ReasoningStream s;
  EXPECT_TRUE(s.feed("<|chan").empty());
  EXPECT_TRUE(s.feed("nel>").empty());
  EXPECT_TRUE(s.in_reasoning());
  EXPECT_TRUE(s.feed("thou").empty());
  EXPECT_TRUE(s.feed("ght\n").empty());
  EXPECT_EQ(s.feed("Idea").reasoning, "Idea");
  EXPECT_TRUE(s.feed(" \n").empty());  // trailing whitespace waits
  EXPECT_EQ(s.feed("more").reasoning, " \nmore");
  EXPECT_TRUE(s.feed("\n<chan").empty());
  ReasoningDelta d = s.feed("nel|>Answer");
  EXPECT_EQ(d.reasoning, "");
  EXPECT_EQ(d.content, "Answer");
  EXPECT_FALSE(s.in_reasoning());
  EXPECT_TRUE(s.saw_thought_channel());
  EXPECT_TRUE(s.finish().empty());
}

TEST(Gemma4Reasoning, RandomOutputNeverBreaksTheContract) {
  const std::vector<std::string> alphabet = {OPEN,   CLOSE,  "thought", "\n",           " ",
                                             "x",    "<",    "|",       "<|tool_call>", "<turn|>",
                                             "\xC3", "\xA9", "t"};
  std::mt19937 rng(3);
  for (int trial = 0; trial < 300; ++trial) {
    std::string text;
    int n = std::uniform_int_distribution<int>(0, 14)(rng);
    for (int i = 0; i < n; ++i) {
      text += alphabet[std::uniform_int_distribution<size_t>(0, alphabet.size() - 1)(rng)];
    }
    expect_streaming_matches(text, trial % 2 == 1);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(Gemma4EnableThinking, MapsReasoningEffortLikeVllm) {
  EXPECT_EQ(gemma4_enable_thinking(std::nullopt, std::nullopt), std::nullopt);
  EXPECT_EQ(gemma4_enable_thinking("high", std::nullopt), true);
  EXPECT_EQ(gemma4_enable_thinking("low", std::nullopt), true);
  EXPECT_EQ(gemma4_enable_thinking("none", std::nullopt), false);
  EXPECT_EQ(gemma4_enable_thinking("high", false), false);  // explicit kwargs win
  EXPECT_EQ(gemma4_enable_thinking(std::nullopt, true), true);
  EXPECT_THROW(gemma4_enable_thinking("extreme", std::nullopt), InputError);
}

TEST(SpecialTokenText, MarkerListIsPrefixFree) {
  auto markers = gemma4_marker_texts();
  EXPECT_EQ(markers.size(), 22u);
  for (std::string_view a : markers) {
    EXPECT_EQ(a.front(), '<');
    for (std::string_view b : markers) {
      if (a != b) {
        EXPECT_FALSE(b.starts_with(a)) << a << " is a prefix of " << b;
      }
    }
  }
}

TEST(SpecialTokenText, StripAndPartialSuffixes) {
  EXPECT_EQ(strip_special_token_text("a<turn|>b<eos><|tool_response>c<unk><mask>"),
            "abc<unk><mask>");
  EXPECT_EQ(strip_special_token_text("<|image|><|image><image|>x<|video|>"), "x");
  EXPECT_EQ(partial_marker_suffix("abc<|tool_ca"), 9u);
  EXPECT_EQ(partial_marker_suffix("abc<"), 1u);
  EXPECT_EQ(partial_marker_suffix("abc<turn|>"), 0u);
  EXPECT_EQ(partial_marker_suffix("a < b"), 0u);
  EXPECT_EQ(incomplete_utf8_suffix("a\xE2\x82"), 2u);
  EXPECT_EQ(incomplete_utf8_suffix("a\xE2\x82\xAC"), 0u);
  EXPECT_EQ(incomplete_utf8_suffix("a\xF0"), 1u);
  EXPECT_EQ(incomplete_utf8_suffix("a\xE0\x80"), 0u);  // cannot become valid: not held
  EXPECT_EQ(incomplete_utf8_suffix("a\xFF"), 0u);
  EXPECT_EQ(find_marker("x<|\"|>y").marker, "<|\"|>");
}

TEST(SpecialTokenText, FilterStreamsLikeStrip) {
  const std::string text = "Hi<turn|> <|tool_response>there <tur not <eos>\xE2\x82\xAC end <|";
  const std::string expected = strip_special_token_text(text);
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    SpecialTokenTextFilter f;
    std::string out = f.feed(text.substr(0, cut));
    out += f.feed(text.substr(cut));
    out += f.finish();
    ASSERT_EQ(out, expected) << cut;
  }
  SpecialTokenTextFilter f;
  std::string out;
  for (char c : text) {
    std::string piece = f.feed(std::string(1, c));
    ASSERT_EQ(incomplete_utf8_suffix(piece), 0u);  // never ends mid-character
    out += piece;
  }
  out += f.finish();
  EXPECT_EQ(out, expected);
}

}  // namespace
}  // namespace gemmaserve
