// Tool-call history as vLLM renders it: the message post-processing rule (chat_message_normalizer)
// on its own, then the tool_history corpus through render_chat_prompt with the real Gemma 4
// templates and vocabulary against Debian's python3-jinja2 (tools/render_chat_template.py
// --vllm-messages: Hugging Face's apply_chat_template over the messages vLLM hands it) and
// Hugging Face's tokenizer (@huggingface/tokenizers on the exported tokenizer.json), both live.
#include <gtest/gtest.h>

#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

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

json assistant_call(const json& arguments) {
  json call = {{"id", "c1"}, {"type", "function"}, {"function", {{"name", "f"}}}};
  if (!arguments.is_discarded()) call["function"]["arguments"] = arguments;
  return json::array({{{"role", "assistant"}, {"content", nullptr}, {"tool_calls", {call}}}});
}

json arguments_after(const json& arguments) {
  return normalize_chat_messages(
      assistant_call(arguments),
      ChatContentFormat::kOpenAi)[0]["tool_calls"][0]["function"]["arguments"];
}

std::string error_of(const json& messages, std::optional<std::string>* param = nullptr) {
  try {
    normalize_chat_messages(messages, ChatContentFormat::kOpenAi);
  } catch (const InputError& e) {
    if (param) *param = e.param();
    return e.what();
  }
  return "";
}

TEST(ChatMessageNormalizer, StringArgumentsBecomeTheObjectTheyHold) {
  EXPECT_EQ(arguments_after(R"({"city": "Lyon", "n": [1, 2.5, true, null, {"a": "é"}]})"),
            json::parse(R"({"city": "Lyon", "n": [1, 2.5, true, null, {"a": "é"}]})"));
  EXPECT_EQ(arguments_after(" \n{\"b\":1,\"a\":2}\t").dump(), R"({"b":1,"a":2})");  // order kept
  EXPECT_EQ(arguments_after(json::parse(R"({"city": "Lyon"})")), json::parse(R"({"city":"Lyon"})"));
}

TEST(ChatMessageNormalizer, EverythingElseBecomesAnEmptyObjectAsInVllm) {
  const json empty = json::object();
  for (const json& arguments :
       {json(""), json(nullptr), json("{}"), json("{city: Lyon"), json("[1, 2]"), json("42"),
        json("\"Lyon\""), json("null"), json("true"), json("NaN"), json::array({1}), json(5),
        json(false), json::array(), json::object()}) {
    EXPECT_EQ(arguments_after(arguments), empty) << arguments.dump();
  }
  EXPECT_EQ(arguments_after(json(json::value_t::discarded)), empty) << "missing arguments";
}

TEST(ChatMessageNormalizer, EmptyOrNullToolCallsAreDropped) {
  for (const json& calls : {json::array(), json(nullptr)}) {
    json messages =
        json::array({{{"role", "assistant"}, {"content", "Hi"}, {"tool_calls", calls}}});
    EXPECT_EQ(normalize_chat_messages(messages, ChatContentFormat::kOpenAi)[0],
              json::parse(R"({"role":"assistant","content":"Hi"})"));
  }
}

TEST(ChatMessageNormalizer, BadEntriesAreErrorsNamingToolCalls) {
  std::optional<std::string> param;
  json messages = json::array({{{"role", "assistant"}, {"tool_calls", {"call"}}}});
  EXPECT_EQ(error_of(messages, &param), "assistant tool_calls entries must be objects.");
  EXPECT_EQ(param, "tool_calls");
  const std::string only_functions =
      "chat completions only support assistant tool_calls of type 'function'.";
  for (const char* call :
       {R"({"type":"code_interpreter","function":{"name":"f"}})", R"({"type":"function"})",
        R"({"type":"function","function":"f"})", R"({"type":null,"function":{"name":"f"}})"}) {
    messages[0]["tool_calls"] = json::array({json::parse(call)});
    param.reset();
    EXPECT_EQ(error_of(messages, &param), only_functions) << call;
    EXPECT_EQ(param, "tool_calls");
  }
  messages[0]["tool_calls"] = json::array({json::parse(R"({"function":{"name":"f"}})")});
  EXPECT_EQ(error_of(messages), "") << "type defaults to function";
}

