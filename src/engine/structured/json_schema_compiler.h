// JSON Schema -> Grammar, with xgrammar's defaults as vLLM uses them: properties in the schema's
// order (optional ones may be left out), additionalProperties false when the schema lists
// properties and says nothing else (an object without properties takes any members), flexible
// whitespace between tokens (xgrammar's any_whitespace; runs capped at kMaxWhitespaceRun so a
// model cannot stall in blank space).
//
// Supported: type (and lists of types), properties, required, additionalProperties (bool or
// schema), enum, const, items, minItems, maxItems, anyOf, oneOf (as anyOf), allOf of one
// schema, $ref to "#", "#/$defs/..." or "#/definitions/...", minLength, maxLength, pattern,
// format (date-time, date, time, uuid, email, ipv4), integer minimum/maximum (and exclusive
// forms; on numbers they are an InputError). Annotations (title, description, default, examples,
// ...) are ignored; any other keyword is an InputError that names it.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/structured/grammar.h"

namespace gemmaserve::structured {

inline constexpr int kMaxWhitespaceRun = 16;

// How a schema's values are written.
struct SchemaSyntax {
  // Gemma 4's tool-argument syntax (gemma4_tool_call_grammar.h) instead of JSON text: no blank
  // space, bare keys in the chat template's sorted order, strings in <|"|> that never contain
  // one of `gemma4_markers`.
  bool gemma4 = false;
  std::vector<std::string> gemma4_markers;
  std::string gemma4_delimiter = "<|\"|>";  // or its token's private byte (Grammar::private_byte)
  // JSON's blank space between tokens: xgrammar's any_whitespace (capped runs) unless
  // disabled (vLLM's disable_any_whitespace) or given as a regex (whitespace_pattern).
  bool any_whitespace = true;
  std::optional<std::string> whitespace_pattern;
};

// Sets g's root to a rule matching the JSON texts valid under `schema`.
void compile_json_schema(Grammar* g, const nlohmann::ordered_json& schema,
                         const SchemaSyntax& syntax = {});

// A rule matching the values valid under `schema`, written in `syntax` (no root set).
Grammar::Symbol compile_schema_value(Grammar* g, const nlohmann::ordered_json& schema,
                                     const SchemaSyntax& syntax);

// A regex for the integers in [lo, hi] (either end open), canonical JSON digits.
std::string integer_range_regex(std::optional<int64_t> lo, std::optional<int64_t> hi);

// A rule for any JSON value (what {} and additionalProperties true allow).
Grammar::Symbol any_json_value(Grammar* g);

}  // namespace gemmaserve::structured
