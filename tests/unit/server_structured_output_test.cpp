// Structured outputs end to end: the tiny random-weight Gemma 4 model with the real vocabulary,
// served; every request field (response_format json_schema, structured_outputs, guided_*) forces
// an answer that parses and validates, over several seeds, on completions and chat.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>

#include "server_test_support.h"
#include "test_support.h"

namespace gemmaserve::testing {
namespace {

using nlohmann::json;

class ServerStructuredOutputTest : public TinyChatServerTest<ServerStructuredOutputTest> {
 public:
  static std::vector<std::string> server_flags() {
    return {"--served-model-name",     "m",  "--max-model-len", "1024",
            "--kv-cache-memory-bytes", "64M"};
  }

 protected:
  static json post(const std::string& path, const json& body) {
    httplib::Client c("127.0.0.1", server_->port());
    c.set_read_timeout(300, 0);
    auto r = c.Post(path.c_str(), body.dump(), "application/json");
    EXPECT_TRUE(r);
    if (!r) return json();
    EXPECT_EQ(r->status, 200) << r->body;
    return json::parse(r->body);
  }
  // The answer text of a completion (path "/v1/completions") or chat request.
  static std::string answer(const json& extra, int seed, bool chat) {
    json body = {{"model", "m"}, {"max_tokens", 400}, {"seed", seed}, {"temperature", 1.0}};
    if (chat) {
      body["messages"] = json::array({{{"role", "user"}, {"content", "Answer."}}});
      body["chat_template_kwargs"] = {{"enable_thinking", false}};
    } else {
      body["prompt"] = "Answer:";
    }
    body.update(extra);
    const json r = post(chat ? "/v1/chat/completions" : "/v1/completions", body);
    if (r.is_null()) return "";
    const json& choice = r["choices"][0];
    EXPECT_EQ(choice["finish_reason"], "stop") << r.dump();
    return chat ? choice["message"]["content"].get<std::string>()
                : choice["text"].get<std::string>();
  }
};

const json kSchema = json::parse(R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "maxLength": 6},
    "age": {"type": "integer"},
    "role": {"enum": ["admin", "user"]},
    "tags": {"type": "array", "items": {"type": "boolean"}, "maxItems": 2}
  },
  "required": ["name", "role"]
})");

// A hand check of kSchema (no validator library): the keys in order, each value's type.
void expect_valid(const std::string& text) {
  const json v = json::parse(text, nullptr, false);
  ASSERT_FALSE(v.is_discarded()) << text;
  ASSERT_TRUE(v.is_object()) << text;
  ASSERT_TRUE(v.contains("name") && v["name"].is_string()) << text;
  EXPECT_LE(v["name"].get<std::string>().size(), 6u * 4) << text;  // 6 characters
  ASSERT_TRUE(v["role"] == "admin" || v["role"] == "user") << text;
  if (v.contains("age")) {
    EXPECT_TRUE(v["age"].is_number_integer()) << text;
  }
  if (v.contains("tags")) {
    ASSERT_TRUE(v["tags"].is_array()) << text;
    EXPECT_LE(v["tags"].size(), 2u);
    for (const auto& t : v["tags"]) EXPECT_TRUE(t.is_boolean()) << text;
  }
  for (const auto& [k, _] : v.items()) {
    EXPECT_TRUE(k == "name" || k == "age" || k == "role" || k == "tags") << text;
  }
}

TEST_F(ServerStructuredOutputTest, JsonSchemaOnChatAndCompletions) {
  const json rf = {
      {"response_format",
       {{"type", "json_schema"},
        {"json_schema", {{"name", "person"}, {"schema", kSchema}, {"strict", true}}}}}};
  for (int seed = 0; seed < 4; ++seed) {
    SCOPED_TRACE(seed);
    expect_valid(answer(rf, seed, /*chat=*/true));
    expect_valid(answer({{"structured_outputs", {{"json", kSchema}}}}, seed, false));
    expect_valid(answer({{"guided_json", kSchema.dump()}}, seed, false));
  }
}

TEST_F(ServerStructuredOutputTest, WhitespaceOptions) {
  json schema = kSchema;  // a bounded age: compact answers have room for long numbers
  schema["properties"]["age"]["minimum"] = 0;
  schema["properties"]["age"]["maximum"] = 150;
  for (int seed = 0; seed < 3; ++seed) {
    SCOPED_TRACE(seed);
    for (bool chat : {false, true}) {
      const std::string compact =
          answer({{"structured_outputs", {{"json", schema}, {"disable_any_whitespace", true}}}},
                 seed, chat);
      expect_valid(compact);
      EXPECT_EQ(outside_strings(compact).find_first_of(" \t\n\r"), std::string::npos) << compact;
      const std::string spaced =
          answer({{"guided_json", schema}, {"guided_whitespace_pattern", "\n?"}}, seed, chat);
      expect_valid(spaced);
      EXPECT_EQ(outside_strings(spaced).find_first_of(" \t\r"), std::string::npos) << spaced;
      EXPECT_EQ(outside_strings(spaced).find("\n\n"), std::string::npos) << spaced;
    }
  }
  // Bad options are 400s that say why.
  auto error = [](const json& extra) {
    json body = {{"model", "m"}, {"max_tokens", 4}, {"prompt", "x"}};
    body.update(extra);
    httplib::Client c("127.0.0.1", server_->port());
    auto r = c.Post("/v1/completions", body.dump(), "application/json");
    EXPECT_EQ(r->status, 400) << r->body;
    return json::parse(r->body)["error"]["message"].get<std::string>();
  };
  EXPECT_EQ(error({{"structured_outputs", {{"json", kSchema}, {"whitespace_pattern", "a)"}}}}),
            "whitespace_pattern: invalid regex at position 1: unbalanced ')'");
  EXPECT_EQ(error({{"guided_json", kSchema}, {"guided_whitespace_pattern", "[ a]*"}}),
            "whitespace_pattern '[ a]*' matches more than blank space (space, tab, newline, "
            "carriage return)");
  EXPECT_EQ(error({{"structured_outputs", {{"json", kSchema}, {"disable_any_whitespace", "yes"}}}}),
            "structured_outputs.disable_any_whitespace: Input should be a valid boolean");
  EXPECT_EQ(error({{"guided_json", kSchema}, {"guided_whitespace_pattern", 3}}),
            "guided_whitespace_pattern: Input should be a valid string");
}

