// Request parsing (vLLM defaults and checks), the chat output chain (reasoning + tool calls, for
// every chunking), and the offline LLM::chat on the tiny real-vocabulary model.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "gemmaserve/llm.h"
#include "server/openai/openai_protocol.h"
#include "server/shared/api_error.h"
#include "server/shared/chat_output_parser.h"
#include "server/shared/metrics.h"
#include "server_test_support.h"
#include "test_support.h"

namespace gemmaserve {
namespace {

using ordered_json = nlohmann::ordered_json;

ToolCallIdGenerator counting_ids() {
  return [n = 0]() mutable { return "call_" + std::to_string(n++); };
}

TEST(ServerProtocolTest, CompletionDefaultsFollowVllm) {
  SamplingParams defaults;
  defaults.temperature = 0.7;
  auto r = parse_completion_request(ordered_json::parse(R"({"prompt":"hi"})"), defaults);
  EXPECT_EQ(r.max_tokens, 16);
  EXPECT_DOUBLE_EQ(r.params.temperature, 0.7);
  auto null_max = parse_completion_request(
      ordered_json::parse(R"({"prompt":"hi","max_tokens":null})"), defaults);
  EXPECT_EQ(null_max.max_tokens, 16);  // vLLM's normalize_null_max_tokens
  auto echo = parse_completion_request(
      ordered_json::parse(R"({"prompt":[[1,2],[3]],"echo":true,"logprobs":2,"temperature":0,
                              "logit_bias":{"5":500},"unknown_field":1})"),
      defaults);
  ASSERT_EQ(echo.prompts.size(), 2u);
  EXPECT_EQ(echo.params.prompt_logprobs, 2);  // echo + logprobs asks for prompt logprobs
  EXPECT_FLOAT_EQ(echo.params.logit_bias.at(5), 100.0f);  // clamped like vLLM
  EXPECT_EQ(echo.ignored_fields, std::vector<std::string>{"unknown_field"});
}

TEST(ServerProtocolTest, ChatDefaultsFollowVllm) {
  auto r = parse_chat_request(
      ordered_json::parse(R"({"messages":[{"role":"user","content":"x"}],"stream":true,
        "stream_options":{},"tools":[{"type":"function","function":{"name":"f"}}],
        "max_completion_tokens":5,"max_tokens":9})"),
      SamplingParams{});
  EXPECT_EQ(r.tool_choice, "auto");              // tools present
  EXPECT_FALSE(r.stream_options.include_usage);  // vLLM's StreamOptions default
  EXPECT_EQ(r.max_tokens, 5);                    // max_completion_tokens wins
  auto no_tools = parse_chat_request(
      ordered_json::parse(R"({"messages":[{"role":"user","content":"x"}]})"), SamplingParams{});
  EXPECT_EQ(no_tools.tool_choice, "none");
  EXPECT_FALSE(no_tools.max_tokens.has_value());  // fills the context
  try {
    parse_chat_request(ordered_json::parse(R"({"messages":[{"role":"user","content":"x"}],
                                               "temperature":"warm"})"),
                       SamplingParams{});
    FAIL() << "expected an error";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.param(), "temperature");
  }
}

TEST(ServerProtocolTest, ChatOutputSplitsReasoningContentAndCalls) {
  const std::string text =
      "<|channel>thought\nLet me check.<channel|>Sure.<|tool_call>call:get_weather{city:<|\"|>"
      "Paris<|\"|>,days:2}<tool_call|><|tool_response>";
  ChatParseOptions o;
  o.parse_reasoning = o.parse_tools = o.strip_markers = true;
  const ChatMessageParts whole = parse_chat_output(text, o, counting_ids());
  EXPECT_EQ(whole.reasoning, "Let me check.");
  EXPECT_EQ(whole.content, "Sure.");
  ASSERT_EQ(whole.tool_calls.size(), 1u);
  EXPECT_EQ(whole.tool_calls[0].name, "get_weather");
  EXPECT_EQ(whole.tool_calls[0].arguments, R"({"city": "Paris", "days": 2})");
  // Every chunk size streams the same result, and no delta holds marker text.
  for (size_t step = 1; step <= 7; ++step) {
    ChatOutputParser p(o, counting_ids());
    std::string reasoning, content, args;
    auto take = [&](const ChatOutputDelta& d) {
      reasoning += d.reasoning;
      content += d.content;
      for (const auto& c : d.tool_calls) args += c.arguments;
      EXPECT_EQ(d.content.find("<|"), std::string::npos);
    };
    for (size_t i = 0; i < text.size(); i += step) take(p.feed(text.substr(i, step)));
    take(p.finish());
    EXPECT_EQ(reasoning, "Let me check.") << step;
    EXPECT_EQ(content, "Sure.") << step;
    EXPECT_EQ(args, whole.tool_calls[0].arguments) << step;
  }
}

