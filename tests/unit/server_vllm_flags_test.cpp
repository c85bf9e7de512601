// The vLLM serve flags gemmaserve now runs, against the real server: CORS headers and
// preflights, X-Request-Id, usage.prompt_tokens_details, forced stream usage, token ids in
// logprobs by default and /tokenizer_info, each with vLLM's defaults beside it.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>

#include "server_test_support.h"

namespace gemmaserve::testing {
namespace {

using json = nlohmann::json;

httplib::Result send(int port, const std::string& method, const std::string& path,
                     const httplib::Headers& headers, const std::string& body = "") {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(120, 0);
  if (method == "OPTIONS") return c.Options(path.c_str(), headers);
  if (method == "GET") return c.Get(path.c_str(), headers);
  return c.Post(path.c_str(), headers, body, "application/json");
}

// The data events of an SSE body, [DONE] left out.
std::vector<json> events_of(const std::string& body) {
  std::vector<json> events;
  size_t at = 0;
  while ((at = body.find("data: ", at)) != std::string::npos) {
    const size_t end = body.find("\n\n", at);
    const std::string data = body.substr(at + 6, end - at - 6);
    at = end;
    if (data != "[DONE]") events.push_back(json::parse(data));
  }
  return events;
}

class ServerVllmFlagsTest : public TinyChatServerTest<ServerVllmFlagsTest> {
 public:
  static std::vector<std::string> server_flags() {
    return {"--max-model-len",
            "256",
            "--kv-cache-memory-bytes",
            "32M",
            "--enable-request-id-headers",
            "--allowed-origins",
            R"(["https://app.example"])",
            "--allowed-methods",
            R"(["GET", "POST"])",
            "--allowed-headers",
            R"(["Authorization"])",
            "--allow-credentials",
            "--enable-prompt-tokens-details",
            "--enable-force-include-usage",
            "--return-tokens-as-token-ids",
            "--enable-tokenizer-info-endpoint"};
  }
  static int port() { return server_->port(); }
};

TEST_F(ServerVllmFlagsTest, RequestIdHeaderIsTheClientsElseAUuidHex) {
  auto mine = send(port(), "GET", "/health", {{"X-Request-Id", "req-42"}});
  ASSERT_TRUE(mine);
  EXPECT_EQ(mine->get_header_value("X-Request-Id"), "req-42");
  auto fresh = send(port(), "POST", "/v1/completions", {}, R"({"prompt": "hi", "max_tokens": 1})");
  ASSERT_TRUE(fresh);
  EXPECT_EQ(fresh->status, 200) << fresh->body;
  EXPECT_TRUE(std::regex_match(fresh->get_header_value("X-Request-Id"), std::regex("[0-9a-f]{32}")))
      << fresh->get_header_value("X-Request-Id");
  auto missing = send(port(), "GET", "/no-such-route", {});
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_TRUE(missing->has_header("X-Request-Id"));  // vLLM's middleware wraps every answer
}

TEST_F(ServerVllmFlagsTest, CorsEchoesAListedOriginAndAnswersPreflights) {
  auto simple = send(port(), "GET", "/v1/models", {{"Origin", "https://app.example"}});
  ASSERT_TRUE(simple);
  EXPECT_EQ(simple->status, 200);
  EXPECT_EQ(simple->get_header_value("Access-Control-Allow-Origin"), "https://app.example");
  EXPECT_EQ(simple->get_header_value("Access-Control-Allow-Credentials"), "true");
  EXPECT_EQ(simple->get_header_value("Vary"), "Origin");
  auto other = send(port(), "GET", "/v1/models", {{"Origin", "https://evil.example"}});
  ASSERT_TRUE(other);
  EXPECT_FALSE(other->has_header("Access-Control-Allow-Origin"));
  EXPECT_EQ(other->get_header_value("Access-Control-Allow-Credentials"), "true");

  auto preflight = send(port(), "OPTIONS", "/v1/chat/completions",
                        {{"Origin", "https://app.example"},
                         {"Access-Control-Request-Method", "POST"},
                         {"Access-Control-Request-Headers", "authorization, content-type"}});
  ASSERT_TRUE(preflight);
  EXPECT_EQ(preflight->status, 200);
  EXPECT_EQ(preflight->body, "OK");
  EXPECT_EQ(preflight->get_header_value("Access-Control-Allow-Origin"), "https://app.example");
  EXPECT_EQ(preflight->get_header_value("Access-Control-Allow-Methods"), "GET, POST");
  EXPECT_EQ(preflight->get_header_value("Access-Control-Allow-Headers"),
            "Accept, Accept-Language, Authorization, Content-Language, Content-Type");
  EXPECT_EQ(preflight->get_header_value("Access-Control-Max-Age"), "600");
  EXPECT_EQ(preflight->get_header_value("Access-Control-Allow-Credentials"), "true");
  EXPECT_EQ(preflight->get_header_value("Vary"), "Origin");

  auto refused = send(port(), "OPTIONS", "/v1/chat/completions",
                      {{"Origin", "https://evil.example"},
                       {"Access-Control-Request-Method", "DELETE"},
                       {"Access-Control-Request-Headers", "x-custom"}});
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 400);
  EXPECT_EQ(refused->body, "Disallowed CORS origin, method, headers");
  EXPECT_FALSE(refused->has_header("Access-Control-Allow-Origin"));
}

TEST_F(ServerVllmFlagsTest, PromptTokensDetailsCountThePrefixCacheHits) {
  // 40+ tokens: two full 16-token blocks the second request finds cached.
  std::string prompt;
  for (int i = 0; i < 40; ++i) prompt += "word" + std::to_string(i) + " ";
  const json body = {{"prompt", prompt}, {"max_tokens", 1}, {"temperature", 0}};
  auto first = send(port(), "POST", "/v1/completions", {}, body.dump());
  ASSERT_TRUE(first);
  ASSERT_EQ(first->status, 200) << first->body;
  EXPECT_TRUE(json::parse(first->body)["usage"]["prompt_tokens_details"].is_null())
      << first->body;  // nothing cached: vLLM leaves the details out
  auto second = send(port(), "POST", "/v1/completions", {}, body.dump());
  ASSERT_TRUE(second);
  const json usage = json::parse(second->body)["usage"];
  const int cached = usage["prompt_tokens_details"]["cached_tokens"].get<int>();
  EXPECT_GE(cached, 32) << usage;
  EXPECT_EQ(cached % 16, 0) << usage;
  EXPECT_LT(cached, usage["prompt_tokens"].get<int>()) << usage;

  json streamed = body;
  streamed["stream"] = true;  // usage forced by --enable-force-include-usage
  auto third = send(port(), "POST", "/v1/completions", {}, streamed.dump());
  ASSERT_TRUE(third);
  const std::vector<json> events = events_of(third->body);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back()["usage"]["prompt_tokens_details"]["cached_tokens"], cached)
      << third->body;
}

