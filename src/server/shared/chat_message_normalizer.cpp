#include "server/shared/chat_message_normalizer.h"

#include <optional>
#include <string>

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

// A tool result sent as text parts becomes one string, as in vLLM (null content: ""); a list
// with any other part stays a list.
void normalize_tool_content(ordered_json& message) {
  auto content = message.find("content");
  if (content == message.end() || content->is_null()) {
    message["content"] = "";
    return;
  }
  if (!content->is_array()) return;
  std::string joined;
  bool first = true;
  for (const ordered_json& part : *content) {
    if (!part.is_object() || part.value("type", ordered_json()) != "text") return;
    const auto text = part.find("text");
    if (text == part.end() || !text->is_string()) continue;  // vLLM skips a text part without text
    if (!first) joined += '\n';
    first = false;
    joined += text->get<std::string>();
  }
  *content = joined;
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

ordered_json normalize_chat_messages(const ordered_json& messages) {
  ordered_json out = messages;
  if (!out.is_array()) return out;
  for (ordered_json& message : out) {
    if (!message.is_object()) continue;
    const auto role = message.find("role");
    if (role == message.end() || !role->is_string()) continue;
    if (*role == "assistant") normalize_tool_calls(message);
    if (*role == "tool") normalize_tool_content(message);
  }
  return out;
}

}  // namespace gemmaserve
