// The conversation corpus rendered by our interpreter must be byte-identical to Debian's
// python3-jinja2 set up as Hugging Face does (tools/render_chat_template.py, run live), for both
// Gemma 4 templates in the shared data folder and the Hugging Face style templates in
// tests/data/chat_templates/.
#include <gtest/gtest.h>

#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "test_support.h"
#include "tokenizer/chat_template/chat_template.h"

namespace gemmaserve {
namespace {

using json = nlohmann::ordered_json;
namespace fs = std::filesystem;

constexpr const char* kPython = "/usr/bin/python3";

fs::path corpus_path() {
  return testing::source_dir() / "tests/data/chat_templates/conversations.json";
}

json read_json(const fs::path& path) { return json::parse(testing::read_text_file(path)); }

bool have_python_jinja2() {
  return testing::run_command(std::string(kPython) + " -c 'import jinja2' 2>/dev/null").exit_code ==
         0;
}

#define REQUIRE_PYTHON_JINJA2()                                                           \
  if (!have_python_jinja2()) {                                                            \
    if (testing::running_in_ci()) FAIL() << "python3-jinja2 missing (run scripts/setup)"; \
    GTEST_SKIP() << "python3-jinja2 missing (run scripts/setup)";                         \
  }

// Renders every conversation with both implementations and expects identical results: the same
// bytes, or an error on both sides (with raise_exception's message carried over unchanged).
void expect_identical(const fs::path& template_path, bool single_bos) {
  json conversations = read_json(corpus_path());
  testing::CommandResult python = testing::run_command(
      std::string(kPython) + " '" +
      (testing::source_dir() / "tools/render_chat_template.py").string() + "' --template '" +
      template_path.string() + "' --conversations '" + corpus_path().string() + "'");
  ASSERT_EQ(python.exit_code, 0) << "render_chat_template.py failed";
  json expected = json::parse(python.out);
  ASSERT_EQ(expected.size(), conversations.size());

  ChatTemplate chat_template =
      ChatTemplate::parse(testing::read_text_file(template_path), template_path.string());
  size_t identical = 0;
  for (size_t i = 0; i < conversations.size(); ++i) {
    const json& c = conversations[i];
    const std::string name = c["name"].get<std::string>();
    std::string actual;
    std::string error;
    try {
      actual = apply_chat_template(chat_template, c["messages"], c.value("tools", json()),
                                   c.value("add_generation_prompt", false),
                                   c.value("continue_final_message", false), "<bos>", "<eos>",
                                   c.value("chat_template_kwargs", json::object()));
    } catch (const InputError& e) {
      error = e.what();
    }
    const json& want = expected[i];
    if (want.is_string()) {
      EXPECT_EQ(error, "") << name;
      EXPECT_EQ(actual, want.get<std::string>()) << name;
      if (error.empty() && actual == want.get<std::string>()) ++identical;
      if (single_bos) {
        EXPECT_EQ(actual.rfind("<bos>", 0), 0u) << name;
        EXPECT_EQ(actual.find("<bos>", 1), std::string::npos) << name << ": more than one <bos>";
      }
    } else {
      const std::string python_error = want["error"].get<std::string>();
      EXPECT_NE(error, "") << name << ": Python failed with " << python_error;
      const std::string prefix = "TemplateError: ";
      if (python_error.rfind(prefix, 0) == 0) {
        std::string message = python_error.substr(prefix.size());
        EXPECT_TRUE(error.size() >= message.size() &&
                    error.compare(error.size() - message.size(), message.size(), message) == 0)
            << name << ": " << error << " vs " << python_error;
      }
      if (!error.empty()) ++identical;
    }
  }
  std::cout << template_path.filename().string() << ": " << identical << "/" << conversations.size()
            << " conversations identical to python3-jinja2\n";
}

TEST(ChatTemplateCorpus, HasAtLeastThirtyConversations) {
  EXPECT_GE(read_json(corpus_path()).size(), 30u);
}

TEST(ChatTemplateCorpus, Gemma4Templates) {
  GS_REQUIRE_SHARED(shared);
  REQUIRE_PYTHON_JINJA2();
  for (const char* name :
       {"google-gemma-4-31B-it.jinja", "google-gemma-4-31B-it-interleaved.jinja"}) {
    fs::path path = shared / "data/chat-templates" / name;
    ASSERT_TRUE(fs::exists(path)) << path;
    SCOPED_TRACE(name);
    expect_identical(path, true);
  }
}

TEST(ChatTemplateCorpus, HuggingFaceStyleTemplates) {
  REQUIRE_PYTHON_JINJA2();
  for (const char* name : {"llama3_like.jinja", "chatml_tools.jinja", "mistral_like.jinja"}) {
    SCOPED_TRACE(name);
    expect_identical(testing::source_dir() / "tests/data/chat_templates" / name, false);
  }
}

}  // namespace
}  // namespace gemmaserve
