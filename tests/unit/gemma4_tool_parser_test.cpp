// Gemma 4 tool-call parser: whole-output extraction, streaming deltas, malformed output.
#include "server/shared/gemma4_tool_parser.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "server/shared/special_token_text.h"

namespace gemmaserve {
namespace {

const std::string Q = "<|\"|>";
const std::string START = "<|tool_call>";
const std::string END = "<tool_call|>";

ToolCallIdGenerator counter_ids() {
  auto n = std::make_shared<int>(0);
  return [n] { return "call-" + std::to_string((*n)++); };
}

ToolParseResult extract(const std::string& text) {
  return extract_gemma4_tool_calls(text, counter_ids());
}

bool has_marker(std::string_view s) { return find_marker(s).pos != std::string_view::npos; }

// What a client reassembles from the stream, checking the delta protocol on the way.
struct Reassembled {
  std::string content;
  std::vector<ToolCall> calls;
};

// True when every '<' in `text` starts a complete marker: then no output piece may hold a '<',
// since any would be part of a marker (whole or still arriving).
bool only_markers_use_angle_brackets(std::string_view text) {
  for (size_t pos = text.find('<'); pos != std::string_view::npos; pos = text.find('<', pos + 1)) {
    if (marker_at(text, pos).empty()) return false;
  }
  return true;
}

void absorb(const ToolParserDelta& d, Reassembled& r, bool forbid_angle) {
  ASSERT_FALSE(has_marker(d.content)) << d.content;
  if (forbid_angle) {
    ASSERT_EQ(d.content.find('<'), std::string::npos) << "partial marker in content: " << d.content;
    for (const ToolCallDelta& tc : d.tool_calls) {
      ASSERT_EQ(tc.arguments.find('<'), std::string::npos) << "partial marker: " << tc.arguments;
    }
  }
  r.content += d.content;
  for (const ToolCallDelta& tc : d.tool_calls) {
    if (tc.id) {
      ASSERT_EQ(tc.index, static_cast<int>(r.calls.size())) << "new call out of order";
      ASSERT_TRUE(tc.name.has_value());
      r.calls.push_back(ToolCall{*tc.id, *tc.name, "", false});
    } else {
      ASSERT_FALSE(tc.name.has_value());
      ASSERT_GE(tc.index, 0);
      ASSERT_LT(tc.index, static_cast<int>(r.calls.size()));
      ASSERT_FALSE(tc.arguments.empty()) << "empty argument fragment";
    }
    r.calls[static_cast<size_t>(tc.index)].arguments += tc.arguments;
  }
}

Reassembled stream_pieces(const std::vector<std::string>& pieces, bool forbid_angle) {
  Gemma4ToolCallStream stream(counter_ids());
  Reassembled r;
  for (const std::string& p : pieces) absorb(stream.feed(p), r, forbid_angle);
  absorb(stream.finish(), r, forbid_angle);
  for (size_t i = 0; i < r.calls.size(); ++i) r.calls[i].complete = stream.tool_calls()[i].complete;
  return r;
}

// Streamed in every two-piece split, byte by byte and in random chunks, the reassembled output
// equals the whole-output result.
void expect_streaming_matches(const std::string& text) {
  ToolParseResult whole = extract(text);
  std::string expected_content = whole.content.value_or("");
  const bool forbid_angle = only_markers_use_angle_brackets(text);
  auto check = [&](const std::vector<std::string>& pieces, const std::string& how) {
    Reassembled r = stream_pieces(pieces, forbid_angle);
    ASSERT_EQ(r.content, expected_content) << how << "\ninput: " << text;
    ASSERT_EQ(r.calls.size(), whole.tool_calls.size()) << how << "\ninput: " << text;
    for (size_t i = 0; i < r.calls.size(); ++i) {
      ASSERT_EQ(r.calls[i].id, whole.tool_calls[i].id) << how;
      ASSERT_EQ(r.calls[i].name, whole.tool_calls[i].name) << how;
      ASSERT_EQ(r.calls[i].arguments, whole.tool_calls[i].arguments) << how << "\ninput: " << text;
      ASSERT_EQ(r.calls[i].complete, whole.tool_calls[i].complete) << how;
    }
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
      size_t n = std::uniform_int_distribution<size_t>(0, 12)(rng);  // empty deltas too
      pieces.push_back(text.substr(i, n));
      i += n;
    }
    check(pieces, "random chunks, trial " + std::to_string(trial));
  }
}

TEST(Gemma4ToolParser, NoCallIsAllContent) {
  ToolParseResult r = extract("Hello there.\n");
  ASSERT_TRUE(r.content.has_value());
  EXPECT_EQ(*r.content, "Hello there.\n");
  EXPECT_TRUE(r.tool_calls.empty());
  EXPECT_EQ(extract("").content, "");
}

TEST(Gemma4ToolParser, SingleCall) {
  ToolParseResult r = extract(START + "call:get_weather{location:" + Q + "Tokyo" + Q + "}" + END);
  EXPECT_FALSE(r.content.has_value());
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].id, "call-0");
  EXPECT_EQ(r.tool_calls[0].name, "get_weather");
  EXPECT_EQ(r.tool_calls[0].arguments, R"({"location": "Tokyo"})");
  EXPECT_TRUE(r.tool_calls[0].complete);
}

