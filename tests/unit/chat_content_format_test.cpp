// Message content as vLLM hands it to a chat template, for every role: the template's content
// format ("string" or "openai", vLLM's _detect_content_format over the template's syntax tree)
// and the per-format content rules, both against Debian's python3-jinja2 running vLLM's
// algorithm (tools/render_chat_template.py --detect-content-format / --vllm-messages) live, on
// the real Gemma 4 templates and the Hugging Face style templates of tests/data/chat_templates/.
#include <gtest/gtest.h>

#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "server/shared/chat_message_normalizer.h"
#include "server/shared/chat_rendering.h"
#include "test_support.h"
#include "tokenizer/chat_template/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace gemmaserve {
namespace {

using json = nlohmann::ordered_json;
namespace fs = std::filesystem;

constexpr const char* kPython = "/usr/bin/python3";

#define REQUIRE_PYTHON_JINJA2()                                                                   \
  if (testing::run_command(std::string(kPython) + " -c 'import jinja2' 2>/dev/null").exit_code != \
      0) {                                                                                        \
    if (testing::running_in_ci()) FAIL() << "python3-jinja2 missing (run scripts/setup)";         \
    GTEST_SKIP() << "python3-jinja2 missing (run scripts/setup)";                                 \
  }

fs::path tool() { return testing::source_dir() / "tools/render_chat_template.py"; }

fs::path corpus_path() {
  return testing::source_dir() / "tests/data/chat_templates/content_parts.json";
}

std::string python_content_format(const fs::path& template_path) {
  const testing::CommandResult r =
      testing::run_command(std::string(kPython) + " '" + tool().string() + "' --template '" +
                           template_path.string() + "' --detect-content-format");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  return json::parse(r.out).get<std::string>();
}

ChatContentFormat format_of(const std::string& source) {
  return ChatTemplate::parse(source, "t").content_format();
}

TEST(ChatContentFormat, DetectsWhatVllmDetects) {
  const ChatContentFormat kString = ChatContentFormat::kString;
  const ChatContentFormat kOpenAi = ChatContentFormat::kOpenAi;
  struct Case {
    const char* source;
    ChatContentFormat want;
  };
  const Case cases[] = {
      {"{% for m in messages %}{{ m.content }}{% endfor %}", kString},
      {"{% for m in messages %}{% for p in m.content %}{{ p.text }}{% endfor %}{% endfor %}",
       kOpenAi},
      {"{% for m in messages %}{% for p in m['content'] %}{{ p.text }}{% endfor %}{% endfor %}",
       kOpenAi},
      // Aliases set from messages (slices, filters), filtered loops, filtered content.
      {"{% set a = messages[1:] %}{% set b = a | list %}{% for m in b if m.role %}"
       "{% for p in m.content | selectattr('type', 'equalto', 'text') %}{{ p.text }}{% endfor %}"
       "{% endfor %}",
       kOpenAi},
      {"{% for m in messages %}{% if m.content is string %}{{ m.content }}{% else %}"
       "{% for p in m.content[1:] %}{{ p.text }}{% endfor %}{% endif %}{% endfor %}",
       kOpenAi},
      // Not a loop variable over messages, or not its content.
      {"{% for p in messages[0]['content'] %}{{ p.text }}{% endfor %}", kString},
      {"{% set m = messages[0] %}{% for p in m.content %}{{ p.text }}{% endfor %}", kString},
      {"{% for m in messages %}{% for p in m.tool_calls %}{{ p }}{% endfor %}{% endfor %}",
       kString},
      // Names, not scopes, as vLLM's walk: a macro's `m` is the loop's `m`.
      {"{% macro f(m) %}{% for p in m.content %}{{ p }}{% endfor %}{% endmacro %}"
       "{% for m in messages %}{{ f(m) }}{% endfor %}",
       kOpenAi},
      {"{% macro f(x) %}{% for p in x.content %}{{ p }}{% endfor %}{% endmacro %}"
       "{% for m in messages %}{{ f(m) }}{% endfor %}",
       kString},
      // vLLM's walk asserts plain-name targets; a tuple target makes it fall back to "string".
      {"{% set x, y = messages %}{% for m in messages %}{% for p in m.content %}{% endfor %}"
       "{% endfor %}",
       kString},
      {"{% set a = messages %}{% set messages = a %}{% for m in messages %}"
       "{% for p in m.content %}{% endfor %}{% endfor %}",
       kOpenAi},
  };
  REQUIRE_PYTHON_JINJA2();
  testing::TempDir work;
  int i = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.source);
    EXPECT_EQ(format_of(c.source), c.want);
    const fs::path path = work.path() / ("t" + std::to_string(i++) + ".jinja");
    std::ofstream(path, std::ios::binary) << c.source;
    EXPECT_EQ(python_content_format(path), content_format_name(c.want));
  }
}

