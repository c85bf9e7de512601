// Structured outputs: the grammar compilers (regex, JSON Schema, choice, EBNF), the byte-level
// matcher, the vocabulary masks (exactly the tokens whose bytes the grammar takes) and the
// sampler that applies them (every sampled answer matches, over many seeds).
#include <gtest/gtest.h>

#include <chrono>
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
#include "structured_test_support.h"
#include "test_support.h"
#include "tokenizer/tokenizer.h"

namespace gemmaserve::structured {
namespace {

using Ids = std::vector<int32_t>;

std::string error_of(const std::string& kind, const std::string& spec) {
  try {
    build_grammar(kind, spec);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(StructuredRegex, MatchesWholeStringsOnly) {
  const Grammar g = build_grammar("regex", R"(^[a-c]+\d{2,3}(x|yz)?\.$)");
  for (const char* ok : {"a12.", "abc123x.", "cc99yz."}) EXPECT_TRUE(matches(g, ok)) << ok;
  for (const char* bad : {"", "a1.", "a1234.", "d12.", "a12xyz.", "a12"}) {
    EXPECT_FALSE(matches(g, bad)) << bad;
  }
  EXPECT_TRUE(prefix_ok(g, "ab1"));
  EXPECT_FALSE(prefix_ok(g, "ab1x"));
  const Grammar cls = build_grammar("regex", R"([^a-y\s]\w*|[é-ë]\S|.)");
  for (const char* ok : {"z", "Z_9", "é!", "ë\xc3\xa9", "\n" /* no: '.' */}) {
    if (std::string(ok) == "\n") {
      EXPECT_FALSE(matches(cls, ok));
    } else {
      EXPECT_TRUE(matches(cls, ok)) << ok;
    }
  }
  EXPECT_FALSE(matches(cls, "ab"));
  EXPECT_TRUE(matches(cls, "\xe2\x82\xac"));  // '.': one multi-byte character
  EXPECT_FALSE(matches(cls, "\xe2\x82"));
  const Grammar nested = build_grammar("regex", "(a*)*b");  // a nullable loop stays finite
  EXPECT_TRUE(matches(nested, "aaab"));
  EXPECT_TRUE(matches(nested, "b"));
}

TEST(StructuredRegex, BadPatternsAreInputErrors) {
  EXPECT_EQ(error_of("regex", "a(b"),
            "invalid regex at position 3: missing ), unterminated subpattern");
  EXPECT_EQ(error_of("regex", "a)"), "invalid regex at position 1: unbalanced ')'");
  EXPECT_EQ(error_of("regex", "*a"), "invalid regex at position 0: nothing to repeat");
  EXPECT_EQ(error_of("regex", "(?=a)"),
            "invalid regex at position 2: lookaround and inline flags ('(?=') are not supported");
  EXPECT_EQ(error_of("regex", R"((a)\1)"),
            "invalid regex at position 4: unsupported escape \\1 (backreferences, word boundaries "
            "and \\p classes are not supported)");
  EXPECT_EQ(error_of("regex", "[a-"), "invalid regex at position 3: unterminated character set");
  EXPECT_EQ(error_of("regex", "a{5,2}"),
            "invalid regex at position 6: min repeat greater than max repeat");
}

TEST(StructuredLimits, BlowUpsAreRefusedQuickly) {
  const auto start = std::chrono::steady_clock::now();
  const std::string too_large =
      "the structured output grammar is too large (over 200000 symbols or 50000 rules); use "
      "smaller repetition counts or a smaller schema";
  EXPECT_EQ(error_of("regex", "a{100000}b{100000}"), too_large);
  // Nested counts share their rules: small, and matched with a bounded state.
  const Grammar nested = build_grammar("regex", "((a{1000}){1000}){1000}");
  EXPECT_TRUE(prefix_ok(nested, std::string(5000, 'a')));
  EXPECT_FALSE(matches(nested, std::string(5000, 'a')));
  EXPECT_EQ(error_of("regex", "a{1000000}"),
            "invalid regex at position 10: repetition count over 100000");
  EXPECT_EQ(error_of("json", R"({"type":"array","minItems":100000000})"), too_large);
  std::string deep = "x";
  for (int i = 0; i < 100; ++i) deep = R"({"type":"array","items":)" + deep + "}";
  EXPECT_EQ(error_of("json", deep.replace(deep.find('x'), 1, R"({"type":"null"})")),
            "the JSON schema is nested deeper than 64 levels");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  // An ambiguous grammar keeps a bounded number of stacks.
  const Grammar amb = build_grammar("regex", "(a|a|aa)*b");
  EXPECT_TRUE(matches(amb, std::string(200, 'a') + "b"));
}

TEST(StructuredChoice, OneOfTheStringsExactly) {
  const Grammar g = build_grammar("choice", R"(["yes","no","maybe so"])");
  for (const char* ok : {"yes", "no", "maybe so"}) EXPECT_TRUE(matches(g, ok)) << ok;
  for (const char* bad : {"ye", "yess", "maybe", ""}) EXPECT_FALSE(matches(g, bad)) << bad;
  EXPECT_EQ(error_of("choice", "[]"), "choice must be a non-empty list of strings");
  // Thousands of choices sharing prefixes stay one stack: every one stays reachable.
  nlohmann::json many = nlohmann::json::array();
  for (int i = 0; i < 5000; ++i) many.push_back("item" + std::to_string(i));
  many.push_back("");
  const Grammar big = build_grammar("choice", many.dump());
  for (const char* ok : {"item0", "item4999", "item123", ""}) EXPECT_TRUE(matches(big, ok)) << ok;
  EXPECT_FALSE(matches(big, "item5000"));
  EXPECT_FALSE(matches(big, "item"));
  // One very long choice is refused by the size budget, not by the stack.
  EXPECT_EQ(error_of("choice", nlohmann::json::array({std::string(300000, 'x')}).dump()),
            "the structured output grammar is too large (over 200000 symbols or 50000 rules); use "
            "smaller repetition counts or a smaller schema");
  EXPECT_EQ(error_of("choice", "[1]"), "choice must be a non-empty list of strings");
}

TEST(StructuredEbnf, XgrammarSyntax) {
  const Grammar g = build_grammar("grammar", R"G(
    # arithmetic
    root ::= expr ("=" expr)?
    expr ::= term (("+" | "-") term)*
    term ::= [0-9]+ | "(" expr ")" | name
    name ::= [a-z] [a-z_]{0,3}
  )G");
  for (const char* ok : {"1+2", "(1+2)-3=x", "abcd", "a_=((1))"}) {
    EXPECT_TRUE(matches(g, ok)) << ok;
  }
  for (const char* bad : {"1+", "abcde", "(1", "1==2", ""}) EXPECT_FALSE(matches(g, bad)) << bad;
  const Grammar esc = build_grammar("grammar", R"(root ::= "a\"\n" 'b' "\u00e9" [\]x]; )");
  EXPECT_TRUE(matches(esc, "a\"\nb\xc3\xa9]"));
  EXPECT_EQ(error_of("grammar", "expr ::= \"a\""),
            "invalid grammar: the grammar has no 'root' rule");
  EXPECT_EQ(error_of("grammar", "root ::= x"), "invalid grammar: rule 'x' is not defined");
  EXPECT_EQ(error_of("grammar", "root ::= \"a\" |\n  (\"b\""),
            "invalid grammar at line 2, column 7: expected ')'");
  EXPECT_EQ(error_of("grammar", "root ::= root \"a\" | \"b\""),
            "the grammar is left-recursive at rule 'root' (a rule reaches itself before any "
            "character)");
  EXPECT_EQ(error_of("grammar", "root ::= \"a\" root"),
            "the grammar's rule 'root' can never finish (every alternative needs the rule "
            "again)");
  EXPECT_EQ(error_of("grammar", "root ::= (= \"a\") \"b\""),
            "invalid grammar at line 1, column 11: lookahead assertions are not supported");
}

const char* kPersonSchema = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 8},
    "age": {"type": "integer"},
    "tags": {"type": "array", "items": {"enum": ["a", "b", 3, null]}, "minItems": 1,
             "maxItems": 2},
    "pet": {"$ref": "#/$defs/pet"},
    "when": {"type": "string", "format": "date"}
  },
  "required": ["name", "age"],
  "$defs": {"pet": {"anyOf": [{"type": "null"},
                              {"type": "object", "properties": {"kind": {"const": "cat"}},
                               "required": ["kind"]}]}}
})";

