// Gemma 4 tool calls as a structured-output grammar (tool_choice "required" or a named
// function, as vLLM enforces them with a JSON schema): <|tool_call>call:NAME{ARGS}<tool_call|>
// with ARGS in Gemma's value syntax as the chat template's format_argument writes it
// ({key:<|"|>text<|"|>,n:5,ok:true,list:[1,2],obj:{k:null}}, keys sorted) and valid under the
// tool's parameter schema (json_schema_compiler.h does the schema, in SchemaSyntax::gemma4).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "engine/structured/grammar.h"
#include "engine/structured/json_schema_compiler.h"

namespace gemmaserve::structured {

inline constexpr std::string_view kGemma4ToolCallStart = "<|tool_call>";
inline constexpr std::string_view kGemma4ToolCallEnd = "<tool_call|>";
inline constexpr std::string_view kGemma4StringDelimiter = "<|\"|>";

// `spec`: {"tools": [{"name": NAME, "parameters": SCHEMA or null}, ...], "calls": "one" (exactly
// one call, a named function) or "one_or_more" (tool_choice "required"), "markers": [the texts
// a string value may not contain: every marker the tool parser acts on], "marker_tokens":
// {"<|tool_call>": ID, "<tool_call|>": ID, "<|\"|>": ID} (optional: these markers as private
// tokens, so only the marker token writes one, never its text spelled by others)}. Missing or empty
// parameters take no arguments ({}), as vLLM's schema for them. Sets g's root; InputError for a
// name the parser cannot read back, parameters that are not an object schema, or what
// compile_schema_value refuses.
void compile_gemma4_tool_calls(Grammar* g, const nlohmann::ordered_json& spec);

// --- the value syntax's pieces, for SchemaSyntax::gemma4 ---

// The text between <|"|> delimiters: any characters but ASCII controls other than tab, newline
// and carriage return, never containing one of `markers` (each starts with '<' and has no other).
Grammar::Symbol gemma4_free_text(Grammar* g, const std::vector<std::string>& markers);
// min..max (-1: unbounded) characters of such text, none of them '<': counting characters and
// tracking marker prefixes at once would multiply the rules.
Grammar::Symbol gemma4_bounded_text(Grammar* g, int min, int max);
// A value as format_argument writes it; InputError when a string in it holds a marker.
std::string gemma4_literal(const nlohmann::ordered_json& v, const SchemaSyntax& syntax);
// An object key: bare when the parser reads it back bare, else between delimiters.
std::string gemma4_key(const std::string& name, const SchemaSyntax& syntax);
// A key of additional properties: [A-Za-z_][A-Za-z0-9_]*.
Grammar::Symbol gemma4_any_key(Grammar* g);
// JSON's number with at most 16 integer digits and a 1-2 digit exponent: Python's float() (the
// parser's reading of a bare value with '.' or an exponent) never overflows it to a string.
Grammar::Symbol gemma4_number(Grammar* g);

}  // namespace gemmaserve::structured
