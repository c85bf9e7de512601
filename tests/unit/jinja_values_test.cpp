// Values print as Python prints them, and undefined behaves like Jinja2's default Undefined.
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

TEST(JinjaValues, NumbersFormatLikePython) {
  EXPECT_EQ(render("{{ 1.0 }} {{ 1e-5 }} {{ 1e16 }} {{ 1e15 }} {{ 0.1 + 0.2 }} {{ -0.0 }}"),
            "1.0 1e-05 1e+16 1000000000000000.0 0.30000000000000004 -0.0");
  EXPECT_EQ(render("{{ 3 / 2 }} {{ 4 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 2 ** -1 }}"),
            "1.5 2.0 3 -4 2 0.5");
  EXPECT_EQ(render("{{ -2 ** 2 }} {{ 2 ** 10 }} {{ 1 / 3 }}"), "4 1024 0.3333333333333333");
  EXPECT_EQ(render("{{ x }} {{ y }}", {{"x", 2.5e-7}, {"y", 12345678901234567.0}}),
            "2.5e-07 1.2345678901234568e+16");
}

TEST(JinjaValues, ConstantsAndContainersPrintAsPythonRepr) {
  EXPECT_EQ(render("{{ true }} {{ False }} {{ none }}"), "True False None");
  EXPECT_EQ(render("{{ [1, 'a', none, true, 1.5, {'k': \"it's\"}] }}"),
            "[1, 'a', None, True, 1.5, {'k': \"it's\"}]");
  EXPECT_EQ(render("{{ (1, 2) }} {{ (1,) }} {{ ['a\\nb'] }}"), "(1, 2) (1,) ['a\\nb']");
}

TEST(JinjaValues, DictsKeepInsertionOrder) {
  nlohmann::ordered_json ctx = {{"d", {{"zeta", 1}, {"alpha", 2}, {"mid", 3}}}};
  EXPECT_EQ(render("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", ctx),
            "zeta=1;alpha=2;mid=3;");
  EXPECT_EQ(render("{{ d|tojson }}", ctx), "{\"zeta\": 1, \"alpha\": 2, \"mid\": 3}");
}

TEST(JinjaValues, PythonTruthinessAndOperators) {
  EXPECT_EQ(render("{{ 1 and 2 }} {{ 0 or 'x' }} {{ none or 0 }} {{ not [] }} {{ '' or {} }}"),
            "2 x 0 True {}");
  EXPECT_EQ(
      render("{{ 'ab' * 3 }} {{ [1] * 2 }} {{ 'a' ~ 1 ~ none }} {{ 1 == 1.0 }} {{ 1 == true }}"),
      "ababab [1, 1] a1None True True");
  EXPECT_EQ(render("{{ 'x' in 'xyz' }} {{ 3 not in [1, 2] }} {{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }}"),
            "True True True False");
}

TEST(JinjaValues, UndefinedSemantics) {
  // Printing, iterating, testing and defaulting an undefined value are fine...
  EXPECT_EQ(render("[{{ missing }}]{% for x in missing %}x{% endfor %}{{ missing is defined }}"),
            "[]False");
  EXPECT_EQ(render("{{ missing|default('d') }} {{ missing|length }} {{ missing == missing }}"),
            "d 0 True");
  // ...a missing key of a dict is undefined too...
  EXPECT_EQ(render("[{{ d.nope }}][{{ d['nope'] }}]", {{"d", nlohmann::ordered_json::object()}}),
            "[][]");
  // ...but looking into one or computing with it is an error, as in Jinja2.
  EXPECT_EQ(render_error("{{ missing.attr }}"), "t:1: 'missing' is undefined");
  EXPECT_EQ(render_error("{{ d.nope.x }}", {{"d", nlohmann::ordered_json::object()}}),
            "t:1: 'dict object' has no attribute 'nope'");
  EXPECT_EQ(render_error("{{ missing + 1 }}"), "t:1: 'missing' is undefined");
  EXPECT_EQ(render("{{ 'no' if false }}|{{ none['x'] }}|"), "||");
}

TEST(JinjaValues, StringsIndexByCodePoint) {
  EXPECT_EQ(render("{{ 'é'|length }} {{ '😀x'[0] }} {{ '日本語'|reverse }} {{ 'héllo'[1:3] }}"),
            "1 😀 語本日 él");
  EXPECT_EQ(render("{{ 'ÀÉÎ'|lower }} {{ 'straße'|upper }} {{ 'abc'[::-1] }} {{ 'abc'[5] }}|"),
            "àéî STRASSE cba |");
}

}  // namespace
}  // namespace gemmaserve