TEST(StructuredJsonSchema, PropertiesInOrderRequiredAndTypes) {
  const Grammar g = build_grammar("json", kPersonSchema);
  for (const char* ok : {
           R"({"name":"Al","age":3})",
           R"({ "name" : "Al" ,
               "age":-12, "tags":["a",3], "pet":{"kind":"cat"}, "when":"2024-02-29"})",
           R"({"name":"\u00e9\"x","age":0,"pet":null})",
           R"({"name":"Al","age":3,"when":"1999-12-31"})",
       }) {
    EXPECT_TRUE(matches(g, ok)) << ok;
  }
  for (const char* bad : {
           R"({"age":3,"name":"Al"})",                       // schema order
           R"({"name":"Al"})",                               // age is required
           R"({"name":"","age":3})",                         // minLength
           R"({"name":"123456789","age":3})",                // maxLength
           R"({"name":"Al","age":3.5})",                     // integer
           R"({"name":"Al","age":01})",                      // JSON numbers
           R"({"name":"Al","age":3,"tags":[]})",             // minItems
           R"({"name":"Al","age":3,"tags":["a","b","a"]})",  // maxItems
           R"({"name":"Al","age":3,"tags":["c"]})",          // enum
           R"({"name":"Al","age":3,"pet":{"kind":"dog"}})",  // const
           R"({"name":"Al","age":3,"when":"2024-13-01"})",   // format date
           R"({"name":"Al","age":3,"extra":1})",  // additionalProperties false by default
       }) {
    EXPECT_FALSE(matches(g, bad)) << bad;
  }
}

