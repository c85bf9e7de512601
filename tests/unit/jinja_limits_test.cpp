// Hostile templates (a request's chat_template is client input): loops without end, recursion,
// deep nesting and strings that grow without bound end in an InputError (a 400), never a hang,
// a stack overflow or an exhausted memory.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "tokenizer/chat_template/chat_template.h"

namespace gemmaserve {
namespace {

// The InputError message of parsing or rendering, or "" when both succeed.
std::string render_error(const std::string& source) {
  try {
    ChatTemplate::parse(source, "t").render(nlohmann::ordered_json::object());
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

std::string repeated(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

TEST(JinjaLimits, NestedLoopsStopAtTheStepBudget) {
  // Cheap steps (a long sum per iteration) reach the budget quickly.
  EXPECT_EQ(render_error("{% for a in range(100000) %}{% for b in range(100000) %}{% if 1" +
                         repeated(" + 1", 100) + " %}{% endif %}{% endfor %}{% endfor %}"),
            "t:1: rendering took more than 2000000 steps (a loop without end?)");
}

TEST(JinjaLimits, RecursiveLoopWithoutEndStops) {
  EXPECT_EQ(render_error("{% for x in [1] recursive %}{{ loop([1]) }}{% endfor %}"),
            "t:1: maximum recursion depth exceeded in a recursive loop");
}

TEST(JinjaLimits, MutualMacroRecursionStops) {
  EXPECT_EQ(render_error("{% macro a() %}{{ b() }}{% endmacro %}"
                         "{% macro b() %}{{ a() }}{% endmacro %}{{ a() }}"),
            "t:1: maximum recursion depth exceeded in macro 'a'");
}

TEST(JinjaLimits, DoublingStringsStopAtTheSizeCap) {
  EXPECT_EQ(render_error("{% set ns = namespace(s='xxxxxxxx') %}{% for i in range(64) %}"
                         "{% set ns.s = ns.s ~ ns.s %}{% endfor %}"),
            "t:1: a string or list in the template would exceed 67108864 bytes");
  EXPECT_EQ(render_error("{{ 'ab' * 100000000000 }}"),
            "t:1: a string or list in the template would exceed 67108864 bytes");
  EXPECT_EQ(render_error("{{ [1, 2] * 100000000 }}"),
            "t:1: a string or list in the template would exceed 67108864 bytes");
  EXPECT_EQ(render_error("{{ 'x'.center(1000000000) }}"),
            "t:1: a string or list in the template would exceed 67108864 bytes");
  EXPECT_EQ(render_error("{{ 'ab'|indent(1000000000, true) }}"),
            "t:1: a string or list in the template would exceed 67108864 bytes");
  EXPECT_EQ(render_error("{{ ('a' * 60000000)|replace('a', 'aa') }}"),
            "t:1: a string or list in the template would exceed 67108864 bytes");
  // Output that grows a little per iteration is capped as a whole.
  EXPECT_EQ(render_error("{% for i in range(100000) %}{{ 'y' * 1000 }}{% endfor %}"),
            "t:1: a string or list in the template would exceed 67108864 bytes");
}

TEST(JinjaLimits, DeepNestingIsRefusedAtParse) {
  EXPECT_EQ(render_error("{{ " + repeated("(", 5000) + "1" + repeated(")", 5000) + " }}"),
            "t:1: the template nests deeper than 128 levels");
  EXPECT_EQ(render_error("{{ " + repeated("not ", 5000) + "1 }}"),
            "t:1: the template nests deeper than 128 levels");
  EXPECT_EQ(render_error("{{ " + repeated("-", 5000) + "1 }}"),
            "t:1: the template nests deeper than 128 levels");
  EXPECT_EQ(render_error(repeated("{% if 1 %}", 5000)),
            "t:1: the template nests deeper than 128 levels");
  // Long chains build deep trees without parser recursion: refused by depth after parsing.
  EXPECT_EQ(render_error("{{ 1" + repeated(" + 1", 200000) + " }}"),
            "t:1: expression nested deeper than 128 levels");
  EXPECT_EQ(render_error("{{ x" + repeated(".a", 200000) + " }}"),
            "t:1: expression nested deeper than 128 levels");
  EXPECT_EQ(render_error("{{ x" + repeated("|trim", 200000) + " }}"),
            "t:1: expression nested deeper than 128 levels");
}

TEST(JinjaLimits, OrdinaryTemplatesStayWellInside) {
  // Nesting and sizes real templates use render as before.
  EXPECT_EQ(ChatTemplate::parse("{{ " + repeated("(", 100) + "1" + repeated(")", 100) + " }}", "t")
                .render(nlohmann::ordered_json::object()),
            "1");
  EXPECT_EQ(ChatTemplate::parse("{% for i in range(1000) %}{{ i % 10 }}{% endfor %}", "t")
                .render(nlohmann::ordered_json::object())
                .size(),
            1000u);
}

}  // namespace
}  // namespace gemmaserve
