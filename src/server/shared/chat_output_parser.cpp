#include "server/shared/chat_output_parser.h"

namespace gemmaserve {

ChatOutputParser::ChatOutputParser(const ChatParseOptions& options, ToolCallIdGenerator ids)
    : options_(options) {
  if (options.parse_reasoning) reasoning_.emplace(options.starts_in_thought_channel);
  if (options.parse_tools) {
    tools_.emplace(std::move(ids));
  } else if (options.strip_markers || options.parse_reasoning) {
    filter_.emplace();
  }
}

const std::vector<ToolCall>& ChatOutputParser::tool_calls() const {
  return tools_ ? tools_->tool_calls() : no_calls_;
}

void ChatOutputParser::pass_content(ChatOutputDelta& d, std::string_view text, bool final) {
  if (tools_) {
    ToolParserDelta t = tools_->feed(text);
    d.content += t.content;
    for (auto& c : t.tool_calls) d.tool_calls.push_back(std::move(c));
    if (final) {
      ToolParserDelta end = tools_->finish();
      d.content += end.content;
      for (auto& c : end.tool_calls) d.tool_calls.push_back(std::move(c));
    }
  } else if (filter_) {
    d.content += filter_->feed(text);
    if (final) d.content += filter_->finish();
  } else {
    d.content += text;
  }
}

ChatOutputDelta ChatOutputParser::feed(std::string_view text) {
  ChatOutputDelta d;
  if (reasoning_) {
    ReasoningDelta r = reasoning_->feed(text);
    if (options_.include_reasoning) d.reasoning = std::move(r.reasoning);
    pass_content(d, r.content, false);
  } else {
    pass_content(d, text, false);
  }
  return d;
}

ChatOutputDelta ChatOutputParser::finish() {
  ChatOutputDelta d;
  if (reasoning_) {
    ReasoningDelta r = reasoning_->finish();
    if (options_.include_reasoning) d.reasoning = std::move(r.reasoning);
    pass_content(d, r.content, true);
  } else {
    pass_content(d, "", true);
  }
  return d;
}

ChatMessageParts parse_chat_output(std::string_view text, const ChatParseOptions& options,
                                   ToolCallIdGenerator ids) {
  ChatOutputParser parser(options, std::move(ids));
  ChatOutputDelta a = parser.feed(text);
  ChatOutputDelta b = parser.finish();
  ChatMessageParts out;
  std::string content = a.content + b.content;
  std::string reasoning = a.reasoning + b.reasoning;
  out.tool_calls = parser.tool_calls();
  const bool blank = content.find_first_not_of(" \t\r\n") == std::string::npos;
  if (!(out.tool_calls.size() > 0 && blank)) out.content = std::move(content);
  if (!reasoning.empty()) out.reasoning = std::move(reasoning);
  return out;
}

}  // namespace gemmaserve