TEST(ServerProtocolTest, WithoutToolsMarkersAreStrippedFromContent) {
  ChatParseOptions o;
  o.parse_reasoning = o.strip_markers = true;
  const ChatMessageParts parts = parse_chat_output("Hi<turn|> there<|tool_call>", o);
  EXPECT_EQ(parts.content, "Hi there");
  EXPECT_FALSE(parts.reasoning.has_value());
  EXPECT_TRUE(parts.tool_calls.empty());
}

TEST(ServerProtocolTest, MetricsUseVllmNames) {
  ServerMetrics m("my \"model\"");
  m.observe_time_to_first_token(0.03);
  m.count_finished("stop");
  EngineStats st;
  st.kv_blocks_in_use = {3, 1};
  const std::string text = m.render(st);
  EXPECT_NE(text.find("vllm:time_to_first_token_seconds_bucket{engine=\"0\",model_name=\"my "
                      "\\\"model\\\"\",le=\"0.04\"} 1"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("finished_reason=\"stop\"} 1.0"), std::string::npos);
  EXPECT_NE(text.find("gemmaserve:kv_blocks_in_use{engine=\"0\",model_name=\"my \\\"model\\\"\","
                      "attention_type=\"sliding\"} 3.0"),
            std::string::npos);
}

TEST(ServerProtocolTest, MetricsShowTheCacheSizesPerReplica) {
  ServerMetrics m("m", 2);
  std::vector<EngineStats> st(2);
  st[0].structured_output_cache_bytes = 123456;
  st[0].structured_output_cache_entries = 7;
  st[1].encoder_cache_bytes = 4096;
  st[1].encoder_cache_entries = 1;
  const std::string text = m.render(st);
  for (const char* line : {
           "# TYPE gemmaserve:structured_output_cache_bytes gauge\n",
           "gemmaserve:structured_output_cache_bytes{engine=\"0\",model_name=\"m\"} 123456.0\n",
           "gemmaserve:structured_output_cache_bytes{engine=\"1\",model_name=\"m\"} 0.0\n",
           "gemmaserve:structured_output_cache_entries{engine=\"0\",model_name=\"m\"} 7.0\n",
           "# TYPE gemmaserve:encoder_cache_bytes gauge\n",
           "gemmaserve:encoder_cache_bytes{engine=\"1\",model_name=\"m\"} 4096.0\n",
           "gemmaserve:encoder_cache_entries{engine=\"1\",model_name=\"m\"} 1.0\n",
       }) {
    EXPECT_NE(text.find(line), std::string::npos) << line << text;
  }
}

TEST(ServerProtocolTest, OfflineChatStopsAtEndOfTurnAndParsesLikeTheServer) {
  GS_REQUIRE_SHARED(shared);
  testing::TempDir dir;
  const auto model = dir.path() / "model";
  ASSERT_EQ(testing::make_tiny_chat_model(shared, model), "");
  EngineArgs args;
  args.model = model.string();
  args.kv_cache_memory_bytes = int64_t{64} << 20;
  args.show_progress = false;
  LLM llm(args);
  SamplingParams p = llm.default_sampling_params();
  p.max_tokens = 40;
  p.min_tokens = 3;
  p.seed = 5;
  p.logit_bias[106] = 100.0f;  // <turn|> as soon as min_tokens allows
  const ChatOutput out =
      llm.chat(ordered_json::parse(R"([{"role":"user","content":"What is 1+1?"}])"), p);
  EXPECT_EQ(out.prompt.rfind("<bos><|turn>user\nWhat is 1+1?<turn|>\n<|turn>model\n", 0), 0u)
      << out.prompt;
  ASSERT_EQ(out.messages.size(), 1u);
  EXPECT_EQ(out.messages[0].finish_reason, "stop");
  EXPECT_EQ(out.output.outputs[0].token_ids.size(), 4u);
  ASSERT_TRUE(out.messages[0].content.has_value());
  EXPECT_EQ(out.messages[0].content->find("<turn|>"), std::string::npos);
  // Exactly one <bos> reaches the model.
  EXPECT_EQ(std::count(out.output.prompt_token_ids.begin(), out.output.prompt_token_ids.end(), 2),
            1);
}

}  // namespace
}  // namespace gemmaserve
