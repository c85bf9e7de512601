#include "server/shared/gemma4_reasoning_parser.h"

#include <array>

#include "core/error.h"
#include "server/shared/special_token_text.h"

namespace gemmaserve {

namespace {

constexpr std::string_view kThoughtLabel = "thought\n";
constexpr std::string_view kSpaces = " \t\n\r\f\v";

bool is_label_prefix(std::string_view text) { return kThoughtLabel.starts_with(text); }

}  // namespace

Gemma4ReasoningStream::Gemma4ReasoningStream(bool starts_in_thought_channel)
    : state_(starts_in_thought_channel ? State::kLabel : State::kStart),
      saw_channel_(starts_in_thought_channel) {}

ReasoningDelta Gemma4ReasoningStream::feed(std::string_view text) {
  ReasoningDelta d;
  pending_.append(text);
  run(d, false);
  return d;
}

ReasoningDelta Gemma4ReasoningStream::finish() {
  ReasoningDelta d;
  run(d, true);
  if (state_ == State::kStart) {
    d.content += label_;  // the output was a prefix of "thought\n" and nothing else
    state_ = State::kContent;
  }
  label_.clear();    // kLabel: an unfinished "thought\n" label is not reasoning
  held_ws_.clear();  // reasoning never ends in whitespace
  return d;
}

void Gemma4ReasoningStream::run(ReasoningDelta& d, bool final) {
  consume_markers(
      pending_, final, [&](std::string_view text) { on_text(d, text); },
      [&](std::string_view marker) { on_marker(d, marker); });
}

void Gemma4ReasoningStream::on_text(ReasoningDelta& d, std::string_view text) {
  switch (state_) {
    case State::kStart:
    case State::kLabel:
      label_.append(text);
      if (label_.starts_with(kThoughtLabel)) {
        std::string rest = label_.substr(kThoughtLabel.size());
        label_.clear();
        saw_channel_ = true;
        state_ = State::kReasoning;
        emit_reasoning(d, rest);
      } else if (!is_label_prefix(label_)) {
        resolve_label(d);
      }
      break;
    case State::kContent:
      d.content.append(text);
      break;
    case State::kAfterChannel: {
      size_t b = text.find_first_not_of(kSpaces);
      if (b == std::string_view::npos) break;
      state_ = State::kContent;
      d.content.append(text.substr(b));
      break;
    }
    case State::kReasoning:
      emit_reasoning(d, text);
      break;
  }
}

void Gemma4ReasoningStream::on_marker(ReasoningDelta& d, std::string_view marker) {
  if (marker == kChannelStart) {
    if (state_ == State::kLabel || state_ == State::kReasoning) return;  // already inside
    if (state_ == State::kStart) resolve_label(d);
    saw_channel_ = true;
    label_.clear();
    state_ = State::kLabel;
  } else if (marker == kChannelEnd) {
    if (state_ == State::kContent || state_ == State::kAfterChannel) return;  // stray close
    // kStart: the output began with the channel's label or its close (the prompt opened it).
    if (state_ == State::kStart) saw_channel_ = true;
    close_channel();
  } else if (marker == kToolCallStart) {
    // A call ends the channel implicitly; the marker is the tool parser's.
    if (state_ == State::kStart || (state_ == State::kLabel && !is_label_prefix(label_))) {
      resolve_label(d);
    }
    held_ws_.clear();
    label_.clear();
    state_ = State::kContent;
    d.content.append(marker);
  } else if (state_ == State::kLabel || state_ == State::kReasoning) {
    // Reasoning carries no marker text.
  } else {
    if (state_ == State::kStart) resolve_label(d);
    state_ = State::kContent;
    d.content.append(marker);
  }
}

void Gemma4ReasoningStream::emit_reasoning(ReasoningDelta& d, std::string_view text) {
  size_t last = text.find_last_not_of(kSpaces);
  if (last == std::string_view::npos) {
    held_ws_.append(text);
    return;
  }
  d.reasoning += held_ws_;
  held_ws_.clear();
  d.reasoning.append(text.substr(0, last + 1));
  held_ws_.assign(text.substr(last + 1));
}

void Gemma4ReasoningStream::resolve_label(ReasoningDelta& d) {
  std::string text = std::move(label_);
  label_.clear();
  if (state_ == State::kStart) {
    state_ = State::kContent;
    d.content += text;
  } else {
    state_ = State::kReasoning;
    emit_reasoning(d, text);
  }
}

void Gemma4ReasoningStream::close_channel() {
  held_ws_.clear();
  label_.clear();
  state_ = State::kAfterChannel;
}

ReasoningResult extract_gemma4_reasoning(std::string_view text, bool starts_in_thought_channel) {
  Gemma4ReasoningStream stream(starts_in_thought_channel);
  ReasoningDelta a = stream.feed(text);
  ReasoningDelta b = stream.finish();
  ReasoningResult result;
  std::string reasoning = a.reasoning + b.reasoning;
  if (!reasoning.empty()) result.reasoning = std::move(reasoning);
  result.content = a.content + b.content;
  return result;
}

bool prompt_ends_in_open_thought_channel(std::string_view prompt) {
  size_t open = prompt.rfind(kChannelStart);
  if (open == std::string_view::npos) return false;
  for (std::string_view boundary :
       {kChannelEnd, kToolCallStart, std::string_view("<|turn>"), kToolResponseStart}) {
    if (prompt.find(boundary, open) != std::string_view::npos) return false;
  }
  return true;
}

std::optional<bool> gemma4_enable_thinking(std::optional<std::string_view> reasoning_effort,
                                           std::optional<bool> explicit_enable_thinking) {
  static constexpr std::array<std::string_view, 6> kOn = {"minimal", "low",   "medium",
                                                          "high",    "xhigh", "max"};
  bool effort_known = !reasoning_effort || *reasoning_effort == "none";
  for (std::string_view level : kOn) effort_known = effort_known || *reasoning_effort == level;
  if (!effort_known) {
    throw InputError(
        "reasoning_effort must be one of none, minimal, low, medium, high, xhigh, "
        "max; got '" +
        std::string(*reasoning_effort) + "'");
  }
  if (explicit_enable_thinking) return explicit_enable_thinking;
  if (!reasoning_effort) return std::nullopt;
  return *reasoning_effort != "none";
}

}  // namespace gemmaserve
