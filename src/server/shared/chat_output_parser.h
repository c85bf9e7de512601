// One chat choice's model text turned into what a client sees: reasoning, content and tool calls,
// streamed or whole. Chains the Gemma 4 reasoning parser, then the tool-call parser (or, without
// tools, the special-token filter), so no raw marker text reaches a client. Shared by the HTTP
// server and the offline LLM::chat.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/shared/gemma4_reasoning_parser.h"
#include "server/shared/gemma4_tool_parser.h"
#include "server/shared/special_token_text.h"

namespace gemmaserve {

struct ChatParseOptions {
  bool parse_reasoning = false;   // Gemma 4 thought channel -> reasoning
  bool parse_tools = false;       // Gemma 4 tool calls -> tool_calls
  bool strip_markers = false;     // remove Gemma 4 control-token text from content
  bool include_reasoning = true;  // false drops the reasoning (vLLM's include_reasoning)
  bool starts_in_thought_channel = false;
};

struct ChatOutputDelta {
  std::string reasoning;
  std::string content;
  std::vector<ToolCallDelta> tool_calls;
  bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
};

struct ChatMessageParts {
  std::optional<std::string> content;
  std::optional<std::string> reasoning;
  std::vector<ToolCall> tool_calls;
};

class ChatOutputParser {
 public:
  explicit ChatOutputParser(const ChatParseOptions& options,
                            ToolCallIdGenerator ids = random_tool_call_ids());

  ChatOutputDelta feed(std::string_view text);
  ChatOutputDelta finish();

  const std::vector<ToolCall>& tool_calls() const;

 private:
  void pass_content(ChatOutputDelta& d, std::string_view text, bool final);

  ChatParseOptions options_;
  std::optional<Gemma4ReasoningStream> reasoning_;
  std::optional<Gemma4ToolCallStream> tools_;
  std::optional<SpecialTokenTextFilter> filter_;
  std::vector<ToolCall> no_calls_;
};

// Whole-output form: content is nullopt when tool calls were found and nothing else was said.
ChatMessageParts parse_chat_output(std::string_view text, const ChatParseOptions& options,
                                   ToolCallIdGenerator ids = random_tool_call_ids());

}  // namespace gemmaserve