TEST_F(ServerVllmFlagsTest, ForcedUsageEndsEveryStream) {
  const json chat = {{"messages", json::array({{{"role", "user"}, {"content", "hi"}}})},
                     {"max_tokens", 2},
                     {"stream", true}};
  auto r = send(port(), "POST", "/v1/chat/completions", {}, chat.dump());
  ASSERT_TRUE(r);
  const std::vector<json> events = events_of(r->body);
  ASSERT_GE(events.size(), 2u);
  EXPECT_TRUE(events.back()["choices"].empty()) << r->body;
  EXPECT_TRUE(events.back()["usage"].contains("prompt_tokens")) << r->body;
  EXPECT_FALSE(events.front().contains("usage")) << r->body;  // continuous stats stay off
}

TEST_F(ServerVllmFlagsTest, LogprobTokensAreTokenIdsUnlessTheRequestSaysNo) {
  const json body = {{"prompt", "hi"}, {"max_tokens", 2}, {"logprobs", 1}};
  auto by_default = send(port(), "POST", "/v1/completions", {}, body.dump());
  ASSERT_TRUE(by_default);
  const json tokens = json::parse(by_default->body)["choices"][0]["logprobs"]["tokens"];
  ASSERT_FALSE(tokens.empty());
  for (const auto& t : tokens) EXPECT_EQ(t.get<std::string>().rfind("token_id:", 0), 0u) << t;
  json no = body;
  no["return_tokens_as_token_ids"] = false;
  auto asked = send(port(), "POST", "/v1/completions", {}, no.dump());
  ASSERT_TRUE(asked);
  const json asked_tokens = json::parse(asked->body)["choices"][0]["logprobs"]["tokens"];
  ASSERT_FALSE(asked_tokens.empty());
  for (const auto& t : asked_tokens) {
    EXPECT_NE(t.get<std::string>().rfind("token_id:", 0), 0u) << t;
  }
}

