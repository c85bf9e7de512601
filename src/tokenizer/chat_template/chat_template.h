// Chat templates: a checkpoint's Jinja2 template rendered the way Hugging Face's
// apply_chat_template renders it (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks,
// loopcontrols, HF's tojson, raise_exception and strftime_now).
#pragma once

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "tokenizer/chat_template/content_format.h"

namespace gemmaserve {

namespace jinja {
class Value;
}

class ChatTemplate {
 public:
  // Parses once; throws InputError "<name>:<line>: <message>" for syntax errors and unknown
  // filters or tests.
  static ChatTemplate parse(std::string source, std::string name);

  // Renders with `context` (a JSON object) as the template variables. Throws InputError
  // "<name>:<line>: <message>" for raise_exception() and runtime errors. Dict order is the
  // context's order, so pass an ordered_json to keep the client's key order (tojson, items()).
  std::string render(const nlohmann::ordered_json& context) const;
  std::string render(const nlohmann::json& context) const;

  const std::string& name() const { return name_; }
  const std::string& source() const { return source_; }
  // How vLLM hands this template message content (detected once, at parse).
  ChatContentFormat content_format() const { return content_format_; }

  struct Program;

 private:
  ChatTemplate() = default;
  std::string render_value(const jinja::Value& context) const;

  std::string name_;
  std::string source_;
  std::shared_ptr<const Program> program_;
  ChatContentFormat content_format_ = ChatContentFormat::kString;
};

// transformers' apply_chat_template(tokenize=False): the template sees messages, tools (None when
// null), documents (None), add_generation_prompt, bos_token, eos_token and chat_template_kwargs
// (which may override the tokens). With continue_final_message the output is cut after the final
// message's content, exactly as transformers does; setting both flags is an InputError.
std::string apply_chat_template(const ChatTemplate& chat_template,
                                const nlohmann::ordered_json& messages,
                                const nlohmann::ordered_json& tools, bool add_generation_prompt,
                                bool continue_final_message, const std::string& bos_token,
                                const std::string& eos_token,
                                const nlohmann::ordered_json& chat_template_kwargs);

// The checkpoint's template: chat_template.jinja, else tokenizer_config.json's "chat_template"
// (a string, or a list of {name, template} from which "default" is taken); nullopt when neither.
// A GGUF file's is its tokenizer.chat_template.
std::optional<std::string> load_chat_template(const std::filesystem::path& model_dir);

// vLLM's --chat-template rule: an existing file path is read, anything else is the template text.
std::string resolve_chat_template_arg(const std::string& arg);

}  // namespace gemmaserve