TEST(StructuredJsonSchema, AdditionalPropertiesFormatsAndAnyValues) {
  const Grammar open =
      build_grammar("json", R"({"type":"object","properties":{"a":{"type":"boolean"}},
                  "additionalProperties":{"type":"number"}})");
  EXPECT_TRUE(matches(open, R"({"a":true,"x":1.5e3,"y":-0})"));
  EXPECT_TRUE(matches(open, R"({"x":1})"));
  EXPECT_FALSE(matches(open, R"({"a":true,"x":"s"})"));
  const Grammar any = build_grammar("json", R"({"type":"object"})");
  EXPECT_TRUE(matches(any, R"({"k":[1,{"z":null}],"s":"x"})"));
  EXPECT_FALSE(matches(any, R"([1])"));
  const Grammar types = build_grammar("json", R"({"type":["string","null"]})");
  EXPECT_TRUE(matches(types, R"("x")"));
  EXPECT_TRUE(matches(types, "null"));
  EXPECT_FALSE(matches(types, "1"));
  for (const auto& [format, ok, bad] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"date-time", "2024-01-31T23:59:59.5Z", "2024-01-31 23:59:00Z"},
           {"time", "12:30:00+02:00", "24:00:00Z"},
           {"uuid", "123e4567-e89b-12d3-a456-426614174000", "123e4567-e89b-12d3-a456-42661417400"},
           {"email", "a.b+c@example.co", "a@b"},
           {"ipv4", "192.168.0.255", "256.1.1.1"}}) {
    const Grammar g = build_grammar("json", R"({"type":"string","format":")" + format + "\"}");
    EXPECT_TRUE(matches(g, "\"" + ok + "\"")) << format;
    EXPECT_FALSE(matches(g, "\"" + bad + "\"")) << format;
  }
  // pattern: JSON-escaped where the text needs it.
  const Grammar pat = build_grammar("json", R"({"type":"string","pattern":"^a\"[0-9]+$"})");
  EXPECT_TRUE(matches(pat, R"("a\"12")"));
  EXPECT_FALSE(matches(pat, R"("a"12")"));
  // Hundreds of optional properties: the last stays reachable.
  nlohmann::json wide = {{"type", "object"}, {"properties", nlohmann::json::object()}};
  for (int i = 0; i < 300; ++i) wide["properties"]["p" + std::to_string(i)] = {{"type", "integer"}};
  const Grammar wide_grammar = build_grammar("json", wide.dump());
  EXPECT_TRUE(matches(wide_grammar, R"({"p299":1})"));
  EXPECT_TRUE(matches(wide_grammar, R"({"p0":1, "p150":2, "p299":3})"));
  EXPECT_FALSE(matches(wide_grammar, R"({"p299":1,"p0":2})"));
  const Grammar recursive =
      build_grammar("json", R"({"$ref":"#/$defs/n","$defs":{"n":{"type":"object","properties":{
                  "next":{"anyOf":[{"$ref":"#/$defs/n"},{"type":"null"}]}},"required":["next"]}}})");
  EXPECT_TRUE(matches(recursive, R"({"next":{"next":{"next":null}}})"));
}