TEST(Gemma4ToolParser, SeveralCallsAndTheStopToken) {
  ToolParseResult r = extract(START + "call:a{x:1}" + END + START + "call:b{y:" + Q + "z" + Q +
                              "}" + END + "<|tool_response>");
  EXPECT_FALSE(r.content.has_value());
  ASSERT_EQ(r.tool_calls.size(), 2u);
  EXPECT_EQ(r.tool_calls[0].name, "a");
  EXPECT_EQ(r.tool_calls[0].arguments, R"({"x": 1})");
  EXPECT_EQ(r.tool_calls[1].id, "call-1");
  EXPECT_EQ(r.tool_calls[1].arguments, R"({"y": "z"})");
}

TEST(Gemma4ToolParser, ContentAroundCalls) {
  // Whitespace touching a call is dropped; text before, between and after calls is content.
  ToolParseResult r = extract("Let me check.\n\n" + START + "call:f{}" + END + "\n" + START +
                              "call:g{}" + END + "\nDone.  ");
  ASSERT_TRUE(r.content.has_value());
  EXPECT_EQ(*r.content, "Let me check.Done.");
  ASSERT_EQ(r.tool_calls.size(), 2u);
  EXPECT_EQ(r.tool_calls[0].arguments, "{}");
  // Leading whitespace before text is kept (vLLM strips it; streaming cannot know a call follows).
  EXPECT_EQ(*extract("  Hi " + START + "call:f{}" + END).content, "  Hi");
  EXPECT_FALSE(extract(" \n" + START + "call:f{}" + END + " \n").content.has_value());
}

TEST(Gemma4ToolParser, TextAfterToolResponseIsDropped) {
  ToolParseResult r =
      extract(START + "call:f{a:1}" + END + "<|tool_response>response:f{value:" + Q +
              "hallucinated" + Q + "}<tool_response|>More text");
  EXPECT_FALSE(r.content.has_value());
  ASSERT_EQ(r.tool_calls.size(), 1u);
  // Without a call it is only stripped.
  EXPECT_EQ(*extract("a<|tool_response>b").content, "ab");
}

TEST(Gemma4ToolParser, NamesAndHeaderVariants) {
  EXPECT_EQ(extract(START + "call:module.get-data_v2{}" + END).tool_calls.at(0).name,
            "module.get-data_v2");
  EXPECT_EQ(extract(START + " call: spaced {}" + END).tool_calls.at(0).name, "spaced");
  // vLLM #53431: the opener without "call".
  EXPECT_EQ(extract(START + ":bare{a:1}" + END).tool_calls.at(0).name, "bare");
  EXPECT_EQ(extract(START + "noprefix{a:1}" + END).tool_calls.at(0).arguments, R"({"a": 1})");
  EXPECT_EQ(extract(START + "callback{}" + END).tool_calls.at(0).name, "callback");
  // No braces at all: a call without arguments.
  ToolParseResult r = extract(START + "call:ping" + END);
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].name, "ping");
  EXPECT_EQ(r.tool_calls[0].arguments, "{}");
  EXPECT_EQ(extract(START + "call:caf\xC3\xA9{}" + END).tool_calls.at(0).name, "caf\xC3\xA9");
}

