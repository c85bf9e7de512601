// Hostile templates (a request's chat_template is client input): loops without end, recursion,
// deep nesting and strings that grow without bound end in an InputError (a 400), never a hang,
// a stack overflow or an exhausted memory.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "test_support.h"
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

std::string render(const std::string& source) {
  return ChatTemplate::parse(source, "t").render(nlohmann::ordered_json::object());
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

// Deep or self-holding values: printing, comparing, serializing or freeing them never takes a
// stack frame per level (a stack overflow would take the whole server down).
const std::string kDeepList =
    "{% set ns = namespace(x=0) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor %}";

TEST(JinjaLimits, ANamespaceHoldingItselfPrintsAsJinjaDoes) {
  EXPECT_EQ(render("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}"),
            "<Namespace {'me': <Namespace {...}>}>");
  EXPECT_EQ(render("{% set ns = namespace() %}{% set ns.l = [ns, (ns,)] %}{{ ns.l }}"),
            "[<Namespace {'l': [...]}>, (<Namespace {'l': [...]}>,)]");
  EXPECT_EQ(render("{% set a = namespace() %}{% set b = namespace(a=a) %}{% set a.b = b %}"
                   "{{ a }}|{{ a == b }}|{{ [a] == [a] }}"),
            "<Namespace {'b': <Namespace {'a': <Namespace {...}>}>}>|False|True");
  EXPECT_EQ(render_error("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns|tojson }}"),
            "t:1: Object of type Namespace is not JSON serializable");
}

TEST(JinjaLimits, DeepValuesAreFreedAndRefusedWhenWalked) {
  EXPECT_EQ(render(kDeepList + "{{ 1 }}"), "1");
  const std::string too_deep = "t:1: a value nests deeper than 512 levels";
  EXPECT_EQ(render_error(kDeepList + "{{ ns.x }}"), too_deep);
  EXPECT_EQ(render_error(kDeepList + "{{ ns.x|string }}"), too_deep);
  EXPECT_EQ(render_error(kDeepList + "{{ ns.x|tojson }}"), too_deep);
  EXPECT_EQ(render_error(kDeepList + "{{ ns.x == [ns.x][0] }}"), too_deep);
  EXPECT_EQ(render_error(kDeepList + "{{ ns.x < [ns.x][0] }}"), too_deep);
  EXPECT_EQ(render_error(kDeepList + "{{ ns.x in [ns.x] }}"), too_deep);
  EXPECT_EQ(render_error(kDeepList + "{{ [ns.x, [ns.x][0]]|unique|list }}"), too_deep);
  EXPECT_EQ(render_error(kDeepList + "{{ [ns.x, [ns.x][0]]|sort }}"), too_deep);
  // Dicts and tuples nest the same way; startswith takes one level of tuple, as Python does.
  EXPECT_EQ(render_error("{% set ns = namespace(x=0) %}{% for i in range(100000) %}"
                         "{% set ns.x = {'a': ns.x} %}{% endfor %}{{ ns.x == ns.x }}"),
            too_deep);
  EXPECT_EQ(render_error("{% set ns = namespace(x='a') %}{% for i in range(100000) %}"
                         "{% set ns.x = (ns.x,) %}{% endfor %}{{ 'a'.startswith(ns.x) }}"),
            "t:1: tuple for startswith must only contain str, not tuple");
  // Values as deep as the limit still work.
  EXPECT_EQ(render("{% set ns = namespace(x=0) %}{% for i in range(500) %}"
                   "{% set ns.x = [ns.x] %}{% endfor %}{{ (ns.x|string)[-3:] }}{{ ns.x == ns.x }}"),
            "]]]True");
}

// Work the step budget does not see: one step that copies or scans a 60 MB string costs its bytes.
TEST(JinjaLimits, CopyingOrScanningBigStringsStopsAtTheByteBudget) {
  const std::string over =
      "t:1: rendering processed more than 1073741824 bytes of strings and "
      "lists (a string copied in a loop?)";
  const std::string big = "{% set ns = namespace(s='x' * 60000000) %}";
  EXPECT_EQ(render_error(big + "{% for i in range(100000) %}{% set ns.t = ns.s ~ 'y' %}"
                               "{% endfor %}"),
            over);
  EXPECT_EQ(render_error(big + "{% for i in range(100000) %}"
                               "{% set ns.t = ns.s[:1000000] ~ ns.s[:1000000] %}{% endfor %}"),
            over);
  EXPECT_EQ(render_error(big + "{% for i in range(100000) %}{% if ns.s|length %}{% endif %}"
                               "{% endfor %}"),
            over);
  EXPECT_EQ(render_error(big + "{% for i in range(100000) %}{% if 'y' in ns.s %}{% endif %}"
                               "{% endfor %}"),
            over);
  EXPECT_EQ(render_error(big + "{% for i in range(100000) %}{{ ns.s|replace('y', 'z') "
                               "|length }}{% endfor %}"),
            over);
  EXPECT_EQ(render_error(big + "{{ ns.s.split('x')|length }}"),
            "t:1: a string or list in the template would exceed 67108864 bytes");
  EXPECT_EQ(render_error(big + "{% for i in range(100000) %}{% set x %}{{ ns.s }}{% endset %}"
                               "{% endfor %}"),
            over);
  // Lists grown one item at a time copy n^2/2 items; unique compares n^2/2 pairs.
  EXPECT_EQ(render_error("{% set ns = namespace(l=[]) %}{% for i in range(100000) %}"
                         "{% set ns.l = ns.l + [i] %}{% endfor %}"),
            over);
  EXPECT_EQ(render_error("{{ range(100000)|unique|list|length }}"), over);
  // A list holding one sub-list twice, 60 times over: 2^60 items when printed or compared.
  const std::string doubling =
      "{% set ns = namespace(x=[1]) %}{% for i in range(60) %}"
      "{% set ns.x = [ns.x, ns.x] %}{% endfor %}";
  EXPECT_EQ(render_error(doubling + "{{ ns.x }}"),
            "t:1: a string or list in the template would exceed 67108864 bytes");
  EXPECT_EQ(render_error(doubling + "{{ ns.x|tojson }}"),
            "t:1: a string or list in the template would exceed 67108864 bytes");
  EXPECT_EQ(render_error(doubling + "{{ ns.x == [ns.x][0] }}"), over);
}

TEST(JinjaLimits, CheapOperationsOnBigValuesStayCheap) {
  // A variable lookup shares the string instead of copying it.
  EXPECT_EQ(render("{% set s = 'x' * 60000000 %}{% for i in range(100000) %}"
                   "{% if s %}{% endif %}{% set t = s %}{{ s.strip is defined }}{% endfor %}")
                .size(),
            400000u);
  EXPECT_EQ(render("{{ '' * 1000000000000000000 }}|{{ [] * 1000000000000000000 }}|"
                   "{{ 1 ** 1000000000000000000 }}|{{ (-1) ** 999999999999999999 }}|{{ 3 ** 39 }}"),
            "|[]|1|-1|4052555153018976267");
  EXPECT_EQ(render_error("{{ 3 ** 40 }}"), "t:1: integer overflow");
  EXPECT_EQ(render_error("{{ range(100000)|join('x' * 1000) }}"),
            "t:1: a string or list in the template would exceed 67108864 bytes");
  EXPECT_EQ(render_error("{{ [1]|batch(1000000000000, 0) }}"),
            "t:1: a string or list in the template would exceed 67108864 bytes");
  EXPECT_EQ(render_error("{{ [1]|slice(1000000000000) }}"),
            "t:1: a string or list in the template would exceed 67108864 bytes");
}

TEST(JinjaLimits, ARealTemplateRendersATenMegabyteMessage) {
  // Marked at both ends: find() on the repetitive text itself would take minutes.
  std::string text =
      "<first>" + repeated("The quick brown fox jumps over the lazy dog. ", 230000) + "<last>";
  ASSERT_GT(text.size(), 10'000'000u);
  nlohmann::ordered_json messages =
      nlohmann::ordered_json::array({{{"role", "system"}, {"content", "Be brief."}},
                                     {{"role", "user"}, {"content", text}},
                                     {{"role", "assistant"}, {"content", text}},
                                     {{"role", "user"}, {"content", text}}});
  std::vector<std::filesystem::path> templates = {testing::source_dir() /
                                                  "models/gemma4-demo/chat_template.jinja"};
  std::filesystem::path shared = testing::source_dir() / "../shared/data/chat-templates";
  for (const char* name :
       {"google-gemma-4-31B-it.jinja", "google-gemma-4-31B-it-interleaved.jinja"})
    if (std::filesystem::exists(shared / name)) templates.push_back(shared / name);
  for (const auto& path : templates) {
    SCOPED_TRACE(path.string());
    std::optional<std::string> source = load_chat_template(path.parent_path());
    ChatTemplate t = ChatTemplate::parse(
        path.filename() == "chat_template.jinja" ? *source : resolve_chat_template_arg(path), "t");
    std::string out =
        apply_chat_template(t, messages, nullptr, true, false, "<bos>", "<eos>", nullptr);
    EXPECT_GT(out.size(), 3 * text.size());
    size_t first = out.find("<first>");
    ASSERT_NE(first, std::string::npos);
    EXPECT_EQ(out.compare(first, text.size(), text), 0);
  }
}

}  // namespace
}  // namespace gemmaserve
