// Statements: loops and loop.*, break/continue, Jinja2's scoping, namespaces, macros, call and
// filter blocks, block set.
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

TEST(JinjaStatements, LoopVariables) {
  EXPECT_EQ(render("{% for x in [1, 2, 3] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}"
                   "{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|"
                   "{% endfor %}"),
            "1032TrueFalse3|2121FalseFalse3|3210FalseTrue3|");
  EXPECT_EQ(render("{% for x in 'abc' %}{{ loop.previtem }}{{ x }}{{ loop.nextitem }}"
                   "{{ loop.cycle('+', '-') }}{% endfor %}"),
            "ab+abc-bc+");
}

TEST(JinjaStatements, LoopElseFilterAndControl) {
  EXPECT_EQ(render("{% for x in [] %}a{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for x in [1, 2, 3] if x > 1 %}{{ x }}/{{ loop.length }} {% endfor %}"),
            "2/2 3/2 ");
  EXPECT_EQ(render("{% for x in range(6) %}{% if x == 1 %}{% continue %}{% endif %}"
                   "{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}"),
            "023");
  EXPECT_EQ(render("{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}"), "37");
  EXPECT_EQ(render("{% for x in [{'c': [{'c': []}]}, {'c': []}] recursive %}"
                   "[{{ loop.depth }}{{ loop(x.c) }}]{% endfor %}"),
            "[1[2]][1]");
}

TEST(JinjaStatements, ScopingMatchesJinja) {
  // An assignment inside a loop body lives for that iteration only.
  EXPECT_EQ(render("{% set x = 0 %}{% for i in range(3) %}[{{ x }}]{% set x = i + 10 %}"
                   "({{ x }}){% endfor %}{{ x }}"),
            "[0](10)[0](11)[0](12)0");
  // If blocks do not open a scope.
  EXPECT_EQ(render("{% set x = 5 %}{% if true %}{% set x = 6 %}{% endif %}{{ x }}"), "6");
  // Namespaces carry state out of loops.
  EXPECT_EQ(render("{% set ns = namespace(total=0, seen=none) %}{% for i in range(4) %}"
                   "{% set ns.total = ns.total + i %}{% endfor %}{{ ns.total }} {{ ns.seen }}"),
            "6 None");
  EXPECT_EQ(render("{% set a, b = 1, 'two' %}{{ b }}{{ a }}"), "two1");
}

TEST(JinjaStatements, MacrosWithDefaultsKeywordsAndRecursion) {
  EXPECT_EQ(render("{% macro m(a, b=2) %}{{ a }}-{{ b }}-{{ varargs }}-{{ kwargs }}{% endmacro %}"
                   "{{ m(1) }}|{{ m(1, 3, 4) }}|{{ m(1, c=5) }}|{{ m(b='x', a='y') }}"),
            "1-2-()-{}|1-3-(4,)-{}|1-2-()-{'c': 5}|y-x-()-{}");
  EXPECT_EQ(render("{%- macro fact(n) -%}{{ 1 if n <= 1 else n * fact(n - 1)|int }}"
                   "{%- endmacro -%}{{ fact(5) }}"),
            "120");
  // Macros see template-level variables but not the caller's loop variables.
  EXPECT_EQ(render("{% set g = 'G' %}{% macro show() %}{{ g }}{{ i }}{% endmacro %}"
                   "{% for i in [1] %}{{ show() }}{% endfor %}"),
            "G");
}

TEST(JinjaStatements, CallFilterAndSetBlocks) {
  EXPECT_EQ(
      render("{% macro wrap() %}<{{ caller() }}>{% endmacro %}{% call wrap() %}in{% endcall %}"),
      "<in>");
  EXPECT_EQ(render("{% macro each() %}{{ caller(1) }}{{ caller(2) }}{% endmacro %}"
                   "{% call(v) each() %}[{{ v }}]{% endcall %}"),
            "[1][2]");
  EXPECT_EQ(render("{% filter upper %}hello {{ 'you' }}{% endfilter %}"), "HELLO YOU");
  EXPECT_EQ(
      render("{% set b %}block {{ 1 }}{% endset %}{{ b }}|{% set c | trim %}  pad  {% endset %}"
             "[{{ c }}]"),
      "block 1|[pad]");
  EXPECT_EQ(render("{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}{{ a }}"), "3");
  EXPECT_EQ(render("{% generation %}kept{% endgeneration %}"), "kept");
}

TEST(JinjaStatements, SandboxForbidsMutatingMethods) {
  EXPECT_EQ(render_error("{% set l = [] %}{{ l.append(1) }}"),
            "t:1: access to attribute 'append' of 'list' object is unsafe.");
  EXPECT_EQ(render("{{ [].append }}|"), "|");
}

}  // namespace
}  // namespace gemmaserve
