// Hostile requests: huge n, best_of, logprobs, stop and bad_words lists, deeply nested JSON,
// request chat templates that loop or recurse without end. Each is a 4xx with its exact message
// (or a bounded cost), checked at the protocol parser and, for a few, through the real server,
// which stays healthy afterwards.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "engine/structured/compiled_grammar.h"
#include "server/openai/openai_protocol.h"
#include "server/shared/api_error.h"
#include "server/shared/chat_message_normalizer.h"
#include "server_test_support.h"
#include "test_support.h"

namespace gemmaserve::testing {
namespace {

using ordered_json = nlohmann::ordered_json;

// The 400's message of parsing a completions (or chat) body, or "" when it parses.
std::string parse_error(const std::string& extra, bool chat = false) {
  const std::string body = chat ? R"({"messages":[{"role":"user","content":"hi"}],)" + extra + "}"
                                : R"({"prompt":"hi",)" + extra + "}";
  try {
    if (chat) {
      parse_chat_request(ordered_json::parse(body), SamplingParams());
    } else {
      parse_completion_request(ordered_json::parse(body), SamplingParams());
    }
  } catch (const ApiError& e) {
    return std::to_string(e.status()) + " " + e.what();
  }
  return "";
}

std::string strings(int n, const std::string& prefix) {
  std::string out = "[";
  for (int i = 0; i < n; ++i) out += (i ? ",\"" : "\"") + prefix + std::to_string(i) + "\"";
  return out + "]";
}

TEST(HostileRequestFields, HugeNAndBestOf) {
  EXPECT_EQ(parse_error(R"("n":1000000000)"), "400 n must be at most 128, got 1000000000.");
  EXPECT_EQ(parse_error(R"("n":99999999999999)"), "400 n: 99999999999999 is too large");
  EXPECT_EQ(parse_error(R"("best_of":1000000)"),
            "501 best_of > n is not supported (vLLM V1 dropped it).");
  EXPECT_EQ(parse_error(R"("n":128,"best_of":128)"), "");
  // Prompts x n is capped too: a 4097-sequence batch is refused before any work.
  EXPECT_EQ(
      parse_error(
          R"("prompt":["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q","r","s","t","u","v","w","x","y","z","A","B","C","D","E","F","G"],"n":128)"),
      "400 A request may start at most 4096 sequences (prompts x n); split the batch.");
}

TEST(HostileRequestFields, StopAndBadWordsLists) {
  EXPECT_EQ(parse_error(R"("stop":)" + strings(4, "s")), "");
  EXPECT_EQ(parse_error(R"("stop":)" + strings(5, "s")),
            "400 stop: List should have at most 4 items after validation, not 5");
  EXPECT_EQ(parse_error(R"("stop":)" + strings(100000, "s"), true),
            "400 stop: List should have at most 4 items after validation, not 100000");
  EXPECT_EQ(parse_error(R"("bad_words":)" + strings(128, "w")), "");
  EXPECT_EQ(parse_error(R"("bad_words":)" + strings(129, "w")),
            "400 Too many bad words: 129. The max number is 128.");
}

TEST(HostileRequestFields, LogprobsAreRangeCheckedHere) {
  // The upper bound is --max-logprobs, checked when the request is submitted (the server test
  // below); the parser refuses what no server setting allows.
  EXPECT_EQ(parse_error(R"("logprobs":-2)"), "400 `logprobs` must be a positive value or -1.");
  EXPECT_EQ(parse_error(R"("prompt_logprobs":-5)"),
            "400 `prompt_logprobs` must be a positive value or -1.");
  EXPECT_EQ(parse_error(R"("logprobs":true,"top_logprobs":-7)", true),
            "400 `top_logprobs` must be a positive value or -1.");
  EXPECT_EQ(parse_error(R"("logprobs":99999999999)"), "400 logprobs: 99999999999 is too large");
}

// JSON held in strings (a schema, tool-call arguments) is parsed by the same ordered_json: its
// objects are limited as a body's are, so a string cannot bring back the n^2 parse.
TEST(HostileRequestFields, WideObjectsInsideStringsAreRefused) {
  std::string wide = "{";
  for (int i = 0; i < 20000; ++i) wide += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":1";
  wide += "}";
  auto error = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(error([&] { structured::build_grammar("json", wide); }),
            "the JSON schema has an object with more than 10000 members");
  const ordered_json messages = {
      {{"role", "assistant"},
       {"tool_calls",
        {{{"type", "function"}, {"function", {{"name", "f"}, {"arguments", wide}}}}}}}};
  EXPECT_EQ(error([&] { normalize_chat_messages(messages, ChatContentFormat::kOpenAi); }),
            "tool call arguments have an object with more than 10000 members");
  // Under the cap one by one, too costly together: five objects of 10,000 members.
  std::string fair = "{";
  for (int i = 0; i < 10000; ++i) fair += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":1";
  fair += "}";
  const std::string five = "[" + fair + "," + fair + "," + fair + "," + fair + "," + fair + "]";
  EXPECT_EQ(error([&] { structured::build_grammar("json", five); }),
            "the JSON schema has objects this large in all (parsing their 249975000 key "
            "comparisons exceeds 200000000)");
  ordered_json many = messages;
  many[0]["tool_calls"][0]["function"]["arguments"] = five;
  EXPECT_EQ(error([&] { normalize_chat_messages(many, ChatContentFormat::kOpenAi); }),
            "tool call arguments have objects this large in all (parsing their 249975000 key "
            "comparisons exceeds 200000000)");
}

class HostileRequestServerTest : public TinyChatServerTest<HostileRequestServerTest> {
 public:
  static std::vector<std::string> server_flags() {
    return {"--served-model-name",
            "gemma4",
            "--max-model-len",
            "256",
            "--kv-cache-memory-bytes",
            "64M",
            "--trust-request-chat-template"};
  }

