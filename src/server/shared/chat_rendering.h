// A chat request's prompt: the chat template rendered over messages (post-processed as vLLM does:
// chat_message_normalizer), tools, documents and the merged chat_template_kwargs
// (reasoning_effort mapped to enable_thinking for Gemma 4), then tokenized. Shared by POST
// /v1/chat/completions, POST /tokenize and the offline LLM::chat.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/chat_template/chat_template.h"

namespace gemmaserve {

class Tokenizer;

struct ChatPromptInput {
  nlohmann::ordered_json messages;
  nlohmann::ordered_json tools;      // null or an array
  nlohmann::ordered_json documents;  // null or an array
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  nlohmann::ordered_json default_kwargs = nlohmann::ordered_json::object();  // server's
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();          // request's, win
  std::optional<std::string> reasoning_effort;
  bool gemma4 = false;
  bool add_special_tokens = false;  // chat default: the template writes <bos>
  // --chat-template-content-format; nullopt ("auto"): the template's detected format, as vLLM.
  std::optional<ChatContentFormat> content_format;
};

struct ChatPrompt {
  std::string text;
  std::vector<int32_t> token_ids;
};

// Throws InputError for template errors (raise_exception, bad kwargs) and bad efforts.
ChatPrompt render_chat_prompt(const ChatTemplate& chat_template, const Tokenizer& tokenizer,
                              const ChatPromptInput& input);

// The checkpoint's bos/eos token texts for the template ("<bos>", "<eos>").
std::string token_text_or_empty(const Tokenizer& tokenizer, int32_t id);

}  // namespace gemmaserve