TEST(ChatMessageNormalizer, DeeplyNestedArgumentsAreRejected) {
  const std::string deep = std::string(200, '[') + std::string(200, ']');
  std::optional<std::string> param;
  EXPECT_EQ(error_of(assistant_call(deep), &param),
            "tool call arguments nest deeper than 128 levels");
  EXPECT_EQ(param, "tool_calls");
  EXPECT_EQ(error_of(assistant_call(std::string(100, '[') + std::string(100, ']'))), "");
}

TEST(ChatMessageNormalizer, ToolResultTextPartsJoinWithNewlines) {
  json tool = {{"role", "tool"}, {"tool_call_id", "c1"}};
  auto content_after = [&](const json& content) {
    json m = tool;
    if (!content.is_discarded()) m["content"] = content;
    return normalize_chat_messages(json::array({m}), ChatContentFormat::kOpenAi)[0]["content"];
  };
  EXPECT_EQ(
      content_after(json::parse(R"([{"type":"text","text":"a"},{"type":"text","text":"b"}])")),
      "a\nb");
  EXPECT_EQ(content_after(json::parse(R"([{"type":"text","text":"a"},{"type":"text"}])")), "a");
  EXPECT_EQ(content_after(json::array()), "");
  EXPECT_EQ(content_after(json(nullptr)), "");
  EXPECT_EQ(content_after(json(json::value_t::discarded)), "");
  EXPECT_EQ(content_after("sunny"), "sunny");
  const json mixed = json::parse(R"([{"type":"text","text":"a"},{"type":"image_url"}])");
  EXPECT_EQ(content_after(mixed), mixed);
}

TEST(ChatMessageNormalizer, LeavesTheInputAndOtherRolesAlone) {
  const json messages = json::parse(R"([
    {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}],
     "tool_calls":[{"function":{"name":"f","arguments":"{}"}}]},
    {"role":"assistant","content":null,"tool_calls":[{"function":{"name":"f","arguments":"{\"x\":1}"}}]}
  ])");
  const json copy = messages;
  const json out = normalize_chat_messages(messages, ChatContentFormat::kOpenAi);
  EXPECT_EQ(messages, copy);
  EXPECT_EQ(out[0], messages[0]);
  EXPECT_EQ(out[1]["tool_calls"][0]["function"]["arguments"], json::parse(R"({"x":1})"));
}

// ---- The corpus against python3-jinja2 and @huggingface/tokenizers -------------------------

constexpr const char* kPython = "/usr/bin/python3";

fs::path corpus_path() {
  return testing::source_dir() / "tests/data/chat_templates/tool_history.json";
}

json read_json(const fs::path& path) { return json::parse(testing::read_text_file(path)); }

// Skips outside CI (fails under CI=true) when a reference tool is missing.
std::string missing_reference() {
  if (testing::run_command(std::string(kPython) + " -c 'import jinja2' 2>/dev/null").exit_code !=
      0) {
    return "python3-jinja2 missing (run scripts/setup)";
  }
  if (testing::run_command("command -v node >/dev/null").exit_code != 0) {
    return "node missing (run scripts/setup)";
  }
  if (!fs::exists(testing::source_dir() / "tests/node/node_modules/@huggingface/tokenizers")) {
    return "npm package @huggingface/tokenizers missing (run scripts/setup)";
  }
  return "";
}

// The Hugging Face ids of each text (no special tokens added: the template writes <bos>).
std::vector<std::vector<int32_t>> hf_token_ids(const fs::path& tokenizer_dir,
                                               const std::vector<std::string>& texts,
                                               const fs::path& work) {
  {
    std::ofstream strings(work / "texts.jsonl", std::ios::binary);
    for (const std::string& t : texts) strings << json(t).dump() << "\n";
  }
  const testing::CommandResult node = testing::run_command(
      "node '" + (testing::source_dir() / "tests/node/tokenizer_compare.mjs").string() +
      "' encode --tokenizer '" + tokenizer_dir.string() + "' --strings '" +
      (work / "texts.jsonl").string() + "' --out '" + (work / "ids.jsonl").string() + "'");
  EXPECT_EQ(node.exit_code, 0) << "tokenizer_compare.mjs encode failed";
  std::vector<std::vector<int32_t>> ids;
  std::ifstream lines(work / "ids.jsonl");
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty()) ids.push_back(json::parse(line)["tokens"].get<std::vector<int32_t>>());
  }
  return ids;
}

