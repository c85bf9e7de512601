// The Gemma 4 output pipeline the server runs (reasoning parser, then tool parser): round trip
// of the chat template's own tool-call rendering, thinking followed by calls, and streaming.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "server/shared/gemma4_reasoning_parser.h"
#include "server/shared/gemma4_tool_parser.h"
#include "server/shared/special_token_text.h"
#include "test_support.h"

namespace gemmaserve {
namespace {

ToolCallIdGenerator counter_ids() {
  auto n = std::make_shared<int>(0);
  return [n] { return "call-" + std::to_string((*n)++); };
}

struct ChatOutput {
  std::optional<std::string> reasoning;
  std::optional<std::string> content;
  std::vector<ToolCall> calls;
};

ChatOutput parse_whole(const std::string& text) {
  ReasoningResult r = extract_gemma4_reasoning(text);
  ToolParseResult t = extract_gemma4_tool_calls(r.content, counter_ids());
  return {r.reasoning, t.content, t.tool_calls};
}

// The streaming pipeline, reassembled the way a client does it from the deltas.
ChatOutput parse_streamed(const std::vector<std::string>& pieces) {
  Gemma4ReasoningStream reasoning_stream;
  Gemma4ToolCallStream tool_stream(counter_ids());
  std::string reasoning;
  std::string content;
  std::vector<ToolCall> calls;
  auto take_tools = [&](const ToolParserDelta& d) {
    EXPECT_EQ(find_marker(d.content).pos, std::string_view::npos) << d.content;
    content += d.content;
    for (const ToolCallDelta& tc : d.tool_calls) {
      if (tc.id) calls.push_back(ToolCall{*tc.id, *tc.name, "", false});
      calls.at(static_cast<size_t>(tc.index)).arguments += tc.arguments;
    }
  };
  auto take = [&](const ReasoningDelta& d) {
    EXPECT_EQ(find_marker(d.reasoning).pos, std::string_view::npos) << d.reasoning;
    reasoning += d.reasoning;
    take_tools(tool_stream.feed(d.content));
  };
  for (const std::string& p : pieces) take(reasoning_stream.feed(p));
  take(reasoning_stream.finish());
  take_tools(tool_stream.finish());
  for (size_t i = 0; i < calls.size(); ++i)
    calls[i].complete = tool_stream.tool_calls()[i].complete;
  ChatOutput out;
  if (!reasoning.empty()) out.reasoning = reasoning;
  if (calls.empty() || !content.empty()) out.content = content;
  out.calls = calls;
  return out;
}

void expect_same(const ChatOutput& a, const ChatOutput& b, const std::string& how) {
  EXPECT_EQ(a.reasoning, b.reasoning) << how;
  EXPECT_EQ(a.content, b.content) << how;
  ASSERT_EQ(a.calls.size(), b.calls.size()) << how;
  for (size_t i = 0; i < a.calls.size(); ++i) {
    EXPECT_EQ(a.calls[i].id, b.calls[i].id) << how;
    EXPECT_EQ(a.calls[i].name, b.calls[i].name) << how;
    EXPECT_EQ(a.calls[i].arguments, b.calls[i].arguments) << how;
    EXPECT_EQ(a.calls[i].complete, b.calls[i].complete) << how;
  }
}

void expect_streaming_matches(const std::string& text) {
  ChatOutput whole = parse_whole(text);
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    expect_same(parse_streamed({text.substr(0, cut), text.substr(cut)}), whole,
                "split at " + std::to_string(cut) + " of: " + text);
    if (::testing::Test::HasFailure()) return;
  }
  std::vector<std::string> bytes;
  for (char c : text) bytes.emplace_back(1, c);
  expect_same(parse_streamed(bytes), whole, "byte by byte: " + text);
  std::mt19937 rng(static_cast<unsigned>(text.size()));
  for (int trial = 0; trial < 10; ++trial) {
    std::vector<std::string> pieces;
    for (size_t i = 0; i < text.size();) {
      size_t n = std::uniform_int_distribution<size_t>(1, 16)(rng);
      pieces.push_back(text.substr(i, n));
      i += n;
    }
    expect_same(parse_streamed(pieces), whole, "random chunks: " + text);
  }
}

nlohmann::json load_rendered_cases() {
  std::ifstream in(testing::source_dir() / "tests/data/parsers/rendered_tool_calls.json");
  EXPECT_TRUE(in.good()) << "missing tests/data/parsers/rendered_tool_calls.json";
  return nlohmann::json::parse(in);
}

// The template's rendering of an assistant turn with tool calls (what the model is trained to
// write) parses back to the same names and arguments, byte for byte as vLLM's json.dumps.
TEST(Gemma4Parsers, RoundTripOfTheTemplatesToolCalls) {
  nlohmann::json data = load_rendered_cases();
  ASSERT_GE(data["cases"].size(), 10u);
  for (const nlohmann::json& c : data["cases"]) {
    const std::string name = c["case"];
    std::string text = c["model_text"];
    // As generated: the server does not render the <|tool_response> stop token; check both.
    std::string without_stop = text;
    ASSERT_TRUE(without_stop.ends_with(kToolResponseStart)) << name;
    without_stop.resize(without_stop.size() - kToolResponseStart.size());
    for (const std::string& variant : {text, without_stop}) {
      SCOPED_TRACE(name + ": " + variant);
      ChatOutput out = parse_whole(variant);
      const nlohmann::json& expected = c["expected_tool_calls"];
      ASSERT_EQ(out.calls.size(), expected.size());
      for (size_t i = 0; i < out.calls.size(); ++i) {
        EXPECT_EQ(out.calls[i].name, expected[i]["name"].get<std::string>());
        EXPECT_EQ(out.calls[i].arguments, expected[i]["arguments"].get<std::string>());
        EXPECT_EQ(nlohmann::json::parse(out.calls[i].arguments),
                  nlohmann::json::parse(expected[i]["arguments"].get<std::string>()));
        EXPECT_TRUE(out.calls[i].complete);
      }
      if (c["expected_content"].is_null()) {
        EXPECT_FALSE(out.content.has_value()) << *out.content;
      } else {
        EXPECT_EQ(out.content, c["expected_content"].get<std::string>());
      }
      if (c["expected_reasoning"].is_null()) {
        EXPECT_FALSE(out.reasoning.has_value());
      } else {
        EXPECT_EQ(out.reasoning, c["expected_reasoning"].get<std::string>());
      }
      expect_streaming_matches(variant);
    }
  }
}

// The committed renderings are what the shipped template produces today.
TEST(Gemma4Parsers, CommittedRenderingsMatchTheTemplate) {
  GS_REQUIRE_SHARED(shared);
  auto tmpl = shared / "data/chat-templates/google-gemma-4-31B-it.jinja";
  ASSERT_TRUE(std::filesystem::exists(tmpl)) << tmpl;
  if (testing::run_command("/usr/bin/python3 -c 'import jinja2' 2>/dev/null").exit_code != 0) {
    GTEST_SKIP() << "/usr/bin/python3 with jinja2 is not installed";
  }
  auto result = testing::run_command(
      "/usr/bin/python3 " +
      (testing::source_dir() / "tools/render_tool_call_examples.py").string() +
      " --check --template " + tmpl.string() + " --out " +
      (testing::source_dir() / "tests/data/parsers/rendered_tool_calls.json").string() + " 2>&1");
  EXPECT_EQ(result.exit_code, 0) << result.out;
}

TEST(Gemma4Parsers, ThinkingThenToolCall) {
  const std::string text =
      "<|channel>thought\nThe user wants Paris weather; call the tool.\n<channel|>"
      "I'll look that up.<|tool_call>call:get_weather{location:<|\"|>Paris<|\"|>,unit:"
      "<|\"|>celsius<|\"|>}<tool_call|><|tool_response>";
  ChatOutput out = parse_whole(text);
  EXPECT_EQ(out.reasoning, "The user wants Paris weather; call the tool.");
  EXPECT_EQ(out.content, "I'll look that up.");
  ASSERT_EQ(out.calls.size(), 1u);
  EXPECT_EQ(out.calls[0].name, "get_weather");
  EXPECT_EQ(out.calls[0].arguments, R"({"location": "Paris", "unit": "celsius"})");
  expect_streaming_matches(text);
}

TEST(Gemma4Parsers, CallStraightFromAnUnclosedChannel) {
  const std::string text =
      "<|channel>thought\nNeed data.<|tool_call>call:fetch{ids:[1,2]}<tool_call|>";
  ChatOutput out = parse_whole(text);
  EXPECT_EQ(out.reasoning, "Need data.");
  EXPECT_FALSE(out.content.has_value());
  ASSERT_EQ(out.calls.size(), 1u);
  EXPECT_EQ(out.calls[0].arguments, R"({"ids": [1, 2]})");
  expect_streaming_matches(text);
}

TEST(Gemma4Parsers, ThinkingOffAnswerWithStrayMarkers) {
  // Thinking off with the model's own empty channel, and an end-of-turn marker that leaked.
  const std::string text = "<|channel>thought\n<channel|>The capital of France is Paris.<turn|>";
  ChatOutput out = parse_whole(text);
  EXPECT_FALSE(out.reasoning.has_value());
  EXPECT_EQ(out.content, "The capital of France is Paris.");
  EXPECT_TRUE(out.calls.empty());
  expect_streaming_matches(text);
}

TEST(Gemma4Parsers, TruncatedInsideThinking) {
  const std::string text = "<|channel>thought\nLet me enumerate: 1, 2, 3, ";
  ChatOutput out = parse_whole(text);
  EXPECT_EQ(out.reasoning, "Let me enumerate: 1, 2, 3,");
  EXPECT_EQ(out.content, "");
  expect_streaming_matches(text);
}

}  // namespace
}  // namespace gemmaserve
