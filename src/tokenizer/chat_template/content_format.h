// vLLM's chat-template content format detection (vllm/renderers/hf.py _detect_content_format):
// a template that loops over a message's content (`for item in message['content']`, the message
// being a loop variable over `messages` or a variable set from it) gets content as OpenAI part
// lists ("openai"); any other template gets it as one string ("string").
#pragma once

#include <memory>
#include <optional>
#include <string_view>
#include <vector>

namespace gemmaserve {

namespace jinja {
struct Stmt;
}

enum class ChatContentFormat { kString, kOpenAi };

// vLLM's walk of the template's syntax tree. A template where that walk fails in vLLM (a matching
// assignment or loop with a tuple or namespace target) is "string", vLLM's default.
ChatContentFormat detect_content_format(const std::vector<std::unique_ptr<jinja::Stmt>>& body);

// "string" / "openai"; nullopt for "auto" (detect). InputError for anything else.
std::optional<ChatContentFormat> parse_content_format_option(std::string_view option);
std::string_view content_format_name(ChatContentFormat format);

}  // namespace gemmaserve
