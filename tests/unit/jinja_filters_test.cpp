// Filters, tests, methods and globals as Jinja2 3.1 (and Hugging Face's tojson) define them.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "tokenizer/chat_template/chat_template.h"

namespace gemmaserve {
namespace {

std::string render(const std::string& source,
                   const nlohmann::ordered_json& context = nlohmann::ordered_json::object()) {
  return ChatTemplate::parse(source, "t").render(context);
}

// The InputError message of parsing or rendering, or "" when both succeed.
[[maybe_unused]] std::string render_error(
    const std::string& source,
    const nlohmann::ordered_json& context = nlohmann::ordered_json::object()) {
  try {
    render(source, context);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(JinjaFilters, Strings) {
  EXPECT_EQ(
      render("{{ 'Hello World'|upper }} {{ 'Hello'|lower }} {{ 'hello-world foo(bar)'|title }}"
             " {{ 'hELLO'|capitalize }}"),
      "HELLO WORLD hello Hello-World Foo(Bar) Hello");
  EXPECT_EQ(render("[{{ '  x \\n'|trim }}] [{{ 'xxhixx'|trim('x') }}] {{ 'a b'|replace(' ', '-') }}"
                   " {{ 'aaa'|replace('a', 'b', 2) }} {{ 'one two  three'|wordcount }}"),
            "[x] [hi] a-b bba 3");
  EXPECT_EQ(render("{{ 'l1\\nl2\\n\\nl4'|indent(2) }}|{{ 'l1\\nl2'|indent(2, true) }}"),
            "l1\n  l2\n\n  l4|  l1\n  l2");
  EXPECT_EQ(render("{{ '<a>&\"\\''|e }} {{ 1|string ~ 2 }} {{ '%s=%d'|format('a', 3) }}"),
            "&lt;a&gt;&amp;&#34;&#39; 12 a=3");
}

TEST(JinjaFilters, Sequences) {
  nlohmann::ordered_json ctx = {{"l", {3, 1, 2}},
                                {"people", {{{"n", "b"}, {"age", 30}}, {{"n", "a"}, {"age", 20}}}}};
  EXPECT_EQ(render("{{ l|join(', ') }} {{ l|first }} {{ l|last }} {{ l|length }} {{ l|count }}"
                   " {{ l|sum }} {{ l|min }} {{ l|max }} {{ l|sort }} {{ l|sort(reverse=true) }}",
                   ctx),
            "3, 1, 2 3 2 3 3 6 1 3 [1, 2, 3] [3, 2, 1]");
  EXPECT_EQ(render("{{ ['b', 'A', 'a']|sort }} {{ ['b', 'A', 'a']|unique|list }} {{ l|reverse }}"
                   " {{ 'ab'|list }} {{ [1, 2, 3, 4, 5]|batch(2)|list }}",
                   ctx),
            "['A', 'a', 'b'] ['b', 'A'] [2, 1, 3] ['a', 'b'] [[1, 2], [3, 4], [5]]");
  EXPECT_EQ(render("{{ people|map(attribute='n')|join }} {{ people|sort(attribute='age')|first }}"
                   " {{ people|selectattr('age', 'gt', 25)|map(attribute='n')|list }}"
                   " {{ people|rejectattr('n', 'equalto', 'b')|list|length }}"
                   " {{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 2, 3, 4]|reject('even')|list }}"
                   " {{ ['a', 'b']|map('upper')|list }} {{ people|sum(attribute='age') }}",
                   ctx),
            "ba {'n': 'a', 'age': 20} ['b'] 1 [1, 3] [1, 3] ['A', 'B'] 50");
  // Digit parts past int64 find nothing, as Python's big int index (the template fuzzer found
  // them thrown out of std::stoll); python3-jinja2 renders the same.
  EXPECT_EQ(render("{{ [{'a': 1}, [5]]|map(attribute='99999999999999999999', default='none')"
                   "|join(',') }}|{{ [[7, 8]]|map(attribute='1')|join(',') }}"),
            "none,none|8");
  // Python's int is unbounded; past int64 an error, not undefined behaviour (the fuzzer's).
  EXPECT_EQ(render_error("{{ 1e308|int }}"), "t:1: int: 1e+308 is past the 64-bit integer range");
  EXPECT_EQ(render_error("{{ '-9.3e18'|int }}"),
            "t:1: int: -9.3e+18 is past the 64-bit integer range");
  EXPECT_EQ(render("{{ 9.2e18|int }} {{ -2.5|int }}"), "9200000000000000000 -2");
}

TEST(JinjaFilters, MappingsAndDefaults) {
  nlohmann::ordered_json ctx = {{"d", {{"B", 1}, {"a", 2}, {"c", 0}}}, {"n", nullptr}};
  EXPECT_EQ(render("{{ d|dictsort }} {{ d|dictsort(by='value', reverse=true)|first }}"
                   " {{ d|items|list|length }} {{ d|list }}",
                   ctx),
            "[('a', 2), ('B', 1), ('c', 0)] ('a', 2) 3 ['B', 'a', 'c']");
  EXPECT_EQ(render("{{ n|default('x') }} {{ zz|default('x') }} {{ ''|default('e', true) }}"
                   " {{ zz|d('q') }}",
                   ctx),
            "None x e q");
}

TEST(JinjaFilters, NumbersAndConversions) {
  EXPECT_EQ(render("{{ '3'|int }} {{ '3.7'|int }} {{ 'x'|int }} {{ 'x'|int(5) }} {{ 3.9|int }}"
                   " {{ '2.5'|float }} {{ 3|float }} {{ -3|abs }}"),
            "3 3 0 5 3 2.5 3.0 3");
  EXPECT_EQ(
      render("{{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} {{ 2.1|round(method='ceil') }}"
             " {{ 3|round }}"),
      "2.0 4.0 2.67 3.0 3");
}

TEST(JinjaFilters, HuggingFaceToJson) {
  nlohmann::ordered_json ctx = {{"v", {{"b", {1, 2.0, "é\n"}}, {"a", nullptr}}}};
  EXPECT_EQ(render("{{ v|tojson }}", ctx), "{\"b\": [1, 2.0, \"é\\n\"], \"a\": null}");
  EXPECT_EQ(render("{{ v|tojson(indent=2) }}", ctx),
            "{\n  \"b\": [\n    1,\n    2.0,\n    \"é\\n\"\n  ],\n  \"a\": null\n}");
  EXPECT_EQ(render("{{ v|tojson(separators=(',', ':'), sort_keys=true) }}", ctx),
            "{\"a\":null,\"b\":[1,2.0,\"é\\n\"]}");
  EXPECT_EQ(render("{{ 'é<>'|tojson(ensure_ascii=true) }} {{ {}|tojson(indent=2) }}"),
            "\"\\u00e9<>\" {}");
}

TEST(JinjaTests, BuiltinTests) {
  EXPECT_EQ(
      render("{{ 1 is odd }} {{ 2 is even }} {{ 9 is divisibleby 3 }} {{ none is none }}"
             " {{ true is boolean }} {{ 1 is integer }} {{ true is integer }} {{ 1.0 is float }}"
             " {{ true is number }} {{ 's' is string }} {{ {} is mapping }} {{ [] is mapping }}"),
      "True True True True True True False True True True True False");
  EXPECT_EQ(
      render("{{ [] is iterable }} {{ {} is sequence }} {{ 1 is sequence }} {{ 'ab' is lower }}"
             " {{ 'AB' is upper }} {{ 1 is in [1, 2] }} {{ none is sameas none }}"
             " {{ 3 is gt 2 }} {{ 3 is ne 3 }} {{ range is callable }} {{ 1 is true }}"
             " {{ x is undefined }} {{ 1 is not none }}"),
      "True True False True True True True True False True False True True");
}

TEST(JinjaMethods, StringDictAndListMethods) {
  EXPECT_EQ(render("{{ 'a b  c'.split() }} {{ 'a,b,,c'.split(',') }} {{ 'a b c'.rsplit(' ', 1) }}"
                   " [{{ '  x '.strip() }}] {{ 'xxa'.lstrip('x') }} {{ 'ab'.rstrip('b') }}"),
            "['a', 'b', 'c'] ['a', 'b', '', 'c'] ['a b', 'c'] [x] a a");
  EXPECT_EQ(
      render("{{ 'Hello'.startswith('He') }} {{ 'Hello'.endswith(('lo', 'x')) }}"
             " {{ 'Hello'.replace('l', 'L') }} {{ 'Hello'.find('l') }} {{ 'Hello'.count('l') }}"
             " {{ 'hi you'.title() }} {{ 'Hi'.upper() }} {{ 'Hi'.lower() }}"),
      "True True HeLLo 2 2 Hi You HI hi");
  nlohmann::ordered_json ctx = {{"d", {{"a", 1}}}, {"l", {3, 1}}};
  EXPECT_EQ(render("{{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 0) }} {{ d.keys()|list }}"
                   " {{ d.values()|list }} {{ d.items()|list }} {{ l.index(1) }} {{ l.count(3) }}",
                   ctx),
            "1 None 0 ['a'] [1] [('a', 1)] 1 1");
}

TEST(JinjaGlobals, RangeDictNamespaceJoiner) {
  EXPECT_EQ(render("{{ range(3)|list }} {{ range(1, 10, 4)|list }} {{ range(5, 0, -2)|list }}"),
            "[0, 1, 2] [1, 5, 9] [5, 3, 1]");
  EXPECT_EQ(render("{{ dict(a=1, b='x') }} {{ namespace(a=1).a }}"
                   "{% set j = joiner('|') %}{% for x in 'ab' %}{{ j() }}{{ x }}{% endfor %}"),
            "{'a': 1, 'b': 'x'} 1a|b");
  EXPECT_EQ(render("{{ strftime_now('%Y')|length }}"), "4");
}

}  // namespace
}  // namespace gemmaserve