 protected:
  // Posts `body` and returns "STATUS message" of the error (or "STATUS" for a success).
  static std::string post(const std::string& path, const std::string& body) {
    httplib::Client c("127.0.0.1", server_->port());
    c.set_read_timeout(300, 0);
    auto r = c.Post(path.c_str(), body, "application/json");
    if (!r) return "no response";
    const auto j = nlohmann::json::parse(r->body, nullptr, false);
    if (r->status == 200) return "200";
    if (!j.is_object() || !j.contains("error")) return std::to_string(r->status) + " " + r->body;
    return std::to_string(r->status) + " " + j["error"]["message"].get<std::string>();
  }
  static std::string chat_with_template(const std::string& tmpl) {
    nlohmann::json body = {{"model", "gemma4"},
                           {"messages", {{{"role", "user"}, {"content", "hi"}}}},
                           {"max_tokens", 2},
                           {"chat_template", tmpl}};
    return post("/v1/chat/completions", body.dump());
  }
  void TearDown() override {
    httplib::Client c("127.0.0.1", server_->port());
    auto health = c.Get("/health");
    ASSERT_TRUE(health && health->status == 200) << "server unhealthy afterwards";
  }
};

TEST_F(HostileRequestServerTest, TemplatesThatNeverEndAre400s) {
  EXPECT_EQ(chat_with_template("{% for x in [1] recursive %}{{ loop([1]) }}{% endfor %}"),
            "400 request chat_template:1: maximum recursion depth exceeded in a recursive loop");
  EXPECT_EQ(chat_with_template("{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}"),
            "400 request chat_template:1: maximum recursion depth exceeded in macro 'm'");
  EXPECT_EQ(
      chat_with_template("{{ " + std::string(3000, '(') + "1" + std::string(3000, ')') + " }}"),
      "400 request chat_template:1: the template nests deeper than 128 levels");
  EXPECT_EQ(chat_with_template("{% set ns = namespace(s='xxxxxxxx') %}{% for i in range(64) %}"
                               "{% set ns.s = ns.s ~ ns.s %}{% endfor %}"),
            "400 request chat_template:1: a string or list in the template would exceed 67108864 "
            "bytes");
}

TEST_F(HostileRequestServerTest, HugeListsAndCountsAre400s) {
  const std::string base = R"({"model":"gemma4","prompt":"hi","max_tokens":2,)";
  EXPECT_EQ(post("/v1/completions", base + R"("stop":)" + strings(50, "s") + "}"),
            "400 stop: List should have at most 4 items after validation, not 50");
  EXPECT_EQ(post("/v1/completions", base + R"("n":100000})"),
            "400 n must be at most 128, got 100000.");
  EXPECT_EQ(post("/v1/completions", base + R"("logprobs":100000})"),
            "400 Requested sample logprobs of 100000, which is greater than max allowed: 20");
  EXPECT_EQ(post("/v1/completions", base + R"("prompt_logprobs":100000})"),
            "400 Requested prompt logprobs of 100000, which is greater than max allowed: 20");
  EXPECT_EQ(post("/v1/completions", std::string(100000, '[') + std::string(100000, ']')),
            "400 JSON nesting deeper than 128 levels is not accepted");
  // logit_bias: past 10000 entries the body is refused before parsing (ordered_json parses an
  // object in n^2 time); up to it, one bias per token and step (a bounded cost).
  auto bias = [](int n) {
    std::string b = "{";
    for (int i = 0; i < n; ++i) b += (i ? ",\"" : "\"") + std::to_string(i) + "\":1";
    return b + "}";
  };
  EXPECT_EQ(post("/v1/completions", base + R"("logit_bias":)" + bias(300000) + "}"),
            "400 JSON objects with more than 10000 members are not accepted");
  EXPECT_EQ(post("/v1/completions", base + R"("logit_bias":)" + bias(10000) + "}"), "200");
}

}  // namespace
}  // namespace gemmaserve::testing