TEST(StructuredJsonSchema, IntegerBoundsMatchExactlyTheRange) {
  struct Range {
    std::string bounds;
    long lo, hi;  // inclusive, within the probe below
  };
  for (const Range& r : std::vector<Range>{{R"("minimum":0)", 0, 100000},
                                           {R"("minimum":-37,"maximum":512)", -37, 512},
                                           {R"("exclusiveMinimum":-1000,"maximum":-7)", -999, -7},
                                           {R"("maximum":99)", -100000, 99},
                                           {R"("minimum":17)", 17, 100000},
                                           {R"("minimum":5.5,"exclusiveMaximum":10)", 6, 9}}) {
    const Grammar g = build_grammar("json", R"({"type":"integer",)" + r.bounds + "}");
    for (long v = -1100; v <= 1100; ++v) {
      EXPECT_EQ(matches(g, std::to_string(v)), v >= r.lo && v <= r.hi) << r.bounds << " " << v;
    }
    EXPECT_EQ(matches(g, "123456789"), r.hi == 100000) << r.bounds;
    EXPECT_FALSE(matches(g, "007")) << r.bounds;
    EXPECT_FALSE(matches(g, "-0")) << r.bounds;
  }
}

TEST(StructuredJsonSchema, WhitespaceOptionsAsVllmSpellsThem) {
  // vLLM's disable_any_whitespace and whitespace_pattern, as the server wraps a schema.
  const std::string schema =
      R"({"type":"object","properties":{"a":{"type":"array","items":{"type":"integer"}}}})";
  auto wrapped = [&](const std::string& s, bool any, nlohmann::json pattern) {
    return nlohmann::json{{"schema", s}, {"any_whitespace", any}, {"whitespace_pattern", pattern}}
        .dump();
  };
  const Grammar flexible = build_grammar("json", schema);
  const Grammar compact = build_grammar("json_with_whitespace", wrapped(schema, false, nullptr));
  const Grammar spaced = build_grammar("json_with_whitespace", wrapped(schema, true, "[ ]?"));
  EXPECT_TRUE(matches(flexible, "{ \"a\" : [ 1 ,\n2 ] }"));
  EXPECT_TRUE(matches(compact, R"({"a":[1,2]})"));
  for (const char* bad : {R"({"a": [1,2]})", "{ }", "{\"a\":[1,2]}\n"}) {
    EXPECT_FALSE(matches(compact, bad)) << bad;
  }
  EXPECT_TRUE(matches(spaced, R"({ "a" : [ 1 , 2 ] })"));
  EXPECT_TRUE(matches(spaced, R"({"a":[1,2]})"));
  EXPECT_FALSE(matches(spaced, R"({"a":  [1]})"));  // one space at most
  EXPECT_FALSE(matches(spaced, "{\"a\":\n[1]}"));
  // disable_any_whitespace wins over a pattern.
  EXPECT_FALSE(
      matches(build_grammar("json_with_whitespace", wrapped(schema, false, " ")), R"({ "a":[1]})"));
  // json_object is the schema {"type": "object"}.
  const Grammar object =
      build_grammar("json_with_whitespace", wrapped(R"({"type":"object"})", false, nullptr));
  EXPECT_TRUE(matches(object, R"({"x":[1,{"y":null}],"z":"a b"})"));
  EXPECT_FALSE(matches(object, R"({"x": 1})"));
  EXPECT_FALSE(matches(object, "[1]"));
  EXPECT_EQ(error_of("json_with_whitespace", wrapped(schema, true, "a)")),
            "whitespace_pattern: invalid regex at position 1: unbalanced ')'");
  EXPECT_EQ(error_of("json_with_whitespace", wrapped(schema, true, "[ a]*")),
            "whitespace_pattern '[ a]*' matches more than blank space (space, tab, newline, "
            "carriage return)");
}

