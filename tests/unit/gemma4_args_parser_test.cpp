// Gemma 4 tool-argument syntax to JSON: value kinds, Python-compatible number and string output,
// nesting, leniency, and incremental conversion.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "server/shared/gemma4_value_syntax.h"

namespace gemmaserve {
namespace {

const std::string Q = "<|\"|>";  // Gemma's string delimiter token text

std::string args(const std::string& text) { return gemma4_args_to_json(text); }

TEST(Gemma4BareValue, BooleansAndNull) {
  EXPECT_EQ(gemma4_bare_value_to_json("true"), "true");
  EXPECT_EQ(gemma4_bare_value_to_json("false"), "false");
  // vLLM is case-sensitive for booleans but not for null/none/nil; Jinja prints None as "None".
  EXPECT_EQ(gemma4_bare_value_to_json("True"), "\"True\"");
  EXPECT_EQ(gemma4_bare_value_to_json("null"), "null");
  EXPECT_EQ(gemma4_bare_value_to_json("None"), "null");
  EXPECT_EQ(gemma4_bare_value_to_json("NIL"), "null");
  EXPECT_EQ(gemma4_bare_value_to_json("  null \n"), "null");
}

TEST(Gemma4BareValue, IntegersFollowPythonInt) {
  EXPECT_EQ(gemma4_bare_value_to_json("42"), "42");
  EXPECT_EQ(gemma4_bare_value_to_json("-7"), "-7");
  EXPECT_EQ(gemma4_bare_value_to_json("+5"), "5");
  EXPECT_EQ(gemma4_bare_value_to_json("007"), "7");
  EXPECT_EQ(gemma4_bare_value_to_json("-0"), "0");
  EXPECT_EQ(gemma4_bare_value_to_json("1_000_000"), "1000000");
  EXPECT_EQ(gemma4_bare_value_to_json("123456789012345678901234567890"),
            "123456789012345678901234567890");
  EXPECT_EQ(gemma4_bare_value_to_json("1__0"), "\"1__0\"");
  EXPECT_EQ(gemma4_bare_value_to_json("_1"), "\"_1\"");
  EXPECT_EQ(gemma4_bare_value_to_json("0x1F"), "\"0x1F\"");
  EXPECT_EQ(gemma4_bare_value_to_json("--1"), "\"--1\"");
}

TEST(Gemma4BareValue, FloatsPrintLikePythonRepr) {
  EXPECT_EQ(gemma4_bare_value_to_json("3.14"), "3.14");
  EXPECT_EQ(gemma4_bare_value_to_json("-2.50"), "-2.5");
  EXPECT_EQ(gemma4_bare_value_to_json("100.0"), "100.0");
  EXPECT_EQ(gemma4_bare_value_to_json("1."), "1.0");
  EXPECT_EQ(gemma4_bare_value_to_json(".5"), "0.5");
  EXPECT_EQ(gemma4_bare_value_to_json("-0.0"), "-0.0");
  EXPECT_EQ(gemma4_bare_value_to_json("1.5e3"), "1500.0");
  EXPECT_EQ(gemma4_bare_value_to_json("1.5E-7"), "1.5e-07");
  EXPECT_EQ(gemma4_bare_value_to_json("1_0.2_5"), "10.25");
  // Exponent without '.': what Python prints for small/large floats; vLLM keeps these as text.
  EXPECT_EQ(gemma4_bare_value_to_json("1e-05"), "1e-05");
  EXPECT_EQ(gemma4_bare_value_to_json("1e+16"), "1e+16");
  EXPECT_EQ(gemma4_bare_value_to_json("2E3"), "2000.0");
  EXPECT_EQ(gemma4_bare_value_to_json("1e-400"), "0.0");
  // Not numbers: kept as strings (infinity cannot be written in JSON).
  EXPECT_EQ(gemma4_bare_value_to_json("1e999"), "\"1e999\"");
  EXPECT_EQ(gemma4_bare_value_to_json("1.2.3"), "\"1.2.3\"");
  EXPECT_EQ(gemma4_bare_value_to_json("."), "\".\"");
  EXPECT_EQ(gemma4_bare_value_to_json("1e"), "\"1e\"");
  EXPECT_EQ(gemma4_bare_value_to_json("inf"), "\"inf\"");
  EXPECT_EQ(gemma4_bare_value_to_json("nan"), "\"nan\"");
  EXPECT_EQ(gemma4_bare_value_to_json("1._5"), "\"1._5\"");
}

TEST(Gemma4BareValue, OtherTextBecomesAString) {
  EXPECT_EQ(gemma4_bare_value_to_json("celsius"), "\"celsius\"");
  EXPECT_EQ(gemma4_bare_value_to_json(" two words "), "\"two words\"");
  EXPECT_EQ(gemma4_bare_value_to_json("a\"b"), "\"a\\\"b\"");
}

TEST(PythonFloatRepr, MatchesPython) {
  EXPECT_EQ(python_float_repr(0.1), "0.1");
  EXPECT_EQ(python_float_repr(1e-05), "1e-05");
  EXPECT_EQ(python_float_repr(0.0001), "0.0001");
  EXPECT_EQ(python_float_repr(1e16), "1e+16");
  EXPECT_EQ(python_float_repr(1e15), "1000000000000000.0");
  EXPECT_EQ(python_float_repr(123456789.123), "123456789.123");
  EXPECT_EQ(python_float_repr(1.5e300), "1.5e+300");
  EXPECT_EQ(python_float_repr(-7.25e-10), "-7.25e-10");
  EXPECT_EQ(python_float_repr(5e-324), "5e-324");
  EXPECT_EQ(python_float_repr(3.141592653589793), "3.141592653589793");
  EXPECT_EQ(python_float_repr(2.0), "2.0");
  EXPECT_EQ(python_float_repr(-0.0), "-0.0");
  EXPECT_EQ(python_float_repr(1.7976931348623157e308), "1.7976931348623157e+308");
}

TEST(PythonJsonQuote, EscapesLikeJsonDumps) {
  EXPECT_EQ(python_json_quote("plain"), "\"plain\"");
  EXPECT_EQ(python_json_quote("q\"b\\n\nr\rt\tb\bf\f"), "\"q\\\"b\\\\n\\nr\\rt\\tb\\bf\\f\"");
  EXPECT_EQ(python_json_quote(std::string("\x01\x1f\x7f", 3)), "\"\\u0001\\u001f\x7f\"");
  EXPECT_EQ(python_json_quote("caf\xC3\xA9 \xF0\x9F\x8E\x89 /"),
            "\"caf\xC3\xA9 \xF0\x9F\x8E\x89 /\"");
  // Bytes that are not UTF-8 become U+FFFD so the output is always valid JSON.
  EXPECT_EQ(python_json_quote("a\xFF"
                              "b\xC3"),
            "\"a\xEF\xBF\xBD"
            "b\xEF\xBF\xBD\"");
}

TEST(Gemma4ArgsToJson, EveryValueKind) {
  EXPECT_EQ(args("location:" + Q + "San Francisco" + Q + ",unit:" + Q + "celsius" + Q + "}"),
            R"({"location": "San Francisco", "unit": "celsius"})");
  EXPECT_EQ(
      args("count:42,ratio:-0.5,flag:true,off:false,none:null,exp:1e-05}"),
      R"({"count": 42, "ratio": -0.5, "flag": true, "off": false, "none": null, "exp": 1e-05})");
  EXPECT_EQ(args("}"), "{}");
  EXPECT_EQ(args(""), "{}");
}

TEST(Gemma4ArgsToJson, NestedObjectsAndArrays) {
  EXPECT_EQ(args("nested:{inner:" + Q + "v" + Q + ",deep:{x:1}},items:[" + Q + "a" + Q + "," + Q +
                 "b" + Q + "],m:[[1,2],[]],o:[{a:1},{}],e:{}}"),
            R"({"nested": {"inner": "v", "deep": {"x": 1}}, "items": ["a", "b"], )"
            R"("m": [[1, 2], []], "o": [{"a": 1}, {}], "e": {}})");
}

TEST(Gemma4ArgsToJson, StringsAreVerbatimBetweenDelimiters) {
  // Structural characters, quotes, backslashes and newlines inside <|"|>...<|"|> are text.
  EXPECT_EQ(args("s:" + Q + "a:b,c}d]e{f[" + Q + ",q:" + Q + "say \"hi\" C:\\dir\n" + Q + "}"),
            R"({"s": "a:b,c}d]e{f[", "q": "say \"hi\" C:\\dir\n"})");
  EXPECT_EQ(args("lt:" + Q + "a < b <| |> <|x" + Q + "}"), R"({"lt": "a < b <| |> <|x"})");
  EXPECT_EQ(args("e:" + Q + Q + "}"), R"({"e": ""})");
}

TEST(Gemma4ArgsToJson, WhitespaceAndLeniency) {
  EXPECT_EQ(args(" a : 1 , b :\n" + Q + "x" + Q + " }"), R"({"a": 1, "b": "x"})");
  EXPECT_EQ(args("a:1,,b:2,}"), R"({"a": 1, "b": 2})");                   // stray commas
  EXPECT_EQ(args("a:" + Q + "x" + Q + "b:2}"), R"({"a": "x", "b": 2})");  // missing comma
  EXPECT_EQ(args("list:[1,,2,]}"), R"({"list": [1, 2]})");
  EXPECT_EQ(args(Q + "quoted key" + Q + ":1}"), R"({"quoted key": 1})");
  EXPECT_EQ(args("a:}"), R"({"a": ""})");  // a key without a value
  EXPECT_EQ(args("a:,b:1}"), R"({"a": "", "b": 1})");
  EXPECT_EQ(args("a:1,b}"), R"({"a": 1})");  // a key without ':' is dropped
  EXPECT_EQ(args("a:bare words here}"), R"({"a": "bare words here"})");
  EXPECT_EQ(args("a:1,a:2}"), R"({"a": 1, "a": 2})");
  EXPECT_EQ(args("a:1}garbage"), R"({"a": 1})");
  EXPECT_EQ(args("a:1]}"), R"({"a": 1})");
}

TEST(Gemma4ArgsToJson, FinishClosesWhatIsOpen) {
  EXPECT_EQ(args("a:" + Q + "unterminated"), R"({"a": "unterminated"})");
  EXPECT_EQ(args("a:{b:[1,{c:" + Q + "x"), R"({"a": {"b": [1, {"c": "x"}]}})");
  EXPECT_EQ(args("a:12"), R"({"a": 12})");
  EXPECT_EQ(args("a:"), R"({"a": ""})");
  EXPECT_EQ(args("a:1,partial_key"), R"({"a": 1})");
  EXPECT_EQ(args("a:" + Q + "ends in <|"), R"({"a": "ends in <|"})");
}

TEST(Gemma4ArgsToJson, IncrementalOutputNeverChanges) {
  const std::string text = "city:" + Q + "Par\xC3\xA9s <|x|> end" + Q + ",n:-12.5e1,list:[1," + Q +
                           "two" + Q + ",{k:true}],o:{p:null}}";
  const std::string whole = args(text);
  ASSERT_EQ(whole, R"({"city": "Par)"
                   "\xC3\xA9"
                   R"(s <|x|> end", "n": -125.0, )"
                   R"("list": [1, "two", {"k": true}], "o": {"p": null}})");
  // Byte by byte: every piece is final (a prefix of the whole), so a half-arrived delimiter never
  // shows up as text.
  Gemma4ArgsToJson conv;
  std::string out;
  for (char c : text) {
    std::string piece = conv.feed(std::string(1, c));
    out += piece;
    ASSERT_TRUE(whole.starts_with(out)) << out;
    ASSERT_EQ(out.find(Q), std::string::npos) << "delimiter leaked: " << out;
  }
  EXPECT_TRUE(conv.closed());
  out += conv.finish();
  EXPECT_EQ(out, whole);
  // Random chunkings give the same text.
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    Gemma4ArgsToJson c2;
    std::string o2;
    for (size_t i = 0; i < text.size();) {
      size_t n = std::uniform_int_distribution<size_t>(1, 9)(rng);
      o2 += c2.feed(text.substr(i, n));
      i += n;
    }
    o2 += c2.finish();
    ASSERT_EQ(o2, whole);
  }
}

TEST(Gemma4ArgsToJson, OutputIsAlwaysValidJson) {
  // Random soup of the syntax's pieces: whatever the model writes, the arguments parse as JSON.
  const std::vector<std::string> alphabet = {
      Q,      "{",    "}",    "[",  "]",  ":",  ",",    " ",    "\n",           "a",  "key", "1",
      "-2.5", "true", "null", "\"", "\\", "<|", "\xC3", "\xA9", "\xE2\x82\xAC", "e5", "."};
  std::mt19937 rng(11);
  for (int trial = 0; trial < 3000; ++trial) {
    std::string text;
    int n = std::uniform_int_distribution<int>(0, 30)(rng);
    for (int i = 0; i < n; ++i) {
      text += alphabet[std::uniform_int_distribution<size_t>(0, alphabet.size() - 1)(rng)];
    }
    std::string json = args(text);
    nlohmann::json parsed;
    ASSERT_NO_THROW(parsed = nlohmann::json::parse(json))
        << "input: " << text << "\njson: " << json;
    ASSERT_TRUE(parsed.is_object()) << json;
  }
}

}  // namespace
}  // namespace gemmaserve