TEST(Gemma4ToolParser, MalformedHeadersBecomeContent) {
  ToolParseResult r = extract("Sure. " + START + "call:get weather{a:1}" + END + " ok");
  EXPECT_TRUE(r.tool_calls.empty());
  EXPECT_EQ(*r.content, "Sure. call:get weather{a:1} ok");
  // Positional arguments (seen from some Gemma builds) cannot be named: content.
  r = extract(START + "call:nav(" + Q + "Route" + Q + ")" + END);
  EXPECT_TRUE(r.tool_calls.empty());
  EXPECT_EQ(*r.content, "call:nav(Route)");
  r = extract(START + END + "x");
  EXPECT_TRUE(r.tool_calls.empty());
  EXPECT_EQ(*r.content, "x");
  // A header that never ends stops being held back after 256 bytes.
  std::string longname(300, 'n');
  r = extract(START + "call:" + longname);
  EXPECT_TRUE(r.tool_calls.empty());
  EXPECT_EQ(*r.content, "call:" + longname);
  // A good call after a bad one is still a call.
  r = extract(START + "call:bad name{}" + END + START + "call:good{}" + END);
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].name, "good");
  EXPECT_EQ(*r.content, "call:bad name{}");
}

TEST(Gemma4ToolParser, TruncatedOutput) {
  // Cut inside the arguments (max_tokens): the call is kept, closed, and marked incomplete.
  ToolParseResult r = extract("Hm. " + START + "call:search{q:" + Q + "weather in Par");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].arguments, R"({"q": "weather in Par"})");
  EXPECT_FALSE(r.tool_calls[0].complete);
  EXPECT_EQ(*r.content, "Hm.");
  // Cut inside the header: nothing is a call yet, the text is content.
  r = extract("Hm. " + START + "call:sea");
  EXPECT_TRUE(r.tool_calls.empty());
  EXPECT_EQ(*r.content, "Hm. call:sea");
  // A new call or the end of the turn before <tool_call|> ends the previous call.
  r = extract(START + "call:a{x:1}" + START + "call:b{y:2" + std::string("<turn|>"));
  ASSERT_EQ(r.tool_calls.size(), 2u);
  EXPECT_TRUE(r.tool_calls[0].complete);  // its braces were closed
  EXPECT_EQ(r.tool_calls[1].arguments, R"({"y": 2})");
  EXPECT_FALSE(r.tool_calls[1].complete);
}

TEST(Gemma4ToolParser, NoMarkerTextInContent) {
  ToolParseResult r =
      extract("<|turn>a<turn|>b<eos>c<|channel>d<channel|>e" + Q + "f<tool_call|>g");
  EXPECT_EQ(*r.content, "abcdefg");
}

TEST(Gemma4ToolParser, MarkersInsideArgumentsAreNotText) {
  ToolParseResult r = extract(START + "call:f{a:" + Q + "x<|channel>y" + Q + "}" + END);
  EXPECT_EQ(r.tool_calls.at(0).arguments, R"({"a": "xy"})");
}

TEST(Gemma4ToolParser, StreamingDeltaShape) {
  Gemma4ToolCallStream s(counter_ids());
  ToolParserDelta d = s.feed("Checking. ");
  EXPECT_EQ(d.content, "Checking.");  // the trailing space waits: a call may follow
  EXPECT_TRUE(s.feed(START).empty());
  EXPECT_TRUE(s.feed("call:get_").empty());
  d = s.feed("weather{");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].index, 0);
  EXPECT_EQ(d.tool_calls[0].id, "call-0");
  EXPECT_EQ(d.tool_calls[0].name, "get_weather");
  EXPECT_EQ(d.tool_calls[0].arguments, "");
  d = s.feed("city:" + Q + "Par");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_FALSE(d.tool_calls[0].id.has_value());
  EXPECT_EQ(d.tool_calls[0].arguments, R"({"city": "Par)");
  d = s.feed("is" + Q + ",days:1");
  EXPECT_EQ(d.tool_calls.at(0).arguments, R"(is", "days": )");  // 1 may still become 10
  d = s.feed("0}");
  EXPECT_EQ(d.tool_calls.at(0).arguments, "10}");
  d = s.feed(END);
  EXPECT_TRUE(d.empty());
  d = s.feed("<|tool_response>");
  EXPECT_TRUE(d.empty());
  EXPECT_TRUE(s.finish().empty());
  ASSERT_EQ(s.tool_calls().size(), 1u);
  EXPECT_EQ(s.tool_calls()[0].arguments, R"({"city": "Paris", "days": 10})");
}

