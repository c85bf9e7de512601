// The AnswerConstraint a chat or completion request asks for: tool_choice "required" or a named
// function (whole Gemma 4 tool calls with schema-valid arguments), response_format json_object (one
// JSON object), structured outputs (json_schema, regex, choice, grammar). vLLM enforces both by
// structured output; here they are token masks the engine applies.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "gemmaserve/sampling_params.h"
#include "server/openai/openai_protocol.h"
#include "tokenizer/tokenizer.h"

namespace gemmaserve {

// tool_choice "required" (one or more calls to the request's tools) or a named function (exactly
// one call to it) as a Gemma 4 tool-call grammar: each call's arguments valid under the tool's
// parameter schema (engine/structured/gemma4_tool_call_grammar.h). The model may think first
// unless `prompt` closed the thought channel (thinking off). Nullopt when the vocabulary has no
// Gemma 4 tool-call marker.
std::optional<AnswerConstraint> tool_choice_constraint(const Tokenizer& tok, const ChatRequest& req,
                                                       std::string_view prompt);

// response_format json_object: one JSON object, never containing a Gemma 4 marker token
// (`gemma4`); after the thought channel when the chat `prompt` lets the model think (empty for
// completions: the answer starts at once).
AnswerConstraint json_object_constraint(const Tokenizer& tok, bool gemma4,
                                        std::string_view chat_prompt);

// Structured outputs (`kind` json | regex | choice | grammar, `spec` its text; the engine
// compiles it): the same marker and thought-channel rules as json_object.
AnswerConstraint structured_output_constraint(const Tokenizer& tok, bool gemma4,
                                              std::string_view chat_prompt, std::string kind,
                                              std::string spec);

// vLLM's disable_any_whitespace / whitespace_pattern on a json or json_object constraint: the
// kind becomes "json_with_whitespace" (json_object as the schema {"type": "object"}). Other kinds
// have no JSON blank space and are left as they are, as in vLLM.
void apply_json_whitespace(AnswerConstraint* c, bool disable_any_whitespace,
                           const std::optional<std::string>& whitespace_pattern);

// What a request's response_format / structured outputs ask for (json_object or a structured
// kind), with the request's and the server's JSON blank-space rules; nullopt when it asks neither.
// Without a tokenizer (`tok` null) it has no never list: the engine then refuses the request.
std::optional<AnswerConstraint> requested_answer_constraint(const Tokenizer* tok, bool gemma4,
                                                            std::string_view chat_prompt,
                                                            const GenerationRequest& req,
                                                            bool server_disable_any_whitespace);

// What both share: the never list (Gemma 4 markers, <unusedN>) and the leading thought channel.
AnswerConstraint text_answer_constraint(const Tokenizer& tok, bool gemma4,
                                        std::string_view chat_prompt);

}  // namespace gemmaserve
