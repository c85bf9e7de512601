#include "server/shared/chat_rendering.h"

#include "server/shared/chat_message_normalizer.h"
#include "server/shared/gemma4_reasoning_parser.h"
#include "tokenizer/tokenizer.h"

namespace gemmaserve {

std::string token_text_or_empty(const Tokenizer& tokenizer, int32_t id) {
  if (id < 0 || !tokenizer.contains(id)) return "";
  return std::string(tokenizer.id_to_piece(id));
}

ChatPrompt render_chat_prompt(const ChatTemplate& chat_template, const Tokenizer& tokenizer,
                              const ChatPromptInput& input) {
  nlohmann::ordered_json kwargs =
      input.default_kwargs.is_object() ? input.default_kwargs : nlohmann::ordered_json::object();
  for (auto it = input.kwargs.begin(); it != input.kwargs.end(); ++it) kwargs[it.key()] = *it;
  if (input.gemma4) {
    std::optional<bool> explicit_thinking;
    if (kwargs.contains("enable_thinking") && kwargs["enable_thinking"].is_boolean()) {
      explicit_thinking = kwargs["enable_thinking"].get<bool>();
    }
    std::optional<std::string_view> effort;
    if (input.reasoning_effort) effort = *input.reasoning_effort;
    if (auto thinking = gemma4_enable_thinking(effort, explicit_thinking)) {
      kwargs["enable_thinking"] = *thinking;
    }
  }
  if (!input.gemma4 && input.reasoning_effort && !kwargs.contains("reasoning_effort")) {
    kwargs["reasoning_effort"] = *input.reasoning_effort;  // other templates read it directly
  }
  if (input.documents.is_array()) kwargs["documents"] = input.documents;
  const std::string bos = token_text_or_empty(tokenizer, tokenizer.bos_id());
  const std::string eos =
      tokenizer.eos_ids().empty() ? "" : token_text_or_empty(tokenizer, tokenizer.eos_ids()[0]);
  ChatPrompt out;
  const ChatContentFormat format = input.content_format.value_or(chat_template.content_format());
  out.text = apply_chat_template(chat_template, normalize_chat_messages(input.messages, format),
                                 input.tools, input.add_generation_prompt,
                                 input.continue_final_message, bos, eos, kwargs);
  out.token_ids = tokenizer.encode(out.text, input.add_special_tokens, /*parse_special=*/true);
  return out;
}

}  // namespace gemmaserve
