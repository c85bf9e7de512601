// vLLM's structured-output request fields: response_format (text, json_object, json_schema),
// structured_outputs {json | regex | choice | grammar | json_object} (exactly one) and the
// legacy guided_json / guided_regex / guided_choice / guided_grammar. Protocol only: the spec is
// compiled (and refused with a 400) when the request reaches the engine.
#pragma once

#include <optional>
#include <string>

#include "server/openai/request_fields.h"

namespace gemmaserve {

struct StructuredOutputRequest {
  bool json_object = false;  // response_format json_object or structured_outputs.json_object
  std::string kind;          // "json" | "regex" | "choice" | "grammar"; empty = none
  std::string spec;          // the schema / regex / JSON list of choices / EBNF text
  // JSON's blank space (json and json_object; vLLM's structured_outputs options and the legacy
  // guided_whitespace_pattern): none at all, or what this regex matches.
  bool disable_any_whitespace = false;
  std::optional<std::string> whitespace_pattern;
};

// Throws ApiError (400 naming the field; 501 for structural tags) for a malformed field.
StructuredOutputRequest parse_structured_output_fields(RequestFields& f);

}  // namespace gemmaserve