TEST(ChatToolHistory, CorpusCoversTheIssueCases) {
  std::set<std::string> names;
  for (const json& c : read_json(corpus_path())) names.insert(c["name"].get<std::string>());
  for (const char* name :
       {"string_arguments", "object_arguments", "nested_string_arguments", "empty_object_string",
        "empty_string_arguments", "invalid_json_arguments", "json_array_arguments",
        "several_calls_one_turn", "tool_result_text_parts", "thinking_reasoning_on_tool_call",
        "thinking_reasoning_content_on_tool_call", "multi_turn_two_calls"}) {
    EXPECT_EQ(names.count(name), 1u) << name;
  }
}

TEST(ChatToolHistory, RendersAndTokenizesLikeVllmOverHuggingFace) {
  GS_REQUIRE_SHARED(shared);
  if (const std::string missing = missing_reference(); !missing.empty()) {
    if (testing::running_in_ci()) FAIL() << missing;
    GTEST_SKIP() << missing;
  }
  testing::TempDir work;
  const testing::CommandResult exported =
      testing::run_command(testing::cli_binary().string() + " export-tokenizer --from '" +
                           (shared / "data/gemma4-tokenizer/ggml-vocab-gemma-4.gguf").string() +
                           "' --out '" + (work.path() / "tok").string() + "' 2>&1");
  ASSERT_EQ(exported.exit_code, 0) << exported.out;
  const Tokenizer tokenizer = Tokenizer::from_path(work.path() / "tok/tokenizer.json");
  const json conversations = read_json(corpus_path());
  const std::vector<std::string> templates = {"google-gemma-4-31B-it.jinja",
                                              "google-gemma-4-31B-it-interleaved.jinja"};

  // python3-jinja2's renders for every template, then Hugging Face's ids for all in one run.
  std::vector<std::string> texts;
  for (const std::string& name : templates) {
    const testing::CommandResult python =
        testing::run_command(std::string(kPython) + " '" +
                             (testing::source_dir() / "tools/render_chat_template.py").string() +
                             "' --template '" + (shared / "data/chat-templates" / name).string() +
                             "' --conversations '" + corpus_path().string() + "' --vllm-messages");
    ASSERT_EQ(python.exit_code, 0) << "render_chat_template.py failed";
    const json expected = json::parse(python.out);
    ASSERT_EQ(expected.size(), conversations.size());
    for (const json& e : expected) {
      ASSERT_TRUE(e.is_string()) << e.dump();
      texts.push_back(e.get<std::string>());
    }
  }
  const std::vector<std::vector<int32_t>> hf_ids =
      hf_token_ids(work.path() / "tok", texts, work.path());
  ASSERT_EQ(hf_ids.size(), texts.size());

  for (size_t t = 0; t < templates.size(); ++t) {
    const std::string& name = templates[t];
    SCOPED_TRACE(name);
    const ChatTemplate chat_template =
        ChatTemplate::parse(testing::read_text_file(shared / "data/chat-templates" / name), name);
    size_t identical = 0;
    for (size_t i = 0; i < conversations.size(); ++i) {
      const json& c = conversations[i];
      const std::string case_name = c["name"].get<std::string>();
      const size_t k = t * conversations.size() + i;
      ChatPromptInput in;
      in.messages = c["messages"];
      in.tools = c.value("tools", json());
      in.add_generation_prompt = c.value("add_generation_prompt", true);
      in.kwargs = c.value("chat_template_kwargs", json::object());
      in.gemma4 = true;
      const ChatPrompt prompt = render_chat_prompt(chat_template, tokenizer, in);
      EXPECT_EQ(prompt.text, texts[k]) << case_name;
      EXPECT_EQ(prompt.token_ids, hf_ids[k]) << case_name;
      if (prompt.text == texts[k] && prompt.token_ids == hf_ids[k]) ++identical;
      if (case_name == "multi_turn_two_calls") {  // Gemma 4's value syntax, never the raw JSON
        EXPECT_NE(prompt.text.find("<|tool_call>call:get_weather{city:<|\"|>Lyon<|\"|>}"),
                  std::string::npos);
        EXPECT_NE(
            prompt.text.find("call:get_weather{city:<|\"|>Oslo<|\"|>,unit:<|\"|>fahrenheit<|\"|>}"),
            std::string::npos);
      }
    }
    std::cout << name << ": " << identical << "/" << conversations.size()
              << " tool conversations identical to python3-jinja2 + @huggingface/tokenizers\n";
  }
}

}  // namespace
}  // namespace gemmaserve
