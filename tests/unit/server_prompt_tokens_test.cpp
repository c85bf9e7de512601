// What the model sees, over HTTP against the real server (tiny Gemma 4, real vocabulary and 31B
// chat template): exactly one <bos> at position 0 on every prompt path, counted once by /tokenize
// (messages, and prompt with add_special_tokens true) and by usage.prompt_tokens; /tokenize of a
// prompt with add_special_tokens false gives the text's tokens alone (vLLM, Hugging Face); and a
// bad assistant tool_calls entry in the history is a 400 naming tool_calls on every chat route.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>

#include "gemmaserve/llm.h"
#include "server_test_support.h"

namespace gemmaserve::testing {
namespace {

using nlohmann::json;

constexpr int32_t kBos = 2;

class ServerPromptTokensTest : public TinyChatServerTest<ServerPromptTokensTest> {
 public:
  static std::vector<std::string> server_flags() {
    return {"--served-model-name",     "gemma4", "--max-model-len", "512",
            "--kv-cache-memory-bytes", "64M"};
  }

 protected:
  // POSTs `body` and returns {status, parsed body}.
  static std::pair<int, json> post(const std::string& path, const json& body) {
    httplib::Client c("127.0.0.1", server_->port());
    c.set_read_timeout(120, 0);
    auto r = c.Post(path.c_str(), body.dump(), "application/json");
    if (!r) return {0, json()};
    return {r->status, json::parse(r->body, nullptr, false)};
  }

  static std::vector<int32_t> tokenize(json body) {
    body["model"] = "gemma4";
    auto [status, out] = post("/tokenize", body);
    EXPECT_EQ(status, 200) << out.dump();
    EXPECT_EQ(out["count"], out["tokens"].size());
    return out["tokens"].get<std::vector<int32_t>>();
  }

  static int usage_prompt_tokens(const std::string& path, json body) {
    body["model"] = "gemma4";
    body["max_tokens"] = 1;
    auto [status, out] = post(path, body);
    EXPECT_EQ(status, 200) << out.dump();
    return out["usage"]["prompt_tokens"].get<int>();
  }
};

void expect_one_leading_bos(const std::vector<int32_t>& ids) {
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.front(), kBos);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), kBos), 1);
}

TEST_F(ServerPromptTokensTest, TextPromptsCountOneBosWithOrWithoutSpecialTokens) {
  const std::vector<int32_t> plain = tokenize({{"prompt", "Hello world"}});
  expect_one_leading_bos(plain);
  for (const char* text : {"Hello world", "<bos>Hello world", "<bos><bos>Hello world"}) {
    SCOPED_TRACE(text);
    EXPECT_EQ(tokenize({{"prompt", text}, {"add_special_tokens", true}}), plain);
    for (bool special : {true, false}) {
      EXPECT_EQ(usage_prompt_tokens("/v1/completions",
                                    {{"prompt", text}, {"add_special_tokens", special}}),
                static_cast<int>(plain.size()));
    }
  }
}

TEST_F(ServerPromptTokensTest, TokenizeWithoutSpecialTokensGivesTheTextsTokensAlone) {
  auto bare = [](const char* text) {
    return tokenize({{"prompt", text}, {"add_special_tokens", false}});
  };
  const std::vector<int32_t> hello_world = {9259, 1902};
  EXPECT_EQ(bare("Hello world"), hello_world);
  EXPECT_EQ(bare(""), std::vector<int32_t>{});
  std::vector<int32_t> with_bos = {kBos};
  with_bos.insert(with_bos.end(), hello_world.begin(), hello_world.end());
  EXPECT_EQ(bare("<bos>Hello world"), with_bos);  // a <bos> written in the text stays, once
  EXPECT_EQ(tokenize({{"prompt", "Hello world"}}), with_bos);  // vLLM's default adds it
  // Pieces tokenized apart concatenate to the whole, with no <bos> between them.
  std::vector<int32_t> pieces = bare("Hello");
  const std::vector<int32_t> rest = bare(" world");
  pieces.insert(pieces.end(), rest.begin(), rest.end());
  EXPECT_EQ(pieces, hello_world);

  auto [status, out] =
      post("/tokenize", {{"model", "gemma4"}, {"prompt", "Hi"}, {"add_special_tokens", "yes"}});
  EXPECT_EQ(status, 400);
  EXPECT_EQ(out["error"]["message"], "add_special_tokens: Input should be a valid boolean");
  EXPECT_EQ(out["error"]["param"], "add_special_tokens");
}

TEST_F(ServerPromptTokensTest, TokenIdPromptsGetExactlyOneLeadingBos) {
  const std::vector<int32_t> words = {651, 6037, 529};
  std::vector<int32_t> with_bos = {kBos};
  with_bos.insert(with_bos.end(), words.begin(), words.end());
  std::vector<int32_t> two_bos = {kBos, kBos};
  two_bos.insert(two_bos.end(), words.begin(), words.end());
  for (const auto& ids : {words, with_bos, two_bos}) {
    EXPECT_EQ(usage_prompt_tokens("/v1/completions", {{"prompt", ids}}), 4);
  }
  // echo shows the prompt the model saw; truncation keeps the BOS first and counts it.
  auto [status, out] = post(
      "/v1/completions",
      {{"model", "gemma4"}, {"prompt", words}, {"max_tokens", 1}, {"echo", true}, {"logprobs", 0}});
  ASSERT_EQ(status, 200) << out.dump();
  EXPECT_EQ(out["choices"][0]["logprobs"]["tokens"][0], "<bos>");
  EXPECT_EQ(
      usage_prompt_tokens("/v1/completions", {{"prompt", words}, {"truncate_prompt_tokens", 2}}),
      2);
}

