// apply_chat_template's Hugging Face semantics, loading a checkpoint's template, the
// --chat-template argument rule and the render-chat-template command.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/chat_template_command.h"
#include "core/error.h"
#include "test_support.h"
#include "tokenizer/chat_template/chat_template.h"

namespace gemmaserve {
namespace {

using json = nlohmann::ordered_json;
namespace fs = std::filesystem;

constexpr const char* kTemplate =
    "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>"
    "{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}";

std::string apply(const std::string& source, const json& messages, bool add_generation_prompt,
                  bool continue_final_message, const json& kwargs = json::object(),
                  const json& tools = nullptr) {
  return apply_chat_template(ChatTemplate::parse(source, "t"), messages, tools,
                             add_generation_prompt, continue_final_message, "<bos>", "<eos>",
                             kwargs);
}

std::string apply_error(const std::string& source, const json& messages, bool add_generation_prompt,
                        bool continue_final_message, const json& kwargs = json::object()) {
  try {
    apply(source, messages, add_generation_prompt, continue_final_message, kwargs);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

void write_file(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

const json kChat = json::parse(R"([{"role": "user", "content": "Hi"},
                                   {"role": "assistant", "content": "Hello there "}])");

TEST(ApplyChatTemplate, PassesHuggingFaceVariables) {
  EXPECT_EQ(apply(kTemplate, kChat, true, false),
            "<bos><user>Hi</user><assistant>Hello there </assistant><assistant>");
  EXPECT_EQ(
      apply("{{ tools is none }} {{ documents is none }} {{ eos_token }}", kChat, false, false),
      "True True <eos>");
  EXPECT_EQ(apply("{{ tools|length }}", kChat, false, false, json::object(),
                  json::parse(R"([{"type": "function"}])")),
            "1");
  // chat_template_kwargs become variables and may override the special tokens.
  EXPECT_EQ(apply("{{ bos_token }}{{ enable_thinking }}", kChat, false, false,
                  {{"bos_token", "[B]"}, {"enable_thinking", true}}),
            "[B]True");
  EXPECT_EQ(apply_error(kTemplate, kChat, false, false, {{"messages", json::array()}}),
            "chat_template_kwargs may not set 'messages'");
}

TEST(ApplyChatTemplate, ContinueFinalMessageCutsAfterTheFinalContent) {
  // The template keeps the trailing space, so the cut keeps it too.
  EXPECT_EQ(apply(kTemplate, kChat, false, true), "<bos><user>Hi</user><assistant>Hello there ");
  // A template that trims the content: the cut falls after the stripped text.
  EXPECT_EQ(apply("{% for m in messages %}[{{ m.content|trim }}]{% endfor %}", kChat, false, true),
            "[Hi][Hello there");
  json parts = json::parse(R"([{"role": "assistant", "content": [{"type": "text", "text": "a"},
                                                                    {"type": "image"},
                                                                    {"type": "text", "text": "b"}]}])");
  EXPECT_EQ(
      apply("{% for p in messages[0].content %}{{ p.text }}|{% endfor %}", parts, false, true),
      "a||b");
  EXPECT_EQ(apply_error("{{ 'nothing' }}", kChat, false, true),
            "continue_final_message is set but the final message does not appear in the chat after "
            "applying the chat template! This can happen if the chat template deletes portions of "
            "the final message. Please verify the chat template and final message in your chat to "
            "ensure they are compatible.");
  EXPECT_EQ(
      apply_error(kTemplate, kChat, true, true),
      "continue_final_message and add_generation_prompt are not compatible. Use "
      "continue_final_message when you want the model to continue the final message, and "
      "add_generation_prompt when you want to add a header that will prompt it to start a new "
      "assistant message instead.");
}

TEST(ApplyChatTemplate, DeeplyNestedInputIsAnInputErrorNotACrash) {
  json deep = "leaf";
  for (int i = 0; i < 2000; ++i) deep = json::array({deep});
  json messages = json::array({{{"role", "user"}, {"content", deep}}});
  EXPECT_THROW(apply("{{ messages|tojson }}", messages, false, false), InputError);
}

TEST(ChatTemplateLoading, PrefersChatTemplateJinja) {
  testing::TempDir dir;
  EXPECT_EQ(load_chat_template(dir.path()), std::nullopt);
  write_file(dir.path() / "tokenizer_config.json", R"({"bos_token": "<bos>"})");
  EXPECT_EQ(load_chat_template(dir.path()), std::nullopt);
  write_file(dir.path() / "tokenizer_config.json", R"({"chat_template": "from config"})");
  EXPECT_EQ(load_chat_template(dir.path()), "from config");
  write_file(dir.path() / "tokenizer_config.json",
             R"({"chat_template": [{"name": "tool_use", "template": "tools"},
                                   {"name": "default", "template": "plain"}]})");
  EXPECT_EQ(load_chat_template(dir.path()), "plain");
  write_file(dir.path() / "chat_template.jinja", "from jinja\n");
  EXPECT_EQ(load_chat_template(dir.path()), "from jinja\n");
}

TEST(ChatTemplateLoading, NamedTemplatesWithoutDefaultAreAnError) {
  testing::TempDir dir;
  write_file(dir.path() / "tokenizer_config.json",
             R"({"chat_template": [{"name": "tool_use", "template": "tools"}]})");
  EXPECT_THROW(load_chat_template(dir.path()), InputError);
}

TEST(ChatTemplateLoading, ArgumentIsAFileOrTheTemplateItself) {
  testing::TempDir dir;
  write_file(dir.path() / "t.jinja", "{{ 'file' }}");
  EXPECT_EQ(resolve_chat_template_arg((dir.path() / "t.jinja").string()), "{{ 'file' }}");
  EXPECT_EQ(resolve_chat_template_arg("{{ 'inline' }}"), "{{ 'inline' }}");
  EXPECT_EQ(resolve_chat_template_arg((dir.path() / "missing.jinja").string()),
            (dir.path() / "missing.jinja").string());
}

TEST(RenderChatTemplateCommand, PrintsOneResultPerConversation) {
  testing::TempDir dir;
  write_file(dir.path() / "t.jinja",
             "{{ bos_token }}{% if messages|length > 1 %}{{ raise_exception('one only') }}"
             "{% endif %}{{ messages[0].content }}");
  write_file(dir.path() / "c.json",
             R"([{"name": "a", "messages": [{"role": "user", "content": "é"}]},
                 {"name": "b", "messages": [{"role": "user", "content": "1"},
                                            {"role": "user", "content": "2"}]}])");
  std::ostringstream out;
  EXPECT_EQ(
      run_render_chat_template({"--template", (dir.path() / "t.jinja").string(), "--conversations",
                                (dir.path() / "c.json").string(), "--bos-token", "[B]"},
                               out),
      0);
  json results = json::parse(out.str());
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0], "[B]é");
  EXPECT_EQ(results[1]["error"], (dir.path() / "t.jinja").string() + ":1: one only");
}

}  // namespace
}  // namespace gemmaserve
