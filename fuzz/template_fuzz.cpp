// Jinja chat templates: a fuzzed template parsed and rendered over fuzzed messages (and a
// real template over fuzzed messages), as apply_chat_template renders a request's.
#include <fuzzer/FuzzedDataProvider.h>

#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "fuzz_support.h"
#include "tokenizer/chat_template/chat_template.h"

using namespace gemmaserve;
using ordered_json = nlohmann::ordered_json;

namespace {

const ChatTemplate& demo_template() {
  static const ChatTemplate t = [] {
    std::ifstream f(fuzz::source_root() / "models/gemma4-demo/chat_template.jinja");
    if (!f) fuzz::fail("models/gemma4-demo/chat_template.jinja is missing");
    std::stringstream s;
    s << f.rdbuf();
    return ChatTemplate::parse(s.str(), "demo");
  }();
  return t;
}

ordered_json default_messages() {
  return ordered_json::parse(R"([{"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"},
    {"role": "user", "content": [{"type": "text", "text": "What is 2+2?"}]}])");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const bool use_demo = in.ConsumeBool();
  if (use_demo) (void)demo_template();  // loaded outside the checks
  const bool add_generation_prompt = in.ConsumeBool();
  const std::string source = use_demo ? "" : in.ConsumeRandomLengthString(4096);
  const std::string messages_text = in.ConsumeRemainingBytesAsString();
  ordered_json messages = ordered_json::parse(messages_text, nullptr, false);
  ordered_json tools = nullptr;
  if (messages.is_object()) {  // {"messages": [...], "tools": [...]}
    tools = messages.value("tools", ordered_json(nullptr));
    messages = messages.value("messages", ordered_json(nullptr));
  }
  if (!messages.is_array()) messages = default_messages();
  fuzz::expect_input_errors_only([&] {
    std::optional<ChatTemplate> parsed;
    if (!use_demo) parsed = ChatTemplate::parse(source, "fuzz");
    const ChatTemplate& t = use_demo ? demo_template() : *parsed;
    (void)apply_chat_template(t, messages, tools, add_generation_prompt, false, "<bos>", "<eos>",
                              ordered_json::object());
  });
  return 0;
}