std::vector<fs::path> reference_templates(const fs::path& shared) {
  return {shared / "data/chat-templates/google-gemma-4-31B-it.jinja",
          shared / "data/chat-templates/google-gemma-4-31B-it-interleaved.jinja",
          testing::source_dir() / "tests/data/chat_templates/llama3_like.jinja",
          testing::source_dir() / "tests/data/chat_templates/chatml_tools.jinja",
          testing::source_dir() / "tests/data/chat_templates/mistral_like.jinja"};
}

TEST(ChatContentFormat, RealTemplatesAreDetectedAsInVllm) {
  GS_REQUIRE_SHARED(shared);
  REQUIRE_PYTHON_JINJA2();
  for (const fs::path& path : reference_templates(shared)) {
    SCOPED_TRACE(path.filename().string());
    EXPECT_EQ(
        content_format_name(
            ChatTemplate::parse(testing::read_text_file(path), path.string()).content_format()),
        python_content_format(path));
  }
  // Gemma 4 loops over message['content']: vLLM hands it part lists.
  EXPECT_EQ(format_of(testing::read_text_file(reference_templates(shared)[0])),
            ChatContentFormat::kOpenAi);
  EXPECT_EQ(format_of(testing::read_text_file(reference_templates(shared)[3])),
            ChatContentFormat::kString);
}

// Every role's content (part lists of every vLLM text part type, images, null, tool results)
// rendered through render_chat_prompt as each format hands it, byte-identical to python3-jinja2
// over the messages vLLM builds; "auto" is each template's detected format.
TEST(ChatContentFormat, EveryRoleRendersAsVllmHandsItsContent) {
  GS_REQUIRE_SHARED(shared);
  REQUIRE_PYTHON_JINJA2();
  const Tokenizer tokenizer =
      Tokenizer::from_path(shared / "data/gemma4-tokenizer/ggml-vocab-gemma-4.gguf");
  const json conversations = json::parse(testing::read_text_file(corpus_path()));
  for (const fs::path& path : reference_templates(shared)) {
    const ChatTemplate chat_template =
        ChatTemplate::parse(testing::read_text_file(path), path.filename().string());
    for (const char* option : {"auto", "string", "openai"}) {
      SCOPED_TRACE(path.filename().string() + " " + option);
      const testing::CommandResult python =
          testing::run_command(std::string(kPython) + " '" + tool().string() + "' --template '" +
                               path.string() + "' --conversations '" + corpus_path().string() +
                               "' --vllm-messages --content-format " + option);
      ASSERT_EQ(python.exit_code, 0) << python.out;
      const json expected = json::parse(python.out);
      ASSERT_EQ(expected.size(), conversations.size());
      size_t identical = 0;
      for (size_t i = 0; i < conversations.size(); ++i) {
        const json& c = conversations[i];
        const std::string name = c["name"].get<std::string>();
        ChatPromptInput in;
        in.messages = c["messages"];
        in.add_generation_prompt = c.value("add_generation_prompt", true);
        in.continue_final_message = c.value("continue_final_message", false);
        in.content_format = parse_content_format_option(option);
        std::string text;
        std::string error;
        try {
          text = render_chat_prompt(chat_template, tokenizer, in).text;
        } catch (const InputError& e) {
          error = e.what();
        }
        if (expected[i].is_string()) {
          EXPECT_EQ(error, "") << name;
          EXPECT_EQ(text, expected[i].get<std::string>()) << name;
          if (error.empty() && text == expected[i].get<std::string>()) ++identical;
        } else {
          EXPECT_NE(error, "") << name << ": Python failed with " << expected[i].dump();
          if (!error.empty()) ++identical;
        }
      }
      EXPECT_EQ(identical, conversations.size());
      std::cout << path.filename().string() << " (" << option << "): " << identical << "/"
                << conversations.size() << " identical to python3-jinja2 over vLLM's messages\n";
    }
  }
}

TEST(ChatContentFormat, StringFormatRefusesWhatItCannotRender) {
  const json more_placeholders = json::parse(
      R"([{"role":"user","content":[{"type":"text","text":"<|image|><|image|>"},{"type":"image"}]}])");
  const json unknown = json::parse(R"([{"role":"user","content":[{"type":"file","file":{}}]}])");
  for (const auto& [messages, message] :
       {std::pair{more_placeholders,
                  "Found more '<|image|>' placeholders in input prompt than actual multimodal "
                  "data items."},
        std::pair{unknown, "Unsupported chat content part type: 'file'"}}) {
    try {
      normalize_chat_messages(messages, ChatContentFormat::kString);
      ADD_FAILURE() << "no error for " << messages.dump();
    } catch (const InputError& e) {
      EXPECT_EQ(std::string(e.what()), message);
      EXPECT_EQ(e.param(), "messages");
    }
  }
  EXPECT_EQ(parse_content_format_option("auto"), std::nullopt);
  try {
    parse_content_format_option("strings");
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "chat template content format must be one of 'auto', 'string', 'openai', got "
              "'strings'");
  }
}

}  // namespace
}  // namespace gemmaserve
