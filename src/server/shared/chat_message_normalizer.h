// vLLM's post-processing of chat messages before the template renders them (its chat_utils
// _postprocess_messages and the tool-message rule of _parse_chat_message_content): an assistant
// tool call's `function.arguments`, a JSON string on the OpenAI wire, becomes the object chat
// templates walk, so Gemma 4 writes it in its own value syntax (call:f{city:<|"|>Lyon<|"|>}), and
// content parts reach the template as vLLM's detected content format hands them (a tool result of
// text parts becomes one string). Every chat path (chat completions,
// /tokenize with messages, LLM::chat) goes through it in render_chat_prompt.
#pragma once

#include <nlohmann/json.hpp>

#include "tokenizer/chat_template/content_format.h"

namespace gemmaserve {

// The messages as a template of `format` sees them; the input is not modified. For each assistant
// message: a null or empty tool_calls list is removed; each entry must be an object of type
// "function" with a "function" object (else InputError, param "tool_calls", vLLM's messages);
// arguments become tool_call_arguments_object's result. Content, every role, as vLLM's
// _parse_chat_message_content: null becomes "" ([] for non-tool roles in "openai"); a part list
// becomes its texts joined with "\n" and images' <|image|> first ("string"), or normalized text
// parts {"type": "text", "text"} with images kept ("openai", where a tool result of text parts only
// is joined with "\n"). InputError (param "messages") for a part "string" cannot render.
nlohmann::ordered_json normalize_chat_messages(const nlohmann::ordered_json& messages,
                                               ChatContentFormat format);

// vLLM's rule for one arguments value: an object stays; a string is parsed as JSON and kept when it
// is an object; everything else (absent, null, "", invalid JSON, JSON that is not an object, a
// number or an array sent as is) becomes {} so a bad call in the history never fails every later
// turn. Throws InputError only for JSON nested deeper than 128 levels.
nlohmann::ordered_json tool_call_arguments_object(const nlohmann::ordered_json& arguments);

}  // namespace gemmaserve
