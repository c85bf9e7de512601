// The wire format against the real server, field by field as vLLM sends it (docs/PROTOCOL.md):
// return_token_ids (prompt ids in the first chunk, ids per chunk and per choice), the members of
// whole responses and chunks, usage chunks, request_id, return_prompt_text, and the 401 body.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server_test_support.h"
#include "test_support.h"

namespace gemmaserve::testing {
namespace {

int64_t unix_seconds_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

using json = nlohmann::ordered_json;

constexpr const char* kKey = "wire-secret";

std::vector<std::string> keys_of(const json& object) {
  std::vector<std::string> keys;
  for (auto it = object.begin(); it != object.end(); ++it) keys.push_back(it.key());
  return keys;
}

using Keys = std::vector<std::string>;

class ServerWireTest : public TinyChatServerTest<ServerWireTest> {
 public:
  static std::vector<std::string> server_flags() {
    return {"--served-model-name",
            "gemma4",
            "--api-key",
            kKey,
            "--max-model-len",
            "512",
            "--kv-cache-memory-bytes",
            "64M",
            "--enable-auto-tool-choice",
            "--tool-call-parser",
            "gemma4",
            "--reasoning-parser",
            "gemma4",
            "--trust-request-chat-template"};
  }

 protected:
  static httplib::Result post_raw(const std::string& path, const std::string& body,
                                  const httplib::Headers& headers) {
    httplib::Client c("127.0.0.1", server_->port());
    c.set_read_timeout(120, 0);
    return c.Post(path.c_str(), headers, body, "application/json");
  }
  static httplib::Headers auth() { return {{"Authorization", std::string("Bearer ") + kKey}}; }

  // A whole (non-streamed) response.
  static json post(const std::string& path, const json& body) {
    auto r = post_raw(path, body.dump(), auth());
    EXPECT_TRUE(r);
    if (!r) return json();
    EXPECT_EQ(r->status, 200) << r->body;
    return json::parse(r->body);
  }
  // The data events of a streamed response, [DONE] checked and left out.
  static std::vector<json> stream(const std::string& path, json body) {
    body["stream"] = true;
    auto r = post_raw(path, body.dump(), auth());
    EXPECT_TRUE(r);
    std::vector<json> events;
    if (!r) return events;
    EXPECT_EQ(r->status, 200) << r->body;
    size_t at = 0;
    bool done = false;
    while ((at = r->body.find("data: ", at)) != std::string::npos) {
      const size_t end = r->body.find("\n\n", at);
      const std::string data = r->body.substr(at + 6, end - at - 6);
      at = end;
      if (data == "[DONE]") {
        done = true;
        continue;
      }
      events.push_back(json::parse(data));
    }
    EXPECT_TRUE(done);
    return events;
  }

