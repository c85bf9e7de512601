// Gemma 4 tool calls (<|tool_call>call:NAME{key:<|"|>text<|"|>,n:42}<tool_call|>) turned into
// OpenAI tool_calls with JSON arguments, for whole outputs and for streamed text deltas.
//
// Input is the model's text decoded without skipping special tokens (after the reasoning parser
// when thinking is parsed). The returned content never contains marker text: every marker in
// gemma4_marker_texts() is removed, so the HTTP layer can send it as is.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/shared/gemma4_value_syntax.h"

namespace gemmaserve {

// Makes the id of each new call. Injectable so tests are deterministic.
using ToolCallIdGenerator = std::function<std::string()>;

// vLLM's ids ("chatcmpl-tool-" + 32 random lowercase hex digits), from a generator seeded once
// by std::random_device and owned by the returned function.
ToolCallIdGenerator random_tool_call_ids();

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // a JSON object, as json.dumps writes it ({"k": "v", "n": 42})
  // <tool_call|> (or another end of the call) was seen; false when the output stopped inside
  // the call (e.g. max_tokens), in which case the arguments were closed best-effort.
  bool complete = false;
};

struct ToolParseResult {
  // Text outside the calls. When calls were found, whitespace next to them is dropped and an
  // empty remainder is nullopt (vLLM's content=None); without calls it is the whole text minus
  // marker text, always present.
  std::optional<std::string> content;
  std::vector<ToolCall> tool_calls;
};

// One entry of an OpenAI streaming delta.tool_calls[]. A call's first entry carries id and name
// (send type "function" with them); the arguments fragments of one index concatenate to the
// call's final arguments string.
struct ToolCallDelta {
  int index = 0;
  std::optional<std::string> id;
  std::optional<std::string> name;
  std::string arguments;
};

struct ToolParserDelta {
  std::string content;
  std::vector<ToolCallDelta> tool_calls;
  bool empty() const { return content.empty() && tool_calls.empty(); }
};

// Streaming parser for one choice. feed() each text delta, then finish() once at the end of
// generation. Text is held back only while it cannot be classified yet: a partial marker, a
// cut-short UTF-8 character, trailing whitespace (dropped if a call follows), a call header
// until its '{', a bare value until its terminator. For every chunking of the same text the
// concatenated deltas are identical, and they equal extract_gemma4_tool_calls().
//
// Behaviour (vLLM's gemma4 parser unless noted):
//  - a call is <|tool_call>call:NAME{ARGS}<tool_call|>; NAME is [A-Za-z0-9_.-] or non-ASCII.
//    Also accepted (not vLLM): ":NAME{" and "NAME{" (the bare opener of vLLM #53431), and
//    "call:NAME<tool_call|>" with no braces (arguments "{}").
//  - several calls in a row, content before, between and after them (vLLM drops content after
//    the first call in non-streaming mode but streams it; both modes keep it here).
//  - <|tool_response> after a call ends the turn (the model's stop token): the rest is dropped.
//    It, <turn|>, <eos> or a new <|tool_call> inside a call's arguments also end that call.
//  - a call cut off by the end of output is returned with its arguments closed and
//    complete=false (vLLM returns the raw text as content).
//  - a malformed header (bad name, <|"|> in it, over 256 bytes, cut off before its '{') is never
//    thrown: the text up to <tool_call|> becomes content, minus marker text, and a warning is
//    logged. Whitespace before it stays content too.
//  - finish_reason "tool_calls" belongs to outputs where tool_calls() is not empty.
class Gemma4ToolCallStream {
 public:
  explicit Gemma4ToolCallStream(ToolCallIdGenerator ids = random_tool_call_ids());

  ToolParserDelta feed(std::string_view text);
  ToolParserDelta finish();

  // Calls so far, with their arguments streamed so far.
  const std::vector<ToolCall>& tool_calls() const { return calls_; }

 private:
  enum class State { kContent, kAfterCall, kHeader, kArgs, kMalformedCall, kEnded };

  void run(ToolParserDelta& d, bool final);
  void on_text(ToolParserDelta& d, std::string_view text);
  void on_marker(ToolParserDelta& d, std::string_view marker);
  void emit_content(ToolParserDelta& d, std::string_view text);
  // Looks at header_ after new text: starts the call at '{', or falls back on a bad header.
  void check_header(ToolParserDelta& d);
  // <tool_call|> came before any '{': a call with no arguments when the header is a bare name,
  // otherwise content.
  void end_header_without_brace(ToolParserDelta& d);
  void start_call(ToolParserDelta& d, std::string name);
  void append_arguments(ToolParserDelta& d, std::string_view fragment);
  void end_call(ToolParserDelta& d, bool complete);
  void fall_back_to_content(ToolParserDelta& d, std::string_view why);
  ToolCallDelta& delta_for_current_call(ToolParserDelta& d);

  ToolCallIdGenerator ids_;
  State state_ = State::kContent;
  std::string pending_;  // raw input not yet classified
  std::string held_ws_;  // trailing content whitespace: emitted before more content
  std::string header_;   // text after <|tool_call>, until '{'
  std::optional<Gemma4ArgsToJson> args_;
  std::vector<ToolCall> calls_;
};

// Whole-output form: the streaming parser fed `text` in one piece.
ToolParseResult extract_gemma4_tool_calls(std::string_view text,
                                          ToolCallIdGenerator ids = random_tool_call_ids());

}  // namespace gemmaserve
