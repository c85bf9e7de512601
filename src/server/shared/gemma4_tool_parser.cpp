#include "server/shared/gemma4_tool_parser.h"

#include <memory>
#include <random>
#include <utility>

#include "core/logging.h"
#include "server/shared/special_token_text.h"

namespace gemmaserve {

namespace {

constexpr std::string_view kSpaces = " \t\n\r\f\v";
constexpr size_t kMaxHeaderBytes = 256;  // a longer "call:NAME" is not a call

std::string_view trim(std::string_view s) {
  size_t b = s.find_first_not_of(kSpaces);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(kSpaces) - b + 1);
}

// vLLM's name regex is [\w\-\.]+; any non-ASCII byte is let through as part of a \w letter.
bool is_name_char(char c) {
  auto u = static_cast<unsigned char>(c);
  return (u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') || (u >= '0' && u <= '9') || c == '_' ||
         c == '-' || c == '.' || u >= 0x80;
}

// The header text without its "call:" (or bare ":") prefix and surrounding whitespace.
std::string_view header_body(std::string_view header) {
  std::string_view h = trim(header);
  if (h.starts_with("call:")) {
    h.remove_prefix(5);
  } else if (h.starts_with(":")) {
    h.remove_prefix(1);
  }
  return trim(h);
}

// The function name in a header that ended (at '{' or <tool_call|>), or empty if it is not one.
std::string_view header_name(std::string_view header) {
  std::string_view name = header_body(header);
  for (char c : name) {
    if (!is_name_char(c)) return {};
  }
  return name;
}

// Whether more text could still turn `header` (no '{' yet) into a valid call header.
bool header_viable(std::string_view header) {
  std::string_view h = header.substr(std::min(header.size(), header.find_first_not_of(kSpaces)));
  if (std::string_view("call:").starts_with(h)) return true;
  std::string_view body = h.starts_with("call:") ? h.substr(5)
                          : h.starts_with(":")   ? h.substr(1)
                                                 : h;
  size_t k = std::min(body.size(), body.find_first_not_of(kSpaces));  // "call: name"
  while (k < body.size() && is_name_char(body[k])) ++k;
  return trim(body.substr(k)).empty();  // only whitespace may follow the name
}

bool ends_turn(std::string_view marker) { return marker == "<turn|>" || marker == "<eos>"; }

}  // namespace

ToolCallIdGenerator random_tool_call_ids() {
  auto rng = std::make_shared<std::mt19937_64>(std::random_device{}());
  return [rng] {
    static constexpr std::string_view kHex = "0123456789abcdef";
    std::string id = "chatcmpl-tool-";
    for (int i = 0; i < 32; i += 16) {
      uint64_t bits = (*rng)();
      for (int k = 0; k < 16; ++k, bits >>= 4) id += kHex[bits & 15];
    }
    return id;
  };
}

Gemma4ToolCallStream::Gemma4ToolCallStream(ToolCallIdGenerator ids) : ids_(std::move(ids)) {}

ToolParserDelta Gemma4ToolCallStream::feed(std::string_view text) {
  ToolParserDelta d;
  pending_.append(text);
  run(d, false);
  return d;
}

ToolParserDelta Gemma4ToolCallStream::finish() {
  ToolParserDelta d;
  run(d, true);
  if (state_ == State::kHeader) {
    fall_back_to_content(d, "output ended inside a call header");
  } else if (state_ == State::kArgs) {
    GS_LOG_WARNING << "gemma4 tool call '" << calls_.back().name
                   << "': output ended inside its arguments; closing them";
    end_call(d, false);
  }
  if (calls_.empty()) d.content += held_ws_;  // whitespace only goes when it touches a call
  held_ws_.clear();
  return d;
}

void Gemma4ToolCallStream::run(ToolParserDelta& d, bool final) {
  consume_markers(
      pending_, final, [&](std::string_view text) { on_text(d, text); },
      [&](std::string_view marker) { on_marker(d, marker); });
}

void Gemma4ToolCallStream::on_text(ToolParserDelta& d, std::string_view text) {
  switch (state_) {
    case State::kContent:
    case State::kMalformedCall:
      emit_content(d, text);
      break;
    case State::kAfterCall: {
      size_t b = text.find_first_not_of(kSpaces);
      if (b == std::string_view::npos) break;
      state_ = State::kContent;
      emit_content(d, text.substr(b));
      break;
    }
    case State::kHeader:
      header_.append(text);
      check_header(d);
      break;
    case State::kArgs:
      append_arguments(d, args_->feed(text));
      break;
    case State::kEnded:
      break;
  }
}

void Gemma4ToolCallStream::on_marker(ToolParserDelta& d, std::string_view marker) {
  if (state_ == State::kEnded) return;
  if (marker == kToolCallStart) {
    if (state_ == State::kHeader) fall_back_to_content(d, "call header without '{'");
    if (state_ == State::kArgs) end_call(d, args_->closed());
    header_.clear();  // held_ws_ waits: dropped if the call starts, kept if it is malformed
    state_ = State::kHeader;
  } else if (marker == kToolCallEnd) {
    if (state_ == State::kArgs) {
      end_call(d, true);
    } else if (state_ == State::kHeader) {
      end_header_without_brace(d);
    } else if (state_ == State::kMalformedCall) {
      state_ = State::kContent;
    }
  } else if (marker == kStringDelimiter) {
    if (state_ == State::kArgs) append_arguments(d, args_->feed(marker));
    if (state_ == State::kHeader) fall_back_to_content(d, "string delimiter in a call header");
  } else if (marker == kToolResponseStart || ends_turn(marker)) {
    if (state_ == State::kArgs) end_call(d, args_->closed());
    if (state_ == State::kHeader) fall_back_to_content(d, "turn ended inside a call header");
    if (state_ == State::kMalformedCall) state_ = State::kContent;
    // The model's stop token after its calls: whatever follows would be an invented tool result.
    if (marker == kToolResponseStart && !calls_.empty()) {
      state_ = State::kEnded;
      held_ws_.clear();
    }
  }
  // Every other marker is dropped: content never carries special-token text.
}

void Gemma4ToolCallStream::emit_content(ToolParserDelta& d, std::string_view text) {
  size_t last = text.find_last_not_of(kSpaces);
  if (last == std::string_view::npos) {
    held_ws_.append(text);
    return;
  }
  d.content += held_ws_;
  held_ws_.clear();
  d.content.append(text.substr(0, last + 1));
  held_ws_.assign(text.substr(last + 1));
}

void Gemma4ToolCallStream::check_header(ToolParserDelta& d) {
  size_t brace = header_.find('{');
  // The length rule looks only before the '{', so a header that arrives whole and one that
  // arrives in pieces are judged alike (found by fuzz/tool_call_fuzz.cpp).
  const size_t header_length = brace == std::string::npos ? header_.size() : brace;
  if (header_length > kMaxHeaderBytes) {
    fall_back_to_content(d, "malformed call header");
    return;
  }
  if (brace == std::string::npos) {
    if (!header_viable(header_)) fall_back_to_content(d, "malformed call header");
    return;
  }
  std::string_view name = header_name(std::string_view(header_).substr(0, brace));
  if (name.empty()) {
    fall_back_to_content(d, "malformed call name");
    return;
  }
  std::string rest = header_.substr(brace + 1);
  start_call(d, std::string(name));
  header_.clear();
  append_arguments(d, args_->feed(rest));
}

void Gemma4ToolCallStream::end_header_without_brace(ToolParserDelta& d) {
  std::string_view name = header_name(header_);
  if (name.empty()) {
    fall_back_to_content(d, "malformed call header");
    state_ = State::kContent;  // the region ended at <tool_call|>
    return;
  }
  start_call(d, std::string(name));
  header_.clear();
  end_call(d, true);
}

void Gemma4ToolCallStream::start_call(ToolParserDelta& d, std::string name) {
  held_ws_.clear();  // whitespace before a call is not content
  calls_.push_back(ToolCall{ids_(), std::move(name), "", false});
  ToolCallDelta& td = d.tool_calls.emplace_back();
  td.index = static_cast<int>(calls_.size()) - 1;
  td.id = calls_.back().id;
  td.name = calls_.back().name;
  args_.emplace();
  state_ = State::kArgs;
}

ToolCallDelta& Gemma4ToolCallStream::delta_for_current_call(ToolParserDelta& d) {
  int index = static_cast<int>(calls_.size()) - 1;
  if (d.tool_calls.empty() || d.tool_calls.back().index != index) {
    d.tool_calls.emplace_back().index = index;
  }
  return d.tool_calls.back();
}

void Gemma4ToolCallStream::append_arguments(ToolParserDelta& d, std::string_view fragment) {
  if (fragment.empty()) return;
  calls_.back().arguments.append(fragment);
  delta_for_current_call(d).arguments.append(fragment);
}

void Gemma4ToolCallStream::end_call(ToolParserDelta& d, bool complete) {
  append_arguments(d, args_->finish());
  calls_.back().complete = complete;
  args_.reset();
  state_ = State::kAfterCall;
}

void Gemma4ToolCallStream::fall_back_to_content(ToolParserDelta& d, std::string_view why) {
  GS_LOG_WARNING << "gemma4 tool call: " << why << "; returning it as content";
  state_ = State::kMalformedCall;
  std::string header = std::move(header_);
  header_.clear();
  emit_content(d, header);
}

ToolParseResult extract_gemma4_tool_calls(std::string_view text, ToolCallIdGenerator ids) {
  Gemma4ToolCallStream stream(std::move(ids));
  std::string content = stream.feed(text).content;
  content += stream.finish().content;
  ToolParseResult result;
  result.tool_calls = stream.tool_calls();
  if (result.tool_calls.empty() || !content.empty()) result.content = std::move(content);
  return result;
}

}  // namespace gemmaserve