TEST(Gemma4ToolParser, StreamingEqualsWholeAtEverySplit) {
  const std::vector<std::string> corpus = {
      "",
      "Plain text with <html> tags and a < b.",
      "caf\xC3\xA9 \xF0\x9F\x8E\x89 text",
      START + "call:get_weather{location:" + Q + "Tokyo" + Q + "}" + END,
      "Let me check.\n\n" + START + "call:f{a:[1,2.5,{b:" + Q + "c}" + Q + "}],d:null}" + END +
          "\n" + START + "call:g{}" + END + "<|tool_response>",
      START + "call:w{s:" + Q + "\xE4\xB8\xAD\xE6\x96\x87 <| |> \"q\" \\ \n" + Q + ",n:-1e-05}" +
          END + " After.",
      "x " + START + "call:bad name{}" + END + " y " + START + "call:ok{k:true}" + END,
      START + "call:trunc{q:" + Q + "part",
      START + "call:tr",
      "<|turn>a<turn|>b<eos>c" + Q + "d",
      START + "call:ping" + END + START + ":bare{a:1}" + END,
      START + " call: spaced {a:1}" + END + START + "\n callback {}" + END,
      START + "call:caf\xC3\xA9{}" + END + START + "call:a b{}" + END,
      "<|tool_cal not a marker <tool_call| either",
  };
  for (const std::string& text : corpus) expect_streaming_matches(text);
}

TEST(Gemma4ToolParser, RandomOutputNeverBreaksTheContract) {
  const std::vector<std::string> alphabet = {START,     END,     Q,      "<|tool_response>",
                                             "<turn|>", "call:", "f",    "get_x",
                                             "{",       "}",     "[",    "]",
                                             ":",       ",",     " ",    "\n",
                                             "1",       "2.5",   "true", "null",
                                             "text",    "<",     "|",    "\xC3\xA9",
                                             "\xE2\x82"};
  std::mt19937 rng(5);
  for (int trial = 0; trial < 300; ++trial) {
    std::string text;
    int n = std::uniform_int_distribution<int>(0, 25)(rng);
    for (int i = 0; i < n; ++i) {
      text += alphabet[std::uniform_int_distribution<size_t>(0, alphabet.size() - 1)(rng)];
    }
    ToolParseResult r = extract(text);
    if (r.content) {
      ASSERT_FALSE(has_marker(*r.content)) << text;
    }
    for (const ToolCall& call : r.tool_calls) {
      nlohmann::json parsed;
      ASSERT_NO_THROW(parsed = nlohmann::json::parse(call.arguments)) << text << "\n"
                                                                      << call.arguments;
      ASSERT_TRUE(parsed.is_object());
      ASSERT_FALSE(call.name.empty());
    }
    expect_streaming_matches(text);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(Gemma4ToolParser, RandomIdsLookLikeVllms) {
  ToolCallIdGenerator ids = random_tool_call_ids();
  std::string a = ids();
  EXPECT_TRUE(std::regex_match(a, std::regex("chatcmpl-tool-[0-9a-f]{32}"))) << a;
  EXPECT_NE(a, ids());
}

}  // namespace
}  // namespace gemmaserve

namespace gemmaserve {
namespace {

// Found by fuzz/tool_call_fuzz.cpp: a header over 256 bytes before its '{' was a call when the
// text came whole and content when it came in pieces.
TEST(Gemma4ToolParserLimits, LongHeaderIsContentWholeOrStreamed) {
  const std::string text = "<|tool_call>call:" + std::string(300, 'x') + "{a:1}<tool_call|>";
  const ToolParseResult whole = extract_gemma4_tool_calls(text);
  EXPECT_TRUE(whole.tool_calls.empty());
  Gemma4ToolCallStream stream;
  size_t calls = 0;
  for (char c : text) calls += stream.feed(std::string(1, c)).tool_calls.size();
  calls += stream.finish().tool_calls.size();
  EXPECT_EQ(calls, 0u);
  // A name of 250 bytes is still a call either way.
  const std::string ok = "<|tool_call>call:" + std::string(250, 'x') + "{a:1}<tool_call|>";
  EXPECT_EQ(extract_gemma4_tool_calls(ok).tool_calls.size(), 1u);
}

}  // namespace
}  // namespace gemmaserve
