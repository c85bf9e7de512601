// Gemma 4 thinking: <|channel>thought\n...<channel|> split off the model's text into
// message.reasoning / delta.reasoning, for whole outputs and for streamed text deltas.
//
// Input is the model's text decoded without skipping special tokens. The content output keeps
// every marker except the channel delimiters, so the tool parser can read <|tool_call> and
// friends; pass it through Gemma4ToolCallStream (tools on) or SpecialTokenTextFilter (tools
// off) before it reaches a client. Reasoning output carries no marker text.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace gemmaserve {

struct ReasoningResult {
  // The thought text without its "thought\n" label and trailing whitespace; nullopt when no
  // thought channel was opened or it was empty (thinking off: <|channel>thought\n<channel|>).
  std::optional<std::string> reasoning;
  std::string content;
};

struct ReasoningDelta {
  std::string reasoning;
  std::string content;
  bool empty() const { return reasoning.empty() && content.empty(); }
};

// Streaming parser for one choice: feed() each text delta, finish() once at the end. For every
// chunking of the same text the concatenated deltas are identical and equal
// extract_gemma4_reasoning(); no delta holds part of a marker (partial markers, the undecided
// "thought\n" label and cut-short UTF-8 characters are held back until resolved).
//
// Behaviour, after vLLM's gemma4 reasoning parser and its newer engine-based Gemma4Parser:
//  - <|channel> opens the thought channel and <channel|> closes it; the "thought\n" label at its
//    start is dropped (a bare "thought" before <channel|> too). Several blocks concatenate.
//  - a channel never closed (max_tokens) leaves all of its text in reasoning.
//  - <|tool_call> inside the channel ends it (the model went straight to a call); the marker is
//    passed on as content for the tool parser.
//  - output that starts with "thought\n" without <|channel> (the spurious label vLLM strips, or a
//    prompt that already opened the channel) is reasoning.
//  - a stray <channel|> outside the channel and a repeated <|channel> inside it are dropped.
//  - not in vLLM: reasoning loses trailing whitespace (the template writes "\n<channel|>" when it
//    replays thoughts) and marker text; whitespace right after <channel|> is not content.
class Gemma4ReasoningStream {
 public:
  // `starts_in_thought_channel`: the prompt ends inside an open <|channel> (see
  // prompt_ends_in_open_thought_channel), so the output begins as reasoning.
  explicit Gemma4ReasoningStream(bool starts_in_thought_channel = false);

  ReasoningDelta feed(std::string_view text);
  ReasoningDelta finish();

  // A thought channel was opened (even an empty one).
  bool saw_thought_channel() const { return saw_channel_; }
  // Currently inside the thought channel (vLLM's is_reasoning_end negated).
  bool in_reasoning() const { return state_ == State::kLabel || state_ == State::kReasoning; }

 private:
  enum class State { kStart, kContent, kLabel, kReasoning, kAfterChannel };

  void run(ReasoningDelta& d, bool final);
  void on_text(ReasoningDelta& d, std::string_view text);
  void on_marker(ReasoningDelta& d, std::string_view marker);
  void emit_reasoning(ReasoningDelta& d, std::string_view text);
  // Leaves kStart/kLabel: whatever the label buffer held is content (kStart) or reasoning.
  void resolve_label(ReasoningDelta& d);
  void close_channel();

  State state_;
  bool saw_channel_;
  std::string pending_;  // raw input not yet classified
  std::string label_;    // start of the channel (or output) while it may still be "thought\n"
  std::string held_ws_;  // trailing reasoning whitespace, dropped if the channel closes
};

// Whole-output form: the streaming parser fed `text` in one piece.
ReasoningResult extract_gemma4_reasoning(std::string_view text,
                                         bool starts_in_thought_channel = false);

// Whether a rendered prompt ends inside an open thought channel: a <|channel> after the last
// <channel|>, <|tool_call>, <|turn> and <|tool_response> (vLLM's
// _prompt_ends_in_open_reasoning). The 31B template never does so; continuations may.
bool prompt_ends_in_open_thought_channel(std::string_view prompt);

// chat_template_kwargs.enable_thinking for a request, as vLLM maps it (PR #43401): an explicit
// enable_thinking wins; otherwise reasoning_effort "none" turns thinking off and
// "minimal"/"low"/"medium"/"high"/"xhigh"/"max" turn it on; nullopt leaves the template default
// (off for Gemma 4). Any other effort is an InputError.
std::optional<bool> gemma4_enable_thinking(std::optional<std::string_view> reasoning_effort,
                                           std::optional<bool> explicit_enable_thinking);

}  // namespace gemmaserve
