// LLM::chat, the offline chat API: lives with the server because it reuses the server's chat
// rendering and output parsing, so offline and online chat cannot drift apart.
#include <algorithm>

#include "core/error.h"
#include "engine/engine.h"
#include "gemmaserve/llm.h"
#include "server/chat_output_parser.h"
#include "server/chat_rendering.h"
#include "tokenizer/chat_template/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace gemmaserve {

ChatOutput LLM::chat(const nlohmann::ordered_json& messages, const SamplingParams& params,
                     const ChatOptions& options) {
  Engine& e = engine();
  const Tokenizer* tok = e.tokenizer();
  if (tok == nullptr) throw InputError("chat needs a tokenizer, and this model has none");
  if (!messages.is_array() || messages.empty()) {
    throw InputError("messages must be a non-empty list");
  }
  std::optional<std::string> source = options.chat_template;
  if (!source) source = load_chat_template(e.args().model);
  if (!source) throw InputError(e.args().model + " has no chat template; pass one in options");
  const ChatTemplate tmpl = ChatTemplate::parse(*source, "chat template");
  const bool gemma4 = e.model_config().model_type.rfind("gemma4", 0) == 0;
  ChatPromptInput in;
  in.messages = messages;
  in.tools = options.tools.is_array() ? options.tools : nlohmann::ordered_json(nullptr);
  in.add_generation_prompt = options.add_generation_prompt;
  in.continue_final_message = options.continue_final_message;
  in.kwargs = options.chat_template_kwargs;
  in.reasoning_effort = options.reasoning_effort;
  in.gemma4 = gemma4;
  ChatPrompt prompt = render_chat_prompt(tmpl, *tok, in);

  ChatParseOptions parse;
  const bool parsing = gemma4 && options.parse_output;
  parse.parse_reasoning = parsing;
  parse.parse_tools = parsing && in.tools.is_array() && !in.tools.empty();
  parse.strip_markers = parsing;
  parse.starts_in_thought_channel = parsing && prompt_ends_in_open_thought_channel(prompt.text);
  SamplingParams p = params;
  if (parsing) p.skip_special_tokens = false;  // the parsers read the marker text

  ChatOutput out;
  out.prompt = prompt.text;
  out.output = generate({Prompt::from_ids(prompt.token_ids)}, p).front();
  for (const CompletionOutput& o : out.output.outputs) {
    ChatMessageParts parts = parse_chat_output(o.text, parse);
    ChatMessageOutput m;
    m.content = std::move(parts.content);
    m.reasoning = std::move(parts.reasoning);
    for (const ToolCall& c : parts.tool_calls) m.tool_calls.push_back({c.id, c.name, c.arguments});
    const std::string reason = o.finish_reason.value_or("stop");
    m.finish_reason = !m.tool_calls.empty() && reason == "stop" ? "tool_calls" : reason;
    out.messages.push_back(std::move(m));
  }
  return out;
}

}  // namespace gemmaserve
