#include "server/shared/chat_message_normalizer.h"

#include <algorithm>
#include <optional>
#include <string>
#include <string_view>

#include "core/error.h"
#include "core/logging.h"
#include "io/json_shape.h"

namespace gemmaserve {
namespace {

using ordered_json = nlohmann::ordered_json;

// Deeper arguments would only exhaust the stack of the template's recursive value formatting.
constexpr int kMaxArgumentsDepth = 128;

struct ArgumentsTooDeep {};

// json.loads: parsed value, or nullopt when the text is not JSON (vLLM catches JSONDecodeError).
std::optional<ordered_json> parse_json_text(const std::string& text) {
  const JsonShape shape = json_shape(text);
  if (shape.widest_object > kMaxJsonObjectMembers) {
    throw InputError("tool call arguments have an object with more than " +
                         std::to_string(kMaxJsonObjectMembers) + " members",
                     "tool_calls");
  }
  if (shape.key_comparisons > kMaxJsonKeyComparisons) {
    throw InputError("tool call arguments have objects this large in all (parsing their " +
                         std::to_string(shape.key_comparisons) + " key comparisons exceeds " +
                         std::to_string(kMaxJsonKeyComparisons) + ")",
                     "tool_calls");
  }
  try {
    return ordered_json::parse(text,
                               [](int depth, ordered_json::parse_event_t event, ordered_json&) {
                                 if ((event == ordered_json::parse_event_t::object_start ||
                                      event == ordered_json::parse_event_t::array_start) &&
                                     depth >= kMaxArgumentsDepth) {
                                   throw ArgumentsTooDeep{};
                                 }
                                 return true;
                               });
  } catch (const ordered_json::parse_error&) {
    return std::nullopt;
  } catch (const ArgumentsTooDeep&) {
    throw InputError(
        "tool call arguments nest deeper than " + std::to_string(kMaxArgumentsDepth) + " levels",
        "tool_calls");
  }
}

bool is_falsy(const ordered_json& v) {  // Python truthiness of a JSON value
  if (v.is_null()) return true;
  if (v.is_boolean()) return !v.get<bool>();
  if (v.is_number()) return v == 0;
  if (v.is_string()) return v.get_ref<const std::string&>().empty();
  if (v.is_array() || v.is_object()) return v.empty();
  return false;
}

void normalize_tool_calls(ordered_json& message) {
  auto it = message.find("tool_calls");
  if (it == message.end()) return;
  if (it->is_null() || (it->is_array() && it->empty())) {
    message.erase(it);  // keeps templates on the plain assistant path, as vLLM does
    return;
  }
  if (!it->is_array()) return;
  for (ordered_json& call : *it) {
    if (!call.is_object()) {
      throw InputError("assistant tool_calls entries must be objects.", "tool_calls");
    }
    const auto type = call.find("type");
    const auto function = call.find("function");
    const bool is_function = type == call.end() || (type->is_string() && *type == "function");
    if (!is_function || function == call.end() || !function->is_object()) {
      throw InputError("chat completions only support assistant tool_calls of type 'function'.",
                       "tool_calls");
    }
    const auto arguments = function->find("arguments");
    (*function)["arguments"] = tool_call_arguments_object(
        arguments == function->end() ? ordered_json(nullptr) : *arguments);
  }
}

// The text of a vLLM text part: a bare string, or text/input_text/output_text (key "text"),
// refusal ("refusal") or thinking ("thinking"); nullopt for any other part.
std::optional<std::string> text_of_part(const ordered_json& part) {
  if (part.is_string()) return part.get<std::string>();
  if (!part.is_object()) return std::nullopt;
  const auto type = part.find("type");
  if (type == part.end() || !type->is_string()) return std::nullopt;
  const std::string& t = type->get_ref<const std::string&>();
  const char* key = t == "refusal"                                             ? "refusal"
                    : t == "thinking"                                          ? "thinking"
                    : (t == "text" || t == "input_text" || t == "output_text") ? "text"
                                                                               : nullptr;
  if (key == nullptr) return std::nullopt;
  const auto text = part.find(key);
  // vLLM skips a text or refusal part without its text.
  return text != part.end() && text->is_string() ? std::optional(text->get<std::string>())
                                                 : std::nullopt;
}

bool is_text_part_type(const ordered_json& part) {
  if (part.is_string()) return true;
  const auto type = part.is_object() ? part.find("type") : part.end();
  if (!part.is_object() || type == part.end() || !type->is_string()) return false;
  for (const char* t : {"text", "input_text", "output_text", "refusal", "thinking"}) {
    if (*type == t) return true;
  }
  return false;
}

bool is_image(const ordered_json& part) {
  return part.is_object() && part.value("type", ordered_json()) == "image";
}

// vLLM's "string" format: the texts joined with "\n", each image's <|image|> first unless the
// text already holds it (its _get_full_multimodal_text_prompt, interleave_mm_strings off).
std::string joined_text(const ordered_json& parts) {
  std::string text;
  bool first = true;
  size_t images = 0;
  for (const ordered_json& part : parts) {
    if (is_image(part)) {
      ++images;
      continue;
    }
    const std::optional<std::string> t = text_of_part(part);
    if (!t) {
      if (is_text_part_type(part)) continue;
      const auto type = part.is_object() ? part.find("type") : part.end();
      const bool named = part.is_object() && type != part.end() && type->is_string();
      throw InputError("Unsupported chat content part type: " +
                           (named ? "'" + type->get<std::string>() + "'" : part.dump()),
                       "messages");
    }
    if (t->empty()) continue;  // vLLM keeps only truthy parts
    if (!first) text += '\n';
    first = false;
    text += *t;
  }
  if (images == 0) return text;
  constexpr std::string_view kImage = "<|image|>";
  size_t written = 0;
  for (size_t at = text.find(kImage); at != std::string::npos; at = text.find(kImage, at + 1)) {
    ++written;
  }
  if (written > images) {
    throw InputError(
        "Found more '<|image|>' placeholders in input prompt than actual multimodal data items.",
        "messages");
  }
  std::string out;
  for (size_t i = written; i < images; ++i) {
    if (!out.empty()) out += '\n';
    out += kImage;
  }
  if (!text.empty()) out += (out.empty() ? "" : "\n") + text;
  return out;
}

// vLLM's "openai" format: every text part becomes {"type": "text", "text": ...} (parts without
// text dropped), images stay {"type": "image"}, any other part as sent.
ordered_json openai_parts(const ordered_json& parts) {
  ordered_json out = ordered_json::array();
  for (const ordered_json& part : parts) {
    if (!is_text_part_type(part)) {
      out.push_back(part);
    } else if (const std::optional<std::string> t = text_of_part(part)) {
      out.push_back({{"type", "text"}, {"text", *t}});
    }
  }
  return out;
}

// Message content as vLLM hands it to a template of `format`, for every role. Text given as a
// string stays that string (vLLM wraps it into one "openai" part; README says why not here).
void normalize_content(ordered_json& message, bool is_tool, ChatContentFormat format) {
  auto content = message.find("content");
  if (content == message.end() || content->is_null()) {
    const bool empty_list = format == ChatContentFormat::kOpenAi && !is_tool;
    message["content"] = empty_list ? ordered_json::array() : ordered_json("");
    return;
  }
  if (!content->is_array()) return;
  if (format == ChatContentFormat::kString) {
    *content = joined_text(*content);
    return;
  }
  ordered_json parts = openai_parts(*content);
  // A tool result of text parts only becomes one string, as in vLLM (any other part keeps the
  // list).
  const bool text_only = std::all_of(parts.begin(), parts.end(), [](const ordered_json& p) {
    return p.is_object() && p.value("type", ordered_json()) == "text";
  });
  if (is_tool && text_only) {
    std::string joined;
    for (size_t i = 0; i < parts.size(); ++i) {
      if (i > 0) joined += '\n';
      joined += parts[i]["text"].get<std::string>();
    }
    *content = joined;
    return;
  }
  *content = std::move(parts);
}

}  // namespace

ordered_json tool_call_arguments_object(const ordered_json& arguments) {
  if (is_falsy(arguments)) return ordered_json::object();
  ordered_json value = arguments;
  if (arguments.is_string()) {
    std::optional<ordered_json> parsed = parse_json_text(arguments.get<std::string>());
    if (!parsed) {
      GS_LOG_WARNING << "tool call arguments are not valid JSON ("
                     << arguments.get<std::string>().size()
                     << " chars); rendering an empty object so the conversation can continue";
      return ordered_json::object();
    }
    value = std::move(*parsed);
  }
  if (value.is_object()) return value;
  if (!value.is_null()) {
    GS_LOG_WARNING << "tool call arguments are a JSON " << value.type_name()
                   << ", not an object; rendering an empty object";
  }
  return ordered_json::object();
}

ordered_json normalize_chat_messages(const ordered_json& messages, ChatContentFormat format) {
  ordered_json out = messages;
  if (!out.is_array()) return out;
  for (ordered_json& message : out) {
    if (!message.is_object()) continue;
    const auto role = message.find("role");
    if (role == message.end() || !role->is_string()) continue;
    if (*role == "assistant") normalize_tool_calls(message);
    normalize_content(message, *role == "tool", format);
  }
  return out;
}

}  // namespace gemmaserve