TEST(StructuredJsonSchema, UnsupportedKeywordsAreNamed) {
  EXPECT_EQ(error_of("json", R"({"type":"integer","minimum":1,"multipleOf":2,"not":{}})"),
            "unsupported JSON Schema keyword(s): multipleOf, not");
  EXPECT_EQ(error_of("json", R"({"type":"number","maximum":1.5})"),
            "unsupported JSON Schema keyword(s): maximum on a number (integers take it)");
  EXPECT_EQ(error_of("json", R"({"type":"integer","minimum":3,"exclusiveMaximum":3})"),
            "the integer range is empty (minimum > maximum)");
  EXPECT_EQ(error_of("json", R"({"type":"object","patternProperties":{}})"),
            "unsupported JSON Schema keyword(s): patternProperties");
  EXPECT_EQ(error_of("json", R"({"type":"string","format":"uri"})"),
            "unsupported JSON Schema format 'uri' (supported: date, date-time, email, ipv4, time, "
            "uuid)");
  EXPECT_EQ(error_of("json", R"({"$ref":"#/$defs/missing"})"),
            "$ref '#/$defs/missing' does not resolve in the schema");
  EXPECT_EQ(error_of("json", R"({"type":"strin"})"), "unknown JSON Schema type 'strin'");
  EXPECT_EQ(error_of("json", "{"), "the JSON schema is not valid JSON");
  EXPECT_EQ(error_of("json", R"({"allOf":[{},{}]})"),
            "unsupported JSON Schema keyword(s): allOf (of more than one schema)");
}

// ids: 0 <bos> 1 <eos>, pieces that cross JSON's structure, then the 256 byte tokens.
Tokenizer vocabulary() {
  return testing::pieces_tokenizer({"<bos>", "<eos>", "{", "}", "\"", "{\"", "\"}", "\":", "a", "1",
                                    "12", "\u2581", "ok", "\",\"", "yes", "no", "true"},
                                   2);
}

constexpr int32_t kByte0 = 17;  // <0x00>

TEST(StructuredMasks, ExactlyTheTokensTheGrammarTakes) {
  const Tokenizer tok = vocabulary();
  const JsonTokenTrie trie(tok);
  const int vocab = static_cast<int>(tok.vocab_size());
  const CompiledGrammar g(build_grammar("json", kPersonSchema));
  GrammarMatcher m(g.grammar());
  // At prefixes in every kind of context (strings at several depths, numbers, arrays, blank
  // space, after the end), for every kind of spec: the mask equals the brute-force one. Each
  // grammar's masks are asked twice over, so the shared parts get reused across contexts.
  struct Case {
    std::string kind, spec;
    std::vector<std::string> prefixes;
  };
  const std::vector<Case> cases = {
      {"json",
       kPersonSchema,
       {"", "{", R"({"name":")", R"({"name":"a)", R"({"name":"a","age":1)",
        R"({"name":"a","age":12,"tags":[)", R"({"name":"a","age":12,"pet":{"kind":)",
        R"({"name":"a","age":12,"pet":{"kind":"ca)", R"({"name":"a","age":12,"when":"20)", "{ \n",
        R"({"name":"a","age":1})"}},
      {"json",
       R"({"type":"object","properties":{"s":{"type":"string"},"o":{"type":"object",
        "properties":{"t":{"type":"string"}}}},"additionalProperties":true})",
       {R"({"s":")", R"({"s":"x","o":{"t":")", R"({"s":"x","o":{"t":"y"},")",
        R"({"s":"x","o":{"t":"y"},"k":")", R"({"s":"x","o":{"t":"y"},"k":{"a":[")"}},
      {"regex", "(yes|no)-[0-9a]{1,4}\\.?", {"", "y", "yes-", "yes-1", "no-aaaa"}},
      {"grammar",
       "root ::= \"{\" item (\",\" item)* \"}\"\nitem ::= \"a\" | \"1\" [0-9]?",
       {"", "{", "{1", "{1,a", "{1}"}},
  };
  for (const Case& c : cases) {
    const CompiledGrammar cg(build_grammar(c.kind, c.spec));
    GrammarMatcher cm(cg.grammar());
    for (int round = 0; round < 2; ++round) {
      for (const std::string& prefix : c.prefixes) {
        GrammarState s = cm.initial();
        ASSERT_TRUE(cm.feed(&s, prefix)) << prefix;
        const auto bits = cg.allowed(trie, vocab, s, &cm);
        EXPECT_EQ(mask_ids(*bits, vocab), brute_force(cg.grammar(), trie, vocab, s))
            << c.spec << " @ " << prefix;
      }
    }
  }
  // Spot checks, by hand: after {"name": only a string may open; the key needs its exact bytes.
  GrammarState s = m.initial();
  ASSERT_TRUE(m.feed(&s, R"({"name":)"));
  const auto bits = g.allowed(trie, vocab, s, &m);
  auto allowed = [&](int32_t id) {
    return ((*bits)[static_cast<size_t>(id) / 64] >> (id % 64)) & 1;
  };
  EXPECT_TRUE(allowed(4));             // "
  EXPECT_TRUE(allowed(6));             // "} : a name starting with a brace
  EXPECT_FALSE(allowed(2));            // {
  EXPECT_FALSE(allowed(8));            // a
  EXPECT_TRUE(allowed(kByte0 + ' '));  // blank space
  GrammarState first = m.initial();
  const auto first_bits = g.allowed(trie, vocab, first, &m);
  Ids opening;
  for (int32_t id = 0; id < vocab; ++id) {
    if ((*first_bits)[static_cast<size_t>(id) / 64] >> (id % 64) & 1) opening.push_back(id);
  }
  EXPECT_EQ(opening, (Ids{2, 5, kByte0 + '{'}));
}

// A choice of 200 distinct 40-byte strings: a prefix tree of thousands of rules, ~1 MiB.
std::string large_choice(int n) {
  nlohmann::json list = nlohmann::json::array();
  for (int k = 0; k < 200; ++k) {
    list.push_back("spec" + std::to_string(n) + "-" + std::to_string(k) + std::string(30, 'x'));
  }
  return list.dump();
}

// A client sending many distinct large specs: the cache holds at most its byte budget, the
// least recently used out, and the spec in use (asked between the others) stays.
TEST(StructuredCache, ManyLargeSpecsStayUnderTheByteBoundAndTheRecentOneStays) {
  constexpr uint64_t kBudget = uint64_t{8} << 20;
  GrammarCompiler compiler(kBudget);
  const auto hot = compiler.compile("choice", large_choice(0));
  const uint64_t one = compiler.cache().bytes();
  ASSERT_GE(one, hot->grammar().memory_bytes());
  RecordProperty("bytes_per_spec", std::to_string(one));
  const auto first = compiler.compile("choice", large_choice(1));
  constexpr int kSpecs = 60;
  for (int i = 2; i < kSpecs; ++i) {
    compiler.compile("choice", large_choice(i));
    EXPECT_LE(compiler.cache().bytes(), kBudget) << i;
    EXPECT_EQ(compiler.compile("choice", large_choice(0)), hot) << i;  // still cached
  }
  EXPECT_GT(one * kSpecs, 4 * kBudget);  // what a count bound would have kept
  EXPECT_LT(compiler.cache().size(), static_cast<size_t>(kSpecs));
  EXPECT_NE(compiler.compile("choice", large_choice(1)), first);  // evicted, compiled again
  // A spec larger than the whole budget compiles but is not kept.
  GrammarCompiler tiny(one / 2);
  EXPECT_NE(tiny.compile("choice", large_choice(0)), nullptr);
  EXPECT_EQ(tiny.cache().bytes(), 0u);
}

// Masks of many distinct states (every position of a long literal) stay within the budget they
// share with the grammars, and the mask asked for between them stays.
TEST(StructuredCache, ManyStatesMasksStayUnderTheByteBoundAndTheRecentOneStays) {
  const Tokenizer tok = vocabulary();
  const JsonTokenTrie trie(tok);
  const int vocab = static_cast<int>(tok.vocab_size());
  constexpr uint64_t kBudget = 64 * 1024;
  GrammarCompiler compiler(kBudget);
  const std::string text(2000, 'a');
  const auto grammar = compiler.compile("choice", nlohmann::json::array({text}).dump());
  GrammarMatcher m(grammar->grammar());
  const GrammarState start = m.initial();
  const auto hot = grammar->allowed(trie, vocab, start, &m);
  GrammarState s = start;
  for (size_t i = 0; i < text.size(); ++i) {
    ASSERT_TRUE(m.feed(&s, text.substr(i, 1)));
    const auto bits = grammar->allowed(trie, vocab, s, &m);
    EXPECT_EQ(mask_ids(*bits, vocab), brute_force(grammar->grammar(), trie, vocab, s)) << i;
    ASSERT_LE(compiler.cache().bytes(), kBudget) << i;
    ASSERT_EQ(grammar->allowed(trie, vocab, start, &m), hot) << i;  // still cached
  }
  EXPECT_LT(compiler.cache().size(), text.size());
}

// The stop token is likely whenever it is allowed.
std::vector<std::string> sample_answers(const std::string& kind, const std::string& spec,
                                        int seeds) {
  return structured::sample_answers(vocabulary(), kind, spec, seeds, {1}, 3.0f, 400);
}

TEST(StructuredSampling, EveryAnswerMatchesOverManySeeds) {
  const std::string schema = R"({"type":"object","properties":{
      "ok":{"type":"boolean"},"n":{"type":"integer"},"tag":{"enum":["yes","no"]},
      "list":{"type":"array","items":{"type":"string","maxLength":3},"maxItems":3}},
      "required":["ok","tag"]})";
  const Grammar schema_grammar = build_grammar("json", schema);
  for (const std::string& a : sample_answers("json", schema, 40)) {
    EXPECT_TRUE(matches(schema_grammar, a)) << a;
    const auto parsed = nlohmann::json::parse(a, nullptr, false);
    ASSERT_FALSE(parsed.is_discarded()) << a;
    EXPECT_TRUE(parsed["ok"].is_boolean()) << a;
    EXPECT_TRUE(parsed["tag"] == "yes" || parsed["tag"] == "no") << a;
  }
  const Grammar regex_grammar = build_grammar("regex", "(yes|no)-[0-9a]{1,4}");
  for (const std::string& a : sample_answers("regex", "(yes|no)-[0-9a]{1,4}", 40)) {
    EXPECT_TRUE(matches(regex_grammar, a)) << a;
  }
  for (const std::string& a : sample_answers("choice", R"(["yes","no","ok1"])", 40)) {
    EXPECT_TRUE(a == "yes" || a == "no" || a == "ok1") << a;
  }
  const std::string ebnf = R"(root ::= "{" item ("," item)* "}"
item ::= "a" | "1" [0-9]?)";
  const Grammar ebnf_grammar = build_grammar("grammar", ebnf);
  for (const std::string& a : sample_answers("grammar", ebnf, 40)) {
    EXPECT_TRUE(matches(ebnf_grammar, a)) << a;
  }
}

