// Whitespace handling exactly as Jinja2 with trim_blocks and lstrip_blocks: -/+ modifiers,
// comments, raw blocks, trailing newline, line endings.
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

TEST(JinjaWhitespace, TrimBlocksEatsOneNewlineAfterBlockTags) {
  EXPECT_EQ(render("{% if true %}\nyes\n{% endif %}\nafter"), "yes\nafter");
  EXPECT_EQ(render("{% if true %}\n\nyes{% endif %}"), "\nyes");
  // Print tags are not blocks: their newline stays.
  EXPECT_EQ(render("{{ 'a' }}\nb"), "a\nb");
}

TEST(JinjaWhitespace, LstripBlocksStripsIndentBeforeBlockTags) {
  EXPECT_EQ(render("  {% if true %}\n    yes\n  {% endif %}\nafter"), "    yes\nafter");
  // Only whitespace from the line start is stripped; text before the tag keeps its spaces.
  EXPECT_EQ(render("x  {% if true %}y{% endif %}"), "x  y");
  // Not for print tags.
  EXPECT_EQ(render("  {{ 'v' }}"), "  v");
}

TEST(JinjaWhitespace, MinusModifiersStripAllWhitespace) {
  EXPECT_EQ(render("a  \n {{- 'b' -}} \n\n c"), "abc");
  EXPECT_EQ(render("a\n  {%- if true -%}\n  b\n{%- endif %}"), "ab");
  EXPECT_EQ(render("{%- for i in [1, 2] -%}\n  {{ i }}\n{%- endfor %}\nx"), "12x");
}

TEST(JinjaWhitespace, PlusModifiersDisableTrimAndLstrip) {
  EXPECT_EQ(render("  {%+ if true %}x{% endif %}"), "  x");
  EXPECT_EQ(render("{% if true +%}\nx{% endif %}"), "\nx");
}

TEST(JinjaWhitespace, CommentsFollowBlockRules) {
  EXPECT_EQ(render("a {# note #} b"), "a  b");
  EXPECT_EQ(render("a {#- note -#} b"), "ab");
  EXPECT_EQ(render("a\n  {# own line #}\nb"), "a\nb");
}

TEST(JinjaWhitespace, RawBlocksAreLiteral) {
  EXPECT_EQ(render("{% raw %}{{ x }}{% if %}{% endraw %}"), "{{ x }}{% if %}");
  EXPECT_EQ(render("|{%- raw -%}  {{x}}  {%- endraw -%}|"), "|{{x}}|");
}

TEST(JinjaWhitespace, OneTrailingNewlineIsDroppedAndLineEndingsNormalized) {
  EXPECT_EQ(render("a\n"), "a");
  EXPECT_EQ(render("a\n\n"), "a\n");
  EXPECT_EQ(render("a\r\nb\rc"), "a\nb\nc");
}

TEST(JinjaWhitespace, BracesInsideExpressionsDoNotEndTags) {
  EXPECT_EQ(render("{{ {'a': '}}'}['a'] }}"), "}}");
  EXPECT_EQ(render("{{ '{' }}{{ '}' }}"), "{}");
}

}  // namespace
}  // namespace gemmaserve