TEST_F(ServerStructuredOutputTest, RegexChoiceAndGrammar) {
  const std::regex date(R"([0-9]{4}-[01][0-9]-[0-3][0-9])");
  const std::string ebnf = "root ::= \"(\" item (\",\" item)* \")\"\nitem ::= [a-z] | [0-9]";
  const std::regex list(R"(\([a-z0-9](,[a-z0-9])*\))");
  for (int seed = 0; seed < 3; ++seed) {
    SCOPED_TRACE(seed);
    for (bool chat : {false, true}) {
      const std::string d = answer(
          {{"structured_outputs", {{"regex", "[0-9]{4}-[01][0-9]-[0-3][0-9]"}}}}, seed, chat);
      EXPECT_TRUE(std::regex_match(d, date)) << d;
      const std::string c = answer({{"guided_choice", {"red", "green", "blue"}}}, seed, chat);
      EXPECT_TRUE(c == "red" || c == "green" || c == "blue") << c;
      const std::string g = answer({{"guided_grammar", ebnf}}, seed, chat);
      EXPECT_TRUE(std::regex_match(g, list)) << g;
    }
  }
}

TEST_F(ServerStructuredOutputTest, ThinkingChatAnswersAfterTheThoughtChannel) {
  json extra = {{"structured_outputs", {{"choice", {"yes", "no"}}}}};
  for (int seed = 0; seed < 3; ++seed) {
    json body = {{"model", "m"},
                 {"max_tokens", 200},
                 {"seed", seed},
                 {"messages", json::array({{{"role", "user"}, {"content", "Yes?"}}})},
                 {"chat_template_kwargs", {{"enable_thinking", true}}}};
    body.update(extra);
    const json r = post("/v1/chat/completions", body);
    const json& m = r["choices"][0]["message"];
    // Thinking is free; once the channel closes (or never opens) the answer is a choice.
    if (r["choices"][0]["finish_reason"] == "stop") {
      const std::string content = m["content"].get<std::string>();
      EXPECT_TRUE(content == "yes" || content == "no") << r.dump();
    }
  }
}

// A 2 MiB --structured-outputs-cache-gb: requests with many distinct schemas leave the live cache
// within it, and /metrics shows its size.
class ServerStructuredCacheTest : public TinyChatServerTest<ServerStructuredCacheTest> {
 public:
  static std::vector<std::string> server_flags() {
    return {"--served-model-name",
            "m",
            "--max-model-len",
            "1024",
            "--kv-cache-memory-bytes",
            "64M",
            "--structured-outputs-cache-gb",
            "0.001953125"};
  }
};

TEST_F(ServerStructuredCacheTest, DistinctSchemasStayWithinTheFlagAndShowInMetrics) {
  constexpr double kBudget = 2 * 1024 * 1024;
  httplib::Client c("127.0.0.1", server_->port());
  c.set_read_timeout(300, 0);
  const std::regex gauge(
      R"(\ngemmaserve:structured_output_cache_bytes\{engine="0",model_name="m"\} ([0-9.e+]+)\n)");
  double peak = 0;
  for (int i = 0; i < 8; ++i) {
    json schema = {{"type", "object"}, {"properties", json::object()}, {"required", json::array()}};
    for (int k = 0; k < 3; ++k) {
      const std::string key = "field" + std::to_string(i) + "_" + std::to_string(k);
      schema["properties"][key] = {{"type", "string"}, {"maxLength", 4}};
      schema["required"].push_back(key);
    }
    const json body = {
        {"model", "m"},
        {"prompt", "Answer:"},
        {"max_tokens", 40},
        {"seed", i},
        {"response_format",
         {{"type", "json_schema"}, {"json_schema", {{"name", "s"}, {"schema", schema}}}}}};
    auto r = c.Post("/v1/completions", body.dump(), "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    auto m = c.Get("/metrics");
    ASSERT_TRUE(m);
    std::smatch match;
    ASSERT_TRUE(std::regex_search(m->body, match, gauge)) << m->body;
    const double bytes = std::stod(match[1].str());
    EXPECT_GT(bytes, 0) << i;
    EXPECT_LE(bytes, kBudget) << i;
    peak = std::max(peak, bytes);
  }
  EXPECT_GT(peak, kBudget / 2);  // the schemas filled it: the bound, not their size, held it
}

}  // namespace
}  // namespace gemmaserve::testing