TEST(StructuredSampling, ThinkingFirstThenTheGrammarThenOnlyTheStop) {
  const Tokenizer tok = vocabulary();
  auto trie = std::make_shared<const JsonTokenTrie>(tok);
  GrammarCompiler compiler;
  SamplingParams p;
  p.answer_constraint = AnswerConstraint{};
  p.answer_constraint->structured_kind = "choice";
  p.answer_constraint->structured_spec = R"(["yes","no"])";
  p.answer_constraint->lead_open = 8;  // "a" opens the span here, "1" closes it
  p.answer_constraint->lead_close = 9;
  const int vocab = static_cast<int>(tok.vocab_size());
  RequestSampler s(p, {}, {1}, &tok, vocab, 0, trie, compiler.compile("choice", R"(["yes","no"])"));
  std::vector<float> zeros(static_cast<size_t>(vocab), 0.0f);
  const auto allowed = [&](const Ids& out) {
    Ids ids;
    const auto x = s.process(zeros, out);
    for (int i = 0; i < vocab; ++i) {
      if (x[static_cast<size_t>(i)] > -std::numeric_limits<float>::infinity()) ids.push_back(i);
    }
    return ids;
  };
  EXPECT_EQ(allowed({}),
            (Ids{8, 14, 15, kByte0 + 'n', kByte0 + 'y'}));  // the answer, or thinking first
  EXPECT_EQ(allowed(Ids{8, 12, 4}).size(), static_cast<size_t>(vocab));          // thinking: free
  EXPECT_EQ(allowed(Ids{8, 12, 9}), (Ids{14, 15, kByte0 + 'n', kByte0 + 'y'}));  // then the answer
  EXPECT_EQ(allowed(Ids{8, 12, 9, kByte0 + 'n'}), (Ids{kByte0 + 'o'}));
  EXPECT_EQ(allowed(Ids{8, 12, 9, kByte0 + 'n', kByte0 + 'o'}), (Ids{1}));  // whole: the stop
}

// `bench structured` on the real vocabulary: runs, completes answers, reports both timings.
TEST(StructuredBench, ReportsTheMaskCostOnTheRealVocabulary) {
  GS_REQUIRE_SHARED(shared);
  const auto r =
      testing::run_command(testing::cli_binary().string() + " bench structured " +
                           (shared / "data/gemma4-tokenizer/ggml-vocab-gemma-4.gguf").string() +
                           " --tokens 40 --batch-size 2 --json 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  EXPECT_EQ(j["vocab_size"], 262144);
  EXPECT_EQ(j["batch_size"], 2);
  EXPECT_GT(j["with_mask"]["mean_ms"].get<double>(), 0.0);
  EXPECT_GT(j["without_mask"]["mean_ms"].get<double>(), 0.0);
  const auto bad =
      testing::run_command(testing::cli_binary().string() + " bench structured --tokens 0 x 2>&1");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.out.find("--tokens must be positive, got 0"), std::string::npos) << bad.out;
}

}  // namespace
}  // namespace gemmaserve::structured
