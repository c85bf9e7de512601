#include "server/openai/answer_constraints.h"

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "server/shared/gemma4_reasoning_parser.h"
#include "server/shared/special_token_text.h"

namespace gemmaserve {
namespace {

// The id of a marker that is one token of this vocabulary, or -1.
int32_t single_token_id(const Tokenizer& tok, std::string_view marker) {
  const std::vector<int32_t> ids =
      tok.encode(marker, /*add_special=*/false, /*parse_special=*/true);
  return ids.size() == 1 ? ids[0] : -1;
}

// Lets the answer follow a thought channel, unless the chat prompt closed it (thinking off).
void allow_leading_thought(const Tokenizer& tok, std::string_view prompt, AnswerConstraint* c) {
  const size_t end = prompt.find_last_not_of(" \t\r\n");
  const bool thinking_off =
      end != std::string_view::npos && prompt.substr(0, end + 1).ends_with(kChannelEnd);
  if (thinking_off) return;
  c->lead_open = single_token_id(tok, kChannelStart);
  c->lead_close = single_token_id(tok, kChannelEnd);
  if (c->lead_open < 0 || c->lead_close < 0) c->lead_open = c->lead_close = -1;
  c->starts_inside_lead = c->lead_open >= 0 && prompt_ends_in_open_thought_channel(prompt);
}

}  // namespace

std::optional<AnswerConstraint> tool_choice_constraint(const Tokenizer& tok, const ChatRequest& req,
                                                       std::string_view prompt) {
  if (single_token_id(tok, kToolCallStart) < 0) return std::nullopt;
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();
  for (const auto& t : req.tools) {
    const auto& fn = t["function"];
    if (req.tool_choice == "function" && fn["name"] != *req.tool_choice_function) continue;
    tools.push_back({{"name", fn["name"]},
                     {"parameters", fn.contains("parameters") ? fn["parameters"] : nullptr}});
  }
  nlohmann::ordered_json markers = nlohmann::ordered_json::array();
  for (std::string_view m : gemma4_marker_texts()) markers.push_back(std::string(m));
  // vLLM: one call to the named function; "required" an array of at least one call.
  AnswerConstraint c = text_answer_constraint(tok, /*gemma4=*/true, prompt);
  // The call's own markers are its syntax (written by their tokens), not stray marker text.
  nlohmann::ordered_json marker_tokens = nlohmann::ordered_json::object();
  for (std::string_view syntax : {kToolCallStart, kToolCallEnd, kStringDelimiter}) {
    const int32_t id = single_token_id(tok, syntax);
    if (id < 0) continue;
    std::erase(c.never, id);
    marker_tokens[std::string(syntax)] = id;
  }
  const nlohmann::ordered_json spec = {
      {"tools", std::move(tools)},
      {"calls", req.tool_choice == "function" ? "one" : "one_or_more"},
      {"markers", std::move(markers)},
      {"marker_tokens", std::move(marker_tokens)}};
  c.structured_kind = "gemma4_tool_call";
  c.structured_spec = spec.dump();
  return c;
}

AnswerConstraint json_object_constraint(const Tokenizer& tok, bool gemma4,
                                        std::string_view chat_prompt) {
  AnswerConstraint c = text_answer_constraint(tok, gemma4, chat_prompt);
  c.json_object = true;
  return c;
}

AnswerConstraint structured_output_constraint(const Tokenizer& tok, bool gemma4,
                                              std::string_view chat_prompt, std::string kind,
                                              std::string spec) {
  AnswerConstraint c = text_answer_constraint(tok, gemma4, chat_prompt);
  c.structured_kind = std::move(kind);
  c.structured_spec = std::move(spec);
  return c;
}

void apply_json_whitespace(AnswerConstraint* c, bool disable_any_whitespace,
                           const std::optional<std::string>& whitespace_pattern) {
  if (!disable_any_whitespace && !whitespace_pattern) return;
  std::string schema;
  if (c->json_object) {
    schema = R"({"type":"object"})";
  } else if (c->structured_kind == "json") {
    schema = c->structured_spec;
  } else {
    return;
  }
  c->json_object = false;
  c->structured_kind = "json_with_whitespace";
  c->structured_spec = nlohmann::ordered_json{
      {"schema", schema},
      {"any_whitespace", !disable_any_whitespace},
      {"whitespace_pattern",
       whitespace_pattern
           ? nlohmann::ordered_json(*whitespace_pattern)
           : nullptr}}.dump();
}

AnswerConstraint text_answer_constraint(const Tokenizer& tok, bool gemma4,
                                        std::string_view chat_prompt) {
  AnswerConstraint c;
  if (gemma4) {
    for (std::string_view marker : gemma4_marker_texts()) {
      if (const int32_t id = single_token_id(tok, marker); id >= 0) c.never.push_back(id);
    }
    // Gemma's reserved <unusedN> tokens decode to their name: never JSON the model meant.
    for (int32_t id = 0; id < static_cast<int32_t>(tok.vocab_size()); ++id) {
      if (!tok.contains(id)) continue;
      const std::string_view piece = tok.id_to_piece(id);
      if (piece.starts_with("<unused") && piece.ends_with(">")) c.never.push_back(id);
    }
  }
  if (!chat_prompt.empty()) allow_leading_thought(tok, chat_prompt, &c);
  return c;
}

std::optional<AnswerConstraint> requested_answer_constraint(const Tokenizer* tok, bool gemma4,
                                                            std::string_view chat_prompt,
                                                            const GenerationRequest& req,
                                                            bool server_disable_any_whitespace) {
  if (!req.json_object && req.structured_kind.empty()) return std::nullopt;
  AnswerConstraint c = tok ? text_answer_constraint(*tok, gemma4, chat_prompt) : AnswerConstraint{};
  c.json_object = req.json_object;
  c.structured_kind = req.structured_kind;
  c.structured_spec = req.structured_spec;
  apply_json_whitespace(&c, req.disable_any_whitespace || server_disable_any_whitespace,
                        req.whitespace_pattern);
  return c;
}

}  // namespace gemmaserve