TEST_F(ServerPromptTokensTest, ChatCountsTheTemplatesBosOnce) {
  const json messages = json::parse(R"([{"role":"user","content":"Hello"}])");
  const std::vector<int32_t> ids = tokenize({{"messages", messages}});
  expect_one_leading_bos(ids);
  for (bool special : {true, false}) {
    SCOPED_TRACE(special);
    EXPECT_EQ(tokenize({{"messages", messages}, {"add_special_tokens", special}}), ids);
    EXPECT_EQ(usage_prompt_tokens("/v1/chat/completions",
                                  {{"messages", messages}, {"add_special_tokens", special}}),
              static_cast<int>(ids.size()));
  }
}

// vLLM's text part types (input_text, output_text, refusal, bare strings) reach the Gemma 4
// template as {"type": "text"} parts ("openai" content format), which it concatenates (trimmed).
TEST_F(ServerPromptTokensTest, VllmTextPartTypesRenderAsTheirText) {
  const json plain = json::parse(R"([{"role":"user","content":"Hello"},
    {"role":"assistant","content":"Hithere"},{"role":"user","content":"Bye"}])");
  const json parts = json::parse(R"([
    {"role":"user","content":[{"type":"input_text","text":"Hel"},"lo"]},
    {"role":"assistant","content":[{"type":"output_text","text":"Hi"},{"type":"refusal","refusal":"there"}]},
    {"role":"user","content":[{"type":"text","text":"Bye"}]}])");
  const std::vector<int32_t> ids = tokenize({{"messages", plain}});
  EXPECT_EQ(tokenize({{"messages", parts}}), ids);
  EXPECT_EQ(usage_prompt_tokens("/v1/chat/completions", {{"messages", parts}}),
            static_cast<int>(ids.size()));
  auto [status, out] =
      post("/v1/chat/completions",
           {{"model", "gemma4"}, {"messages", json::parse(R"([{"role":"user","content":[
                               {"type":"refusal","text":"no refusal key"}]}])")}});
  EXPECT_EQ(status, 400);
  EXPECT_EQ(out["error"]["message"], "messages: refusal content parts need a 'refusal' string");
}

TEST_F(ServerPromptTokensTest, ToolCallHistoryRendersItsArgumentsAndRejectsBadEntries) {
  json messages = json::parse(R"([
    {"role":"user","content":"Weather in Lyon?"},
    {"role":"assistant","content":null,"tool_calls":[
      {"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Lyon\"}"}}]},
    {"role":"tool","tool_call_id":"c1","content":"sunny"}])");
  json as_object = messages;
  as_object[1]["tool_calls"][0]["function"]["arguments"] = json::parse(R"({"city":"Lyon"})");
  const std::vector<int32_t> ids = tokenize({{"messages", messages}});
  EXPECT_EQ(ids, tokenize({{"messages", as_object}}));
  EXPECT_EQ(usage_prompt_tokens("/v1/chat/completions", {{"messages", messages}}),
            static_cast<int>(ids.size()));

  messages[1]["tool_calls"][0] = "get_weather";
  for (const char* path : {"/tokenize", "/v1/chat/completions"}) {
    SCOPED_TRACE(path);
    auto [status, out] =
        post(path, {{"model", "gemma4"}, {"messages", messages}, {"max_tokens", 1}});
    EXPECT_EQ(status, 400);
    EXPECT_EQ(out["error"]["message"], "assistant tool_calls entries must be objects.");
    EXPECT_EQ(out["error"]["param"], "tool_calls");
    EXPECT_EQ(out["error"]["type"], "BadRequestError");
  }
}

TEST_F(ServerPromptTokensTest, OfflineLlmFollowsTheSameRules) {
  EngineArgs args;
  args.model = (dir_->path() / "model").string();
  args.kv_cache_memory_bytes = int64_t{16} << 20;
  args.show_progress = false;
  LLM llm(args);
  SamplingParams p = llm.default_sampling_params();
  p.max_tokens = 1;
  const auto outs =
      llm.generate({Prompt::from_ids({651, 6037}), Prompt::from_ids({kBos, kBos, 651, 6037})}, p);
  for (const RequestOutput& o : outs) {
    EXPECT_EQ(o.prompt_token_ids, (std::vector<int32_t>{kBos, 651, 6037}));
  }
  const ChatOutput chat = llm.chat(nlohmann::ordered_json::parse(R"([
    {"role":"user","content":"Weather in Lyon?"},
    {"role":"assistant","tool_calls":[
      {"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Lyon\"}"}}]},
    {"role":"tool","tool_call_id":"c1","content":"sunny"}])"),
                                   p);
  EXPECT_NE(chat.prompt.find("<|tool_call>call:get_weather{city:<|\"|>Lyon<|\"|>}<tool_call|>"),
            std::string::npos)
      << chat.prompt;
  expect_one_leading_bos(chat.output.prompt_token_ids);
}

}  // namespace
}  // namespace gemmaserve::testing
