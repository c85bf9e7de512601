// tool_choice "required" / a named function as a Gemma 4 tool-call grammar: which texts it takes
// (the value syntax, the schema, marker-free strings), masks on a small vocabulary equal to the
// brute-force ones, and sampled calls that the tool parser turns into schema-valid JSON
// arguments over many seeds.
#include <gtest/gtest.h>

#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/json_object_grammar.h"
#include "engine/request_sampler.h"
#include "engine/structured/compiled_grammar.h"
#include "engine/structured/grammar_matcher.h"
#include "server/shared/gemma4_tool_parser.h"
#include "server/shared/special_token_text.h"
#include "structured_test_support.h"
#include "test_support.h"
#include "tokenizer/tokenizer.h"

namespace gemmaserve::structured {
namespace {

using json = nlohmann::ordered_json;
using Ids = std::vector<int32_t>;

const json kWeather = json::parse(R"({
  "type": "object",
  "properties": {
    "unit": {"enum": ["c", "f"]},
    "city": {"type": "string"},
    "days": {"type": "integer", "minimum": 1, "maximum": 14},
    "Flags": {"type": "array", "items": {"type": "boolean"}, "maxItems": 2},
    "where": {"type": "object", "properties": {"lat": {"type": "number"}}, "required": ["lat"]},
    "note": {"type": "string", "maxLength": 3}
  },
  "required": ["city", "unit"]
})");

json markers() {
  json m = json::array();
  for (std::string_view t : gemma4_marker_texts()) m.push_back(std::string(t));
  return m;
}

// The spec the server builds: `calls` "one" (a named function) or "one_or_more" ("required");
// with `tokens` the markers are vocabulary()'s tokens, else text.
std::string spec(const std::string& calls, bool tokens = false) {
  json tools = json::array({{{"name", "get_weather"}, {"parameters", kWeather}},
                            {{"name", "get_time"}, {"parameters", nullptr}}});
  json s = {{"tools", tools}, {"calls", calls}, {"markers", markers()}};
  if (tokens) s["marker_tokens"] = {{"<|tool_call>", 2}, {"<tool_call|>", 3}, {"<|\"|>", 4}};
  return s.dump();
}

std::string error_of(const json& tools) {
  try {
    build_grammar("gemma4_tool_call", json{{"tools", tools}, {"calls", "one"}}.dump());
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

const std::string kQ = "<|\"|>";
std::string call(const std::string& name, const std::string& args) {
  return "<|tool_call>call:" + name + args + "<tool_call|>";
}

TEST(Gemma4ToolCallGrammar, TakesCallsAsTheTemplateWritesThem) {
  const Grammar one = build_grammar("gemma4_tool_call", spec("one"));
  const std::string paris =
      call("get_weather", "{city:" + kQ + "Paris" + kQ + ",unit:" + kQ + "c" + kQ + "}");
  EXPECT_TRUE(matches(one, paris));
  // Keys in dictsort order (case-insensitive), every type spelled as format_argument does.
  EXPECT_TRUE(
      matches(one, call("get_weather", "{city:" + kQ + "a<b, \"c\"\n" + kQ +
                                           ",days:14,Flags:[true,false],note:" + kQ + "abc" + kQ +
                                           ",unit:" + kQ + "f" + kQ + ",where:{lat:-1.5e+30}}")));
  EXPECT_TRUE(matches(one, call("get_time", "{}")));
  for (const std::string& bad : {
           call("get_weather", "{unit:" + kQ + "c" + kQ + ",city:" + kQ + "P" + kQ + "}"),  // order
           call("get_weather", "{city:" + kQ + "P" + kQ + "}"),             // unit required
           call("get_weather", "{city:\"P\",unit:" + kQ + "c" + kQ + "}"),  // JSON string
           call("get_weather",
                "{city: " + kQ + "P" + kQ + ",unit:" + kQ + "c" + kQ + "}"),  // space
           call("get_weather",
                "{city:" + kQ + "P" + kQ + ",days:15,unit:" + kQ + "c" + kQ + "}"),  // maximum
           call("get_weather", "{city:" + kQ + "<|tool_call>" + kQ + ",unit:" + kQ + "c" + kQ +
                                   "}"),  // a marker inside a string
           call("get_weather",
                "{city:" + kQ + "P" + kQ + ",note:" + kQ + "abcd" + kQ + ",unit:" + kQ + "c" + kQ +
                    "}"),  // maxLength
           call("get_weather",
                "{city:" + kQ + "P" + kQ + ",unit:" + kQ + "c" + kQ + ",where:{lat:1e999}}"),
           call("get_time", "{x:1}"),  // no parameters: no arguments
           paris + paris,              // a named function: exactly one call
           std::string("call:get_time{}"),
       }) {
    EXPECT_FALSE(matches(one, bad)) << bad;
  }
  const Grammar required = build_grammar("gemma4_tool_call", spec("one_or_more"));
  EXPECT_TRUE(matches(required, paris + call("get_time", "{}") + paris));
  EXPECT_FALSE(matches(required, ""));
  EXPECT_FALSE(matches(required, call("get_date", "{}")));
  // Without markers to avoid, any text goes between the delimiters.
  const Grammar plain = build_grammar(
      "gemma4_tool_call",
      json{{"tools",
            json::array({{{"name", "f"},
                          {"parameters",
                           {{"type", "object"}, {"properties", {{"s", {{"type", "string"}}}}}}}}})}}
          .dump());
  EXPECT_TRUE(matches(plain, call("f", "{s:" + kQ + "a<b<|tool_call>" + kQ + "}")));
}

TEST(Gemma4ToolCallGrammar, RefusalsNameTheProblem) {
  EXPECT_EQ(error_of(json::array({{{"name", "get weather"}}})),
            "tool name 'get weather' cannot be written in a Gemma 4 tool call (letters, digits, "
            "'_', '.', '-', at most 200 bytes)");
  EXPECT_EQ(error_of(json::array({{{"name", "f"}, {"parameters", {{"type", "string"}}}}})),
            "tool 'f': parameters must be a JSON Schema of type object");
  EXPECT_EQ(
      error_of(json::array(
          {{{"name", "f"},
            {"parameters", {{"type", "object"}, {"properties", {{"x", {{"format", "uri"}}}}}}}}})),
      "unsupported JSON Schema format 'uri' (supported: date, date-time, email, ipv4, time, "
      "uuid)");
  try {
    build_grammar(
        "gemma4_tool_call",
        json{{"tools", json::array({{{"name", "f"},
                                     {"parameters",
                                      {{"type", "object"},
                                       {"properties", {{"x", {{"const", "<|\"|>"}}}}}}}}})},
             {"markers", markers()}}
            .dump());
    ADD_FAILURE() << "a marker in a const was taken";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "a Gemma 4 tool argument cannot hold the marker text in '<|\"|>'");
  }
}

Tokenizer vocabulary() {
  return testing::pieces_tokenizer({"<bos>",
                                    "<eos>",
                                    "<|tool_call>",
                                    "<tool_call|>",
                                    "<|\"|>",
                                    "call:",
                                    "get_time",
                                    "get_weather",
                                    "{",
                                    "}",
                                    ":",
                                    ",",
                                    "city",
                                    "unit",
                                    "<",
                                    "<|",
                                    "|>",
                                    "\"",
                                    "a",
                                    "1",
                                    "12",
                                    "true",
                                    "[",
                                    "]",
                                    "<|tool_response>",
                                    "Paris",
                                    ".",
                                    "{}",
                                    "where:{lat:",
                                    "c",
                                    "f"},
                                   2);
}

TEST(Gemma4ToolCallGrammar, MasksAreExactlyTheTokensSomeCallContinuesWith) {
  const Tokenizer tok = vocabulary();
  const JsonTokenTrie trie(tok);
  const int vocab = static_cast<int>(tok.vocab_size());
  const CompiledGrammar cg(build_grammar("gemma4_tool_call", spec("one_or_more", true)));
  // The grammar reads each marker token as its private byte.
  auto privately = [&](std::string text) {
    for (const auto& [id, byte] : cg.grammar().private_tokens()) {
      const std::string marker = trie.bytes(id);
      for (size_t at; (at = text.find(marker)) != std::string::npos;)
        text.replace(at, marker.size(), byte);
    }
    return text;
  };
  GrammarMatcher m(cg.grammar());
  const std::vector<std::string> prefixes = {
      "",
      "<|tool_call>",
      "<|tool_call>call:get_",
      "<|tool_call>call:get_weather{",
      "<|tool_call>call:get_weather{city:<|\"|>",
      "<|tool_call>call:get_weather{city:<|\"|>a<",
      "<|tool_call>call:get_weather{city:<|\"|>a<|",
      "<|tool_call>call:get_weather{city:<|\"|>a<|\"|",
      "<|tool_call>call:get_weather{city:<|\"|>a<|\"|>",
      "<|tool_call>call:get_weather{city:<|\"|>a<|\"|>,days:1",
      "<|tool_call>call:get_weather{city:<|\"|>a<|\"|>,Flags:[",
      "<|tool_call>call:get_weather{city:<|\"|>a<|\"|>,unit:<|\"|>",
      "<|tool_call>call:get_weather{city:<|\"|>a<|\"|>,unit:<|\"|>c<|\"|>,where:{lat:1",
      "<|tool_call>call:get_time{}<tool_call|>",
  };
  for (int round = 0; round < 2; ++round) {  // the second round reuses the cached masks
    for (const std::string& prefix : prefixes) {
      GrammarState s = m.initial();
      ASSERT_TRUE(m.feed(&s, privately(prefix))) << prefix;
      const auto bits = cg.allowed(trie, vocab, s, &m);
      EXPECT_EQ(mask_ids(*bits, vocab), brute_force(cg.grammar(), trie, vocab, s)) << prefix;
    }
  }
  // By hand: inside a string after "a<|", '"' may only go on as the closing delimiter, and the
  // whole delimiter token closes it; the start takes the call marker (and its spelling).
  GrammarState s = m.initial();
  ASSERT_TRUE(m.feed(&s, privately("<|tool_call>call:get_weather{city:<|\"|>a")));
  const auto bits = cg.allowed(trie, vocab, s, &m);
  auto allowed = [&](int32_t id) { return (*bits)[static_cast<size_t>(id) / 64] >> (id % 64) & 1; };
  EXPECT_TRUE(allowed(4));    // <|"|>
  EXPECT_TRUE(allowed(25));   // Paris
  EXPECT_FALSE(allowed(2));   // <|tool_call> inside a string
  EXPECT_FALSE(allowed(24));  // <|tool_response>
  // After an enum's text only the delimiter token may close it, never "<" or "<|" spelling it.
  GrammarState enum_end = m.initial();
  ASSERT_TRUE(
      m.feed(&enum_end, privately("<|tool_call>call:get_weather{city:<|\"|>a<|\"|>,unit:<|\"|>c")));
  EXPECT_EQ(mask_ids(*cg.allowed(trie, vocab, enum_end, &m), vocab), (Ids{4}));
  // A call opens with the marker token only.
  GrammarState first = m.initial();
  EXPECT_EQ(mask_ids(*cg.allowed(trie, vocab, first, &m), vocab), (Ids{2}));
}

// Delimiters and closers are made likely so strings and objects end.
std::vector<std::string> sample_calls(const std::string& calls, int seeds) {
  return sample_answers(vocabulary(), "gemma4_tool_call", spec(calls, true), seeds,
                        {1, 3, 4, 9, 27}, 4.0f, 600);
}

// A hand check of kWeather's arguments (no validator library).
void expect_weather_arguments(const json& a, const std::string& text) {
  ASSERT_TRUE(a.is_object()) << text;
  ASSERT_TRUE(a.contains("city") && a["city"].is_string()) << text;
  ASSERT_TRUE(a["unit"] == "c" || a["unit"] == "f") << text;
  if (a.contains("days")) {
    ASSERT_TRUE(a["days"].is_number_integer()) << text;
    EXPECT_GE(a["days"].get<int>(), 1) << text;
    EXPECT_LE(a["days"].get<int>(), 14) << text;
  }
  if (a.contains("Flags")) {
    ASSERT_TRUE(a["Flags"].is_array()) << text;
    EXPECT_LE(a["Flags"].size(), 2u) << text;
    for (const json& f : a["Flags"]) EXPECT_TRUE(f.is_boolean()) << text;
  }
  if (a.contains("where")) {
    ASSERT_TRUE(a["where"].is_object()) << text;
    EXPECT_TRUE(a["where"]["lat"].is_number()) << text;
    EXPECT_EQ(a["where"].size(), 1u) << text;
  }
  if (a.contains("note")) {
    ASSERT_TRUE(a["note"].is_string()) << text;
    EXPECT_LE(a["note"].get<std::string>().size(), 3u * 4) << text;
  }
  for (const auto& [k, _] : a.items()) EXPECT_TRUE(kWeather["properties"].contains(k)) << text;
}

void expect_parsed_calls(const std::string& text, bool exactly_one) {
  const ToolParseResult r = extract_gemma4_tool_calls(text, [] { return std::string("id"); });
  ASSERT_FALSE(r.tool_calls.empty()) << text;
  if (exactly_one) {
    EXPECT_EQ(r.tool_calls.size(), 1u) << text;
  }
  EXPECT_FALSE(r.content.has_value()) << text;
  for (const ToolCall& c : r.tool_calls) {
    EXPECT_TRUE(c.complete) << text;
    const json a = json::parse(c.arguments, nullptr, false);
    ASSERT_FALSE(a.is_discarded()) << c.arguments;
    if (c.name == "get_time") {
      EXPECT_EQ(a, json::object()) << text;
    } else {
      ASSERT_EQ(c.name, "get_weather") << text;
      expect_weather_arguments(a, text);
    }
  }
}

TEST(Gemma4ToolCallGrammar, EverySampledCallParsesIntoSchemaValidArguments) {
  for (const std::string& text : sample_calls("one", 60)) expect_parsed_calls(text, true);
  for (const std::string& text : sample_calls("one_or_more", 60)) expect_parsed_calls(text, false);
}

}  // namespace
}  // namespace gemmaserve::structured
