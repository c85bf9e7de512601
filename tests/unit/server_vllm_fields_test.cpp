// Request fields parsed as vLLM's protocol classes read them (docs/PROTOCOL.md): defaults,
// validation messages and the fields gemmaserve refuses rather than silently ignores.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "server/openai/openai_protocol.h"
#include "server/shared/api_error.h"

namespace gemmaserve {
namespace {

using ordered_json = nlohmann::ordered_json;

const char* kMessages = R"("messages":[{"role":"user","content":"x"}])";
const char* kTools = R"("tools":[{"type":"function","function":{"name":"f"}}])";

ChatRequest chat(const std::string& extra) {
  std::string body = std::string("{") + kMessages;
  if (!extra.empty()) body += "," + extra;
  return parse_chat_request(ordered_json::parse(body + "}"), SamplingParams{});
}

CompletionRequest completion(const std::string& extra) {
  std::string body = R"({"prompt":"hi")";
  if (!extra.empty()) body += "," + extra;
  return parse_completion_request(ordered_json::parse(body + "}"), SamplingParams{});
}

// The ApiError a parse throws: status, param and message.
template <typename F>
ApiError error_of(F&& parse) {
  try {
    parse();
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "expected an error";
  return ApiError(0, "", "");
}

void expect_error(const ApiError& e, int status, const std::string& param,
                  const std::string& message) {
  EXPECT_EQ(e.status(), status);
  EXPECT_EQ(e.param().value_or(""), param);
  EXPECT_EQ(std::string(e.what()), message);
}

TEST(VllmFieldsTest, SpacesBetweenSpecialTokensReachesTheSamplingParams) {
  EXPECT_TRUE(completion("").params.spaces_between_special_tokens);  // vLLM's default
  EXPECT_FALSE(
      completion(R"("spaces_between_special_tokens":false)").params.spaces_between_special_tokens);
  EXPECT_FALSE(
      chat(R"("spaces_between_special_tokens":false)").params.spaces_between_special_tokens);
}

TEST(VllmFieldsTest, CompletionNullMaxTokensIsSixteen) {
  // vLLM's normalize_null_max_tokens: an explicit null is the default, 16.
  EXPECT_EQ(completion(R"("max_tokens":null)").max_tokens, 16);
  EXPECT_EQ(completion("").max_tokens, 16);
}

TEST(VllmFieldsTest, StreamOptionsIncludeUsageDefaultsToFalse) {
  EXPECT_FALSE(completion(R"("stream":true,"stream_options":{})").stream_options.include_usage);
  const auto r = completion(R"("stream":true,"stream_options":{"include_usage":true})");
  EXPECT_TRUE(r.stream_options.include_usage);
}

TEST(VllmFieldsTest, LogprobsMinusOneIsTheWholeVocabulary) {
  EXPECT_EQ(completion(R"("logprobs":-1)").params.logprobs, -1);
  expect_error(error_of([] { completion(R"("logprobs":-2)"); }), 400, "logprobs",
               "`logprobs` must be a positive value or -1.");
  expect_error(error_of([] { completion(R"("prompt_logprobs":-2)"); }), 400, "prompt_logprobs",
               "`prompt_logprobs` must be a positive value or -1.");
  // prompt_logprobs 0 is allowed with stream (vLLM refuses only > 0 and -1).
  EXPECT_EQ(completion(R"("stream":true,"prompt_logprobs":0)").params.prompt_logprobs, 0);
  expect_error(error_of([] { completion(R"("stream":true,"prompt_logprobs":-1)"); }), 400,
               "prompt_logprobs", "`prompt_logprobs` are not available when `stream=True`.");
}

TEST(VllmFieldsTest, TopLogprobsFollowsVllmsChecks) {
  EXPECT_FALSE(chat(R"("top_logprobs":0)").logprobs);  // 0 needs no logprobs
  expect_error(error_of([] { chat(R"("top_logprobs":2)"); }), 400, "top_logprobs",
               "when using `top_logprobs`, `logprobs` must be set to true.");
  expect_error(error_of([] { chat(R"("logprobs":true,"top_logprobs":-3)"); }), 400, "top_logprobs",
               "`top_logprobs` must be a positive value or -1.");
}

TEST(VllmFieldsTest, ChatEchoAsksPromptLogprobsOfTopLogprobsSize) {
  EXPECT_FALSE(chat("").params.prompt_logprobs.has_value());
  EXPECT_EQ(chat(R"("echo":true)").params.prompt_logprobs, 0);
  EXPECT_EQ(chat(R"("echo":true,"logprobs":true,"top_logprobs":3)").params.prompt_logprobs, 3);
  EXPECT_FALSE(chat(R"("echo":true,"top_logprobs":null)").params.prompt_logprobs.has_value());
  EXPECT_EQ(chat(R"("echo":true,"prompt_logprobs":2)").params.prompt_logprobs, 2);
}

TEST(VllmFieldsTest, ToolChoiceRulesAndMessagesAreVllms) {
  expect_error(error_of([] { chat(R"("tools":[])"); }), 400, "tools",
               "`tools` must not be an empty array. Either provide at least one tool or omit the "
               "field entirely.");
  expect_error(error_of([] { chat(R"("tool_choice":"required")"); }), 400, "tool_choice",
               "When using `tool_choice`, `tools` must be set.");
  EXPECT_EQ(chat(R"("tool_choice":"none")").tool_choice, "none");  // fine without tools
  expect_error(
      error_of([] { chat(std::string(kTools) + R"(,"tool_choice":"sometimes")"); }), 400,
      "tool_choice",
      "Invalid value for `tool_choice`: sometimes! Only named tools, \"none\", \"auto\" or "
      "\"required\" are supported.");
  const std::string usage =
      "Correct usage: `{\"type\": \"function\", \"function\": {\"name\": \"my_function\"}}`";
  expect_error(
      error_of([] { chat(std::string(kTools) + R"(,"tool_choice":{"type":"function"})"); }), 400,
      "tool_choice.function", "Invalid value for `function`: `None` in `tool_choice`! " + usage);
  expect_error(error_of([] {
                 chat(std::string(kTools) + R"(,"tool_choice":{"type":"function","function":{}})");
               }),
               400, "tool_choice.function.name",
               "Expected field `name` in `function` in `tool_choice`! " + usage);
  expect_error(
      error_of([] {
        chat(std::string(kTools) + R"(,"tool_choice":{"type":"function","function":{"name":"g"}})");
      }),
      400, "tool_choice",
      "The tool specified in `tool_choice` does not match any of the specified `tools`");
  const auto named =
      chat(std::string(kTools) + R"(,"tool_choice":{"type":"function","function":{"name":"f"}})");
  EXPECT_EQ(named.tool_choice, "function");
  EXPECT_EQ(named.tool_choice_function, "f");
}

TEST(VllmFieldsTest, ParallelToolCallsAndPromptTextAreRead) {
  EXPECT_TRUE(chat("").parallel_tool_calls);
  const auto r = chat(R"("parallel_tool_calls":false,"return_prompt_text":true)");
  EXPECT_FALSE(r.parallel_tool_calls);
  EXPECT_TRUE(r.return_prompt_text);
  EXPECT_TRUE(r.ignored_fields.empty());
}

TEST(VllmFieldsTest, CacheSaltIsCheckedAsVllmChecksIt) {
  const std::string message =
      "Parameter 'cache_salt' must be at most 128 characters and must not contain '@', '/', "
      "'\\\\', or NUL.";
  expect_error(error_of([] { completion(R"("cache_salt":"a/b")"); }), 400, "cache_salt", message);
  expect_error(error_of([] { completion(R"("cache_salt":")" + std::string(129, 's') + "\""); }),
               400, "cache_salt", message);
  EXPECT_EQ(completion(R"("cache_salt":")" + std::string(128, 's') + "\"").cache_salt,
            std::string(128, 's'));
}

TEST(VllmFieldsTest, TruncationSideRightKeepsTheFirstTokens) {
  EXPECT_FALSE(completion(R"("truncate_prompt_tokens":3)").truncate_keeps_first);
  EXPECT_TRUE(
      completion(R"("truncate_prompt_tokens":3,"truncation_side":"right")").truncate_keeps_first);
  expect_error(error_of([] { completion(R"("truncation_side":"middle")"); }), 400,
               "truncation_side", "truncation_side: Input should be 'left' or 'right'");
}

TEST(VllmFieldsTest, OutputChangingFieldsGemmaserveLacksAre501NotIgnored) {
  for (const char* field : {R"("logprob_token_ids":[5])", R"("repetition_detection":{})",
                            R"("thinking_token_budget":64)", R"("watermarking":true)"}) {
    SCOPED_TRACE(field);
    EXPECT_EQ(error_of([&] { completion(field); }).status(), 501);
  }
  // -1 means unlimited, which is what gemmaserve does.
  EXPECT_NO_THROW(completion(R"("thinking_token_budget":-1)"));
}

TEST(VllmFieldsTest, FieldsWithoutEffectHereAreAcceptedAndLoggedAsIgnored) {
  // Known and meaningless here (read silently, as vLLM reads `user`).
  EXPECT_TRUE(completion(R"("user":"u","length_penalty":1.0)").ignored_fields.empty());
  // Routing, disaggregation, extensions, chunk batching: the text is the same without them.
  const auto r =
      completion(R"("session_id":"s","kv_transfer_params":{},"vllm_xargs":{},"stream_interval":4)");
  EXPECT_EQ(r.ignored_fields, (std::vector<std::string>{"session_id", "kv_transfer_params",
                                                        "vllm_xargs", "stream_interval"}));
}

}  // namespace
}  // namespace gemmaserve