  static json chat_body(const json& extra) {
    json b = {{"model", "gemma4"},
              {"messages", json::array({{{"role", "user"}, {"content", "Say hi"}}})},
              {"max_tokens", 6},
              {"temperature", 0},
              {"ignore_eos", true}};
    for (auto it = extra.begin(); it != extra.end(); ++it) b[it.key()] = it.value();
    return b;
  }
  static json completion_body(const json& extra) {
    json b = {{"model", "gemma4"},
              {"prompt", "Hello there"},
              {"max_tokens", 5},
              {"temperature", 0},
              {"ignore_eos", true}};
    for (auto it = extra.begin(); it != extra.end(); ++it) b[it.key()] = it.value();
    return b;
  }
};

TEST_F(ServerWireTest, Unauthorized401IsVllmsExactBody) {
  for (const httplib::Headers& h :
       {httplib::Headers{}, httplib::Headers{{"Authorization", "Bearer wrong"}},
        httplib::Headers{{"Authorization", std::string("Basic ") + kKey}},
        httplib::Headers{{"Authorization", std::string("Bearer  ") + kKey}},
        httplib::Headers{{"Authorization", std::string("Bearer ") + kKey + "x"}}}) {
    auto r = post_raw("/v1/completions", completion_body({}).dump(), h);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401);
    EXPECT_EQ(r->body, R"({"error":"Unauthorized"})");
    EXPECT_EQ(r->get_header_value("Content-Type"), "application/json");
    EXPECT_EQ(r->get_header_value("Content-Length"), "24");
    EXPECT_FALSE(r->has_header("WWW-Authenticate"));
  }
  // The scheme is matched in any case, as vLLM's verify_token does.
  httplib::Client c("127.0.0.1", server_->port());
  auto lower =
      c.Get("/v1/models", httplib::Headers{{"Authorization", std::string("bearer ") + kKey}});
  ASSERT_TRUE(lower);
  EXPECT_EQ(lower->status, 200);
  auto health = c.Get("/health");  // outside /v1: no key needed
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
}

TEST_F(ServerWireTest, ChatReturnTokenIdsWholeAndStreamed) {
  const json whole = post("/v1/chat/completions", chat_body({{"return_token_ids", true}}));
  ASSERT_TRUE(whole["prompt_token_ids"].is_array());
  EXPECT_EQ(whole["prompt_token_ids"].size(), whole["usage"]["prompt_tokens"].get<size_t>());
  const json& ids = whole["choices"][0]["token_ids"];
  ASSERT_TRUE(ids.is_array());
  EXPECT_EQ(ids.size(), 6u);

  const auto events = stream("/v1/chat/completions", chat_body({{"return_token_ids", true}}));
  ASSERT_GE(events.size(), 2u);
  // The first chunk: the role, and the prompt's ids (vLLM's "first chunk ever").
  EXPECT_EQ(keys_of(events[0]), (Keys{"id", "object", "created", "model", "choices",
                                      "prompt_token_ids", "prompt_text"}));
  EXPECT_EQ(events[0]["prompt_token_ids"], whole["prompt_token_ids"]);
  EXPECT_TRUE(events[0]["prompt_text"].is_null());
  EXPECT_EQ(events[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_FALSE(events[0]["choices"][0].contains("token_ids"));
  json streamed = json::array();
  for (size_t i = 1; i < events.size(); ++i) {
    EXPECT_FALSE(events[i].contains("prompt_token_ids"));
    const json& choice = events[i]["choices"][0];
    ASSERT_TRUE(choice["token_ids"].is_array()) << events[i].dump();
    for (const auto& id : choice["token_ids"]) streamed.push_back(id);
  }
  EXPECT_EQ(streamed, ids);  // greedy: the same tokens, every one in some chunk

  // Not asked: the members are there, null, as vLLM's explicitly set fields are.
  const auto plain = stream("/v1/chat/completions", chat_body({}));
  EXPECT_TRUE(plain[0]["prompt_token_ids"].is_null());
  EXPECT_TRUE(plain[1]["choices"][0]["token_ids"].is_null());
}

TEST_F(ServerWireTest, ChatWholeResponseHasVllmsMembers) {
  const json r = post("/v1/chat/completions", chat_body({}));
  EXPECT_EQ(keys_of(r),
            (Keys{"id", "object", "created", "model", "choices", "service_tier",
                  "system_fingerprint", "usage", "prompt_logprobs", "prompt_token_ids",
                  "prompt_text", "kv_transfer_params", "ec_transfer_params", "metrics"}));
  const json& choice = r["choices"][0];
  EXPECT_EQ(keys_of(choice), (Keys{"index", "message", "logprobs", "finish_reason", "stop_reason",
                                   "token_ids", "routed_experts"}));
  // No tool call: vLLM's ChatMessage leaves tool_calls out.
  EXPECT_EQ(keys_of(choice["message"]), (Keys{"role", "content", "refusal", "annotations", "audio",
                                              "function_call", "reasoning"}));
  EXPECT_EQ(keys_of(r["usage"]), (Keys{"prompt_tokens", "total_tokens", "completion_tokens",
                                       "prompt_tokens_details", "completion_tokens_details"}));
  // With a reasoning parser vLLM counts the reasoning tokens (none here: thinking is off).
  EXPECT_EQ(r["usage"]["completion_tokens_details"], json({{"reasoning_tokens", 0}}));
}

TEST_F(ServerWireTest, ChatRequestIdAndPromptText) {
  const json r = post("/v1/chat/completions",
                      chat_body({{"request_id", "abc-123"}, {"return_prompt_text", true}}));
  EXPECT_EQ(r["id"], "chatcmpl-abc-123");
  ASSERT_TRUE(r["prompt_text"].is_string());
  EXPECT_NE(r["prompt_text"].get<std::string>().find("Say hi"), std::string::npos);
  const auto events = stream("/v1/chat/completions",
                             chat_body({{"request_id", "abc-124"}, {"return_prompt_text", true}}));
  EXPECT_EQ(events[0]["id"], "chatcmpl-abc-124");
  EXPECT_EQ(events[0]["prompt_text"], r["prompt_text"]);
}

TEST_F(ServerWireTest, ChatEchoReturnsPromptLogprobs) {
  // vLLM: echo without prompt_logprobs asks for them at top_logprobs' size (0).
  const json r = post("/v1/chat/completions", chat_body({{"echo", true}}));
  ASSERT_TRUE(r["prompt_logprobs"].is_array());
  EXPECT_EQ(r["prompt_logprobs"].size(), r["usage"]["prompt_tokens"].get<size_t>());
  EXPECT_TRUE(r["prompt_logprobs"][0].is_null());
  EXPECT_EQ(r["prompt_logprobs"][1].size(), 1u);  // just the prompt's own token
}

TEST_F(ServerWireTest, ChatStreamSendsEveryRoleChunkBeforeTheEchoes) {
  json messages = json::array(
      {{{"role", "user"}, {"content", "Say hi"}}, {{"role", "assistant"}, {"content", "Hi"}}});
  const auto events = stream("/v1/chat/completions", chat_body({{"messages", messages},
                                                                {"add_generation_prompt", false},
                                                                {"continue_final_message", true},
                                                                {"echo", true},
                                                                {"n", 2},
                                                                {"temperature", 1},
                                                                {"seed", 3}}));
  ASSERT_GE(events.size(), 4u);
  for (int i = 0; i < 2; ++i) {
    const json& role = events[static_cast<size_t>(i)]["choices"][0];
    EXPECT_EQ(role["index"], i);
    EXPECT_EQ(role["delta"], json({{"role", "assistant"}, {"content", ""}}));
    const json& echo = events[static_cast<size_t>(2 + i)]["choices"][0];
    EXPECT_EQ(echo["index"], i);
    EXPECT_EQ(echo["delta"], json({{"content", "Hi"}}));
  }
}

TEST_F(ServerWireTest, ChatIncludeReasoningFalseHidesTokenIdsAndLogprobs) {
  // vLLM: with include_reasoning off and a parser, ids and logprobs could leak the reasoning.
  const json body =
      chat_body({{"include_reasoning", false}, {"return_token_ids", true}, {"logprobs", true}});
  const json r = post("/v1/chat/completions", body);
  EXPECT_TRUE(r["choices"][0]["token_ids"].is_null());
  EXPECT_TRUE(r["choices"][0]["logprobs"].is_null());
  EXPECT_TRUE(r["prompt_token_ids"].is_array());  // the prompt's ids are still returned
  const auto events = stream("/v1/chat/completions", body);
  for (size_t i = 1; i < events.size(); ++i) {
    EXPECT_TRUE(events[i]["choices"][0]["token_ids"].is_null()) << events[i].dump();
    EXPECT_TRUE(events[i]["choices"][0]["logprobs"].is_null()) << events[i].dump();
  }
}

TEST_F(ServerWireTest, ChatUsageChunks) {
  const auto events = stream(
      "/v1/chat/completions",
      chat_body({{"n", 2},
                 {"temperature", 1},
                 {"seed", 7},
                 {"stream_options", {{"include_usage", true}, {"continuous_usage_stats", true}}}}));
  ASSERT_GE(events.size(), 3u);
  const json& last = events.back();
  EXPECT_TRUE(last["choices"].empty());
  // The final chunk drops null members (vLLM's exclude_none).
  EXPECT_EQ(keys_of(last["usage"]), (Keys{"prompt_tokens", "total_tokens", "completion_tokens",
                                          "completion_tokens_details"}));
  EXPECT_EQ(last["usage"]["completion_tokens"], 12);
  // Continuous usage counts the one choice the chunk carries.
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    const json& u = events[i]["usage"];
    EXPECT_LE(u["completion_tokens"].get<int>(), 6) << events[i].dump();
    EXPECT_FALSE(u.contains("prompt_tokens_details"));
  }
  const auto plain =
      stream("/v1/chat/completions", chat_body({{"stream_options", json::object()}}));
  EXPECT_FALSE(plain.back().contains("usage"));  // include_usage defaults to false
}

TEST_F(ServerWireTest, CompletionReturnTokenIdsWholeAndStreamed) {
  const json whole = post("/v1/completions", completion_body({{"return_token_ids", true}}));
  EXPECT_EQ(keys_of(whole), (Keys{"id", "object", "created", "model", "choices", "service_tier",
                                  "system_fingerprint", "usage", "kv_transfer_params",
                                  "ec_transfer_params", "metrics"}));
  const json& choice = whole["choices"][0];
  EXPECT_EQ(keys_of(choice),
            (Keys{"index", "text", "logprobs", "finish_reason", "stop_reason", "token_ids",
                  "prompt_logprobs", "prompt_token_ids", "routed_experts"}));
  ASSERT_TRUE(choice["prompt_token_ids"].is_array());
  EXPECT_EQ(choice["prompt_token_ids"].size(), whole["usage"]["prompt_tokens"].get<size_t>());
  ASSERT_EQ(choice["token_ids"].size(), 5u);

  const auto events = stream("/v1/completions", completion_body({{"return_token_ids", true}}));
  json streamed = json::array();
  for (size_t i = 0; i < events.size(); ++i) {
    const json& c = events[i]["choices"][0];
    EXPECT_EQ(keys_of(c), (Keys{"index", "text", "logprobs", "finish_reason", "stop_reason",
                                "prompt_token_ids", "token_ids"}));
    if (i == 0) {
      EXPECT_EQ(c["prompt_token_ids"], choice["prompt_token_ids"]);
    } else {
      EXPECT_TRUE(c["prompt_token_ids"].is_null());
    }
    for (const auto& id : c["token_ids"]) streamed.push_back(id);
  }
  EXPECT_EQ(streamed, choice["token_ids"]);

  const json plain = post("/v1/completions", completion_body({}));
  EXPECT_TRUE(plain["choices"][0]["token_ids"].is_null());
  EXPECT_TRUE(plain["choices"][0]["prompt_token_ids"].is_null());
}

TEST_F(ServerWireTest, CompletionRequestIdAndUsageChunk) {
  const json r = post("/v1/completions", completion_body({{"request_id", "xyz"}}));
  EXPECT_EQ(r["id"], "cmpl-xyz");
  const auto events =
      stream("/v1/completions", completion_body({{"stream_options", {{"include_usage", true}}}}));
  EXPECT_EQ(keys_of(events.back()["usage"]),
            (Keys{"prompt_tokens", "total_tokens", "completion_tokens"}));
}

TEST_F(ServerWireTest, XRequestIdHeaderNamesTheResponseBeforeTheBodyField) {
  httplib::Headers h = auth();
  h.emplace("X-Request-Id", "from-header");
  auto c = post_raw("/v1/completions", completion_body({{"request_id", "from-body"}}).dump(), h);
  ASSERT_TRUE(c);
  ASSERT_EQ(c->status, 200) << c->body;
  EXPECT_EQ(json::parse(c->body)["id"], "cmpl-from-header");
  auto chat = post_raw("/v1/chat/completions", chat_body({}).dump(), h);
  ASSERT_TRUE(chat);
  ASSERT_EQ(chat->status, 200) << chat->body;
  EXPECT_EQ(json::parse(chat->body)["id"], "chatcmpl-from-header");
}

TEST_F(ServerWireTest, ModelsCreatedIsTheTimeOfTheCall) {
  httplib::Client c("127.0.0.1", server_->port());
  const int64_t before = unix_seconds_now();
  auto r = c.Get("/v1/models", auth());
  const int64_t after = unix_seconds_now();
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  const json card = json::parse(r->body)["data"][0];
  EXPECT_GE(card["created"].get<int64_t>(), before);
  EXPECT_LE(card["created"].get<int64_t>(), after);
  EXPECT_EQ(card["permission"][0]["created"], card["created"]);
}

TEST_F(ServerWireTest, TokenizeRendersWithATrustedRequestChatTemplate) {
  // This server trusts request templates (ServerErrorsTest's refuses them).
  const json messages = json::array({{{"role", "user"}, {"content", "Say hi"}}});
  const json with_template =
      post("/tokenize", {{"messages", messages},
                         {"chat_template",
                          "{{ bos_token }}[{% for m in messages %}{{ m.content "
                          "}}{% endfor %}]"}});
  const json as_text = post("/tokenize", {{"prompt", "[Say hi]"}});
  EXPECT_EQ(with_template["tokens"], as_text["tokens"]);
  const json with_server_template = post("/tokenize", {{"messages", messages}});
  EXPECT_NE(with_server_template["tokens"], as_text["tokens"]);
}

TEST_F(ServerWireTest, CompletionEchoOfNoTokensCountsTheTokenVllmRuns) {
  // vLLM runs one token for echo + max_tokens 0, returns only the prompt, and counts the token.
  const json r =
      post("/v1/completions",
           completion_body({{"echo", true}, {"max_tokens", 0}, {"return_token_ids", true}}));
  const json& c = r["choices"][0];
  EXPECT_EQ(c["text"], "");  // token ids returned: vLLM does not detokenize the prompt
  EXPECT_EQ(c["token_ids"].size(), 1u);
  EXPECT_EQ(r["usage"]["completion_tokens"], 1);
  const json text = post("/v1/completions", completion_body({{"echo", true}, {"max_tokens", 0}}));
  EXPECT_EQ(text["choices"][0]["text"], "Hello there");
}

TEST_F(ServerWireTest, ReturnTokensAsTokenIdsNamesLogprobTokensById) {
  const json r = post("/v1/completions", completion_body({{"logprobs", 1},
                                                          {"return_tokens_as_token_ids", true},
                                                          {"return_token_ids", true}}));
  const json& c = r["choices"][0];
  ASSERT_EQ(c["logprobs"]["tokens"].size(), c["token_ids"].size());
  for (size_t i = 0; i < c["token_ids"].size(); ++i) {
    EXPECT_EQ(c["logprobs"]["tokens"][i],
              "token_id:" + std::to_string(c["token_ids"][i].get<int>()));
  }
}

TEST_F(ServerWireTest, TruncationSideRightKeepsTheStart) {
  const json ids = {2, 100, 101, 102, 103, 104, 105};
  const json left = post("/v1/completions", completion_body({{"prompt", ids},
                                                             {"truncate_prompt_tokens", 3},
                                                             {"return_token_ids", true}}));
  // The default side keeps the end, with the <bos> first among the kept (README's BOS rule).
  EXPECT_EQ(left["choices"][0]["prompt_token_ids"], json({2, 104, 105}));
  const json right = post("/v1/completions", completion_body({{"prompt", ids},
                                                              {"truncate_prompt_tokens", 3},
                                                              {"truncation_side", "right"},
                                                              {"return_token_ids", true}}));
  EXPECT_EQ(right["choices"][0]["prompt_token_ids"], json({2, 100, 101}));
}

TEST_F(ServerWireTest, SpacesBetweenSpecialTokensOffKeepsGemmaText) {
  // Gemma 4's added tokens hold no "▁", so vLLM's rule changes no text: same output either way.
  const json on = post("/v1/completions",
                       completion_body({{"skip_special_tokens", false}, {"max_tokens", 12}}));
  const json off =
      post("/v1/completions", completion_body({{"skip_special_tokens", false},
                                               {"spaces_between_special_tokens", false},
                                               {"max_tokens", 12}}));
  EXPECT_EQ(off["choices"][0]["text"], on["choices"][0]["text"]);
}

}  // namespace
}  // namespace gemmaserve::testing