TEST_F(ServerVllmFlagsTest, TokenizerInfoIsServedWithItsFlag) {
  auto r = send(port(), "GET", "/tokenizer_info", {});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_TRUE(json::parse(r->body).contains("chat_template"));
}

// The same server without the flags: vLLM's defaults.
class ServerVllmDefaultsTest : public TinyChatServerTest<ServerVllmDefaultsTest> {
 public:
  static std::vector<std::string> server_flags() {
    return {"--max-model-len", "256", "--kv-cache-memory-bytes", "32M"};
  }
  static int port() { return server_->port(); }
};

TEST_F(ServerVllmDefaultsTest, AnyOriginNoRequestIdNoTokenizerInfoNoCachedTokens) {
  auto simple = send(port(), "GET", "/v1/models", {{"Origin", "https://any.example"}});
  ASSERT_TRUE(simple);
  EXPECT_EQ(simple->get_header_value("Access-Control-Allow-Origin"), "*");
  EXPECT_FALSE(simple->has_header("Access-Control-Allow-Credentials"));
  EXPECT_FALSE(simple->has_header("X-Request-Id"));
  auto no_origin = send(port(), "GET", "/v1/models", {});
  ASSERT_TRUE(no_origin);
  EXPECT_FALSE(no_origin->has_header("Access-Control-Allow-Origin"));

  auto preflight = send(port(), "OPTIONS", "/v1/completions",
                        {{"Origin", "https://any.example"},
                         {"Access-Control-Request-Method", "POST"},
                         {"Access-Control-Request-Headers", "x-anything"}});
  ASSERT_TRUE(preflight);
  EXPECT_EQ(preflight->status, 200);
  EXPECT_EQ(preflight->get_header_value("Access-Control-Allow-Origin"), "*");
  EXPECT_EQ(preflight->get_header_value("Access-Control-Allow-Methods"),
            "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT");
  EXPECT_EQ(preflight->get_header_value("Access-Control-Allow-Headers"), "x-anything");
  EXPECT_FALSE(preflight->has_header("Vary"));

  auto info = send(port(), "GET", "/tokenizer_info", {});
  ASSERT_TRUE(info);
  EXPECT_EQ(info->status, 404);

  std::string prompt;
  for (int i = 0; i < 40; ++i) prompt += "word" + std::to_string(i) + " ";
  const json body = {{"prompt", prompt}, {"max_tokens", 1}};
  send(port(), "POST", "/v1/completions", {}, body.dump());
  auto again = send(port(), "POST", "/v1/completions", {}, body.dump());
  ASSERT_TRUE(again);
  EXPECT_TRUE(json::parse(again->body)["usage"]["prompt_tokens_details"].is_null()) << again->body;
  const json logprobs = {{"prompt", "hi"}, {"max_tokens", 1}, {"logprobs", 1}};
  auto lp = send(port(), "POST", "/v1/completions", {}, logprobs.dump());
  ASSERT_TRUE(lp);
  const std::string token =
      json::parse(lp->body)["choices"][0]["logprobs"]["tokens"][0].get<std::string>();
  EXPECT_NE(token.rfind("token_id:", 0), 0u) << token;
}

}  // namespace
}  // namespace gemmaserve::testing
