#include "tokenizer/chat_template/chat_template.h"

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "io/gguf.h"
#include "io/json_file.h"
#include "tokenizer/chat_template/interpreter.h"
#include "tokenizer/chat_template/parser.h"
#include "tokenizer/chat_template/py_string.h"
#include "tokenizer/gguf_vocab.h"

namespace gemmaserve {

struct ChatTemplate::Program {
  jinja::Body body;
};

namespace {

namespace fs = std::filesystem;

[[noreturn]] void rethrow(const std::string& name, const jinja::TemplateError& e) {
  throw InputError(name + ":" + std::to_string(e.line()) + ": " + e.what());
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path.string() + ": cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The text of the final message that continue_final_message continues (transformers' rule).
std::string final_message_text(const nlohmann::ordered_json& messages) {
  if (!messages.is_array() || messages.empty()) {
    throw InputError("continue_final_message is set but there are no messages");
  }
  const auto& last = messages.back();
  const auto content =
      last.is_object() && last.contains("content") ? last["content"] : nlohmann::ordered_json();
  if (content.is_array()) {
    for (auto it = content.rbegin(); it != content.rend(); ++it) {
      if (it->is_object() && it->contains("text") && (*it)["text"].is_string()) {
        return (*it)["text"].get<std::string>();
      }
    }
    throw InputError(
        "continue_final_message is set but we could not find any text to continuein the final "
        "message!");
  }
  if (!content.is_string()) {
    throw InputError("continue_final_message is set but the final message has no text content");
  }
  return content.get<std::string>();
}

}  // namespace

ChatTemplate ChatTemplate::parse(std::string source, std::string name) {
  ChatTemplate t;
  t.name_ = std::move(name);
  t.source_ = std::move(source);
  auto program = std::make_shared<Program>();
  try {
    program->body = jinja::parse_template(t.source_);
  } catch (const jinja::TemplateError& e) {
    rethrow(t.name_, e);
  }
  t.content_format_ = detect_content_format(program->body);
  t.program_ = std::move(program);
  return t;
}

std::string ChatTemplate::render(const nlohmann::ordered_json& context) const {
  try {
    jinja::Value value = jinja::from_json(context);
    return render_value(value);
  } catch (const jinja::TemplateError& e) {
    throw InputError(name_ + ": " + e.what());
  }
}

std::string ChatTemplate::render(const nlohmann::json& context) const {
  try {
    jinja::Value value = jinja::from_json(context);
    return render_value(value);
  } catch (const jinja::TemplateError& e) {
    throw InputError(name_ + ": " + e.what());
  }
}

std::string ChatTemplate::render_value(const jinja::Value& context) const {
  if (!context.is_dict()) throw InputError(name_ + ": the template context must be an object");
  try {
    return jinja::render_template(program_->body, context);
  } catch (const jinja::TemplateError& e) {
    rethrow(name_, e);
  }
}

std::string apply_chat_template(const ChatTemplate& chat_template,
                                const nlohmann::ordered_json& messages,
                                const nlohmann::ordered_json& tools, bool add_generation_prompt,
                                bool continue_final_message, const std::string& bos_token,
                                const std::string& eos_token,
                                const nlohmann::ordered_json& chat_template_kwargs) {
  if (continue_final_message && add_generation_prompt) {
    throw InputError(
        "continue_final_message and add_generation_prompt are not compatible. Use "
        "continue_final_message when you want the model to continue the final message, and "
        "add_generation_prompt when you want to add a header that will prompt it to start a new "
        "assistant message instead.");
  }
  if (!messages.is_array()) throw InputError("messages must be a list");
  if (!tools.is_null() && !tools.is_array()) throw InputError("tools must be a list or null");
  if (!chat_template_kwargs.is_null() && !chat_template_kwargs.is_object()) {
    throw InputError("chat_template_kwargs must be an object");
  }
  // Hugging Face passes the special tokens first so that kwargs can override them.
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  context["bos_token"] = bos_token;
  context["eos_token"] = eos_token;
  if (chat_template_kwargs.is_object()) {
    for (const auto& [key, value] : chat_template_kwargs.items()) {
      if (key == "messages" || key == "tools" || key == "documents" ||
          key == "add_generation_prompt" || key == "continue_final_message") {
        throw InputError("chat_template_kwargs may not set '" + key + "'");
      }
      context[key] = value;
    }
  }
  context["messages"] = messages;
  context["tools"] = tools;
  context["documents"] = nullptr;
  context["add_generation_prompt"] = add_generation_prompt;
  std::string rendered = chat_template.render(context);
  if (!continue_final_message) return rendered;

  // transformers: cut after the final message's text, keeping its trailing whitespace only when
  // the template kept it.
  std::string final_message = final_message_text(messages);
  std::string stripped = jinja::py_strip(final_message, std::nullopt, true, true);
  std::string lstripped = jinja::py_strip(final_message, std::nullopt, true, false);
  size_t location = rendered.rfind(stripped);
  if (location == std::string::npos) {
    throw InputError(
        "continue_final_message is set but the final message does not appear in the chat after "
        "applying the chat template! This can happen if the chat template deletes portions of the "
        "final message. Please verify the chat template and final message in your chat to ensure "
        "they are compatible.");
  }
  if (rendered.compare(location, lstripped.size(), final_message) == 0 &&
      lstripped.size() == final_message.size()) {
    return rendered.substr(0, location + lstripped.size());
  }
  return rendered.substr(0, location + stripped.size());
}

std::optional<std::string> load_chat_template(const fs::path& model_dir) {
  if (!fs::is_directory(model_dir) && GgufFile::has_gguf_magic(model_dir)) {
    return gguf_chat_template(GgufFile(model_dir));
  }
  fs::path jinja_file = model_dir / "chat_template.jinja";
  if (fs::is_regular_file(jinja_file)) return read_text(jinja_file);
  fs::path config_file = model_dir / "tokenizer_config.json";
  if (!fs::is_regular_file(config_file)) return std::nullopt;
  nlohmann::json config = read_json_file(config_file);
  if (!config.is_object() || !config.contains("chat_template")) return std::nullopt;
  const auto& value = config["chat_template"];
  if (value.is_null()) return std::nullopt;
  if (value.is_string()) return value.get<std::string>();
  if (value.is_array()) {
    for (const auto& entry : value) {
      if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
          entry["template"].is_string()) {
        return entry["template"].get<std::string>();
      }
    }
    throw InputError(config_file.string() +
                     ": chat_template lists named templates but none is called \"default\"");
  }
  throw InputError(config_file.string() + ": chat_template must be a string or a list");
}

std::string resolve_chat_template_arg(const std::string& arg) {
  std::error_code ec;
  if (!arg.empty() && fs::is_regular_file(fs::path(arg), ec)) return read_text(arg);
  return arg;
}

}  // namespace gemmaserve
