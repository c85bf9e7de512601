// Error messages: InputError "<template name>:<line>: <message>" for syntax errors, unknown
// filters and tests, runtime type errors and raise_exception().
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

TEST(JinjaErrors, SyntaxErrorsNameTheLine) {
  EXPECT_EQ(render_error("line1\n{% if x %}\nno end"),
            "t:3: Unexpected end of template. Jinja was looking for the following tags: 'elif' or "
            "'else' or 'endif'. The innermost block that needs to be closed is 'if'.");
  EXPECT_EQ(render_error("{% for x in y %}{% endif %}"),
            "t:1: Encountered unknown tag 'endif'. Jinja was looking for the following tags: "
            "'endfor' or 'else'. The innermost block that needs to be closed is 'for'.");
  EXPECT_EQ(render_error("{% frobnicate %}"), "t:1: Encountered unknown tag 'frobnicate'.");
  EXPECT_EQ(render_error("\n\n{{ 1 + }}"), "t:3: unexpected 'end of print statement'");
  EXPECT_EQ(render_error("{{ (1 }}"), "t:1: unexpected '}', expected ')'");
  EXPECT_EQ(render_error("{{ 'open }}"), "t:1: unexpected char \"'\" at 3");
  EXPECT_EQ(render_error("{{ a ? b }}"), "t:1: unexpected char '?' at 5");
  EXPECT_EQ(render_error("{# never closed"), "t:1: Missing end of comment tag");
  EXPECT_EQ(render_error("{% include 'x.jinja' %}"),
            "t:1: the 'include' tag is not supported in chat templates");
  // Found by the template fuzzer: the slice was evaluated without its object (out of bounds).
  EXPECT_EQ(render_error("{{ [1, 2][0, 1:2] }}"), "t:1: a slice inside a tuple subscript");
  EXPECT_EQ(render_error("{{ [1, 2][:1, 0] }}"), "t:1: a slice inside a tuple subscript");
}

TEST(JinjaErrors, UnknownFiltersAndTestsFailAtParse) {
  EXPECT_EQ(render_error("ok\n{{ x|frobnicate }}"), "t:2: No filter named 'frobnicate'.");
  EXPECT_EQ(render_error("{% if x is frobnicated %}{% endif %}"),
            "t:1: No test named 'frobnicated'.");
}

TEST(JinjaErrors, RuntimeErrors) {
  EXPECT_EQ(render_error("a\nb\n{{ raise_exception('Roles must alternate') }}"),
            "t:3: Roles must alternate");
  EXPECT_EQ(render_error("{{ 'a' + 1 }}"), "t:1: can only concatenate str (not \"int\") to str");
  EXPECT_EQ(render_error("{{ none + 1 }}"),
            "t:1: unsupported operand type(s) for +: 'NoneType' and 'int'");
  EXPECT_EQ(render_error("{{ 1 // 0 }}"), "t:1: integer division or modulo by zero");
  EXPECT_EQ(render_error("{{ x|tojson }}"),
            "t:1: Object of type Undefined is not JSON serializable");
  EXPECT_EQ(render_error("{% set x = 1 %}{% set x.a = 2 %}"),
            "t:1: cannot assign attribute on non-namespace object");
  EXPECT_EQ(render_error("{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}"),
            "t:1: maximum recursion depth exceeded in macro 'm'");
}

TEST(JinjaErrors, ErrorsInsideMacrosReportTheMacroLine) {
  EXPECT_EQ(render_error("{% macro m() %}\n{{ raise_exception('inner') }}\n{% endmacro %}\n"
                         "{{ m() }}"),
            "t:2: inner");
}

}  // namespace
}  // namespace gemmaserve
