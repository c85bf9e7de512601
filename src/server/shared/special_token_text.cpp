#include "server/shared/special_token_text.h"

#include <algorithm>
#include <array>

namespace gemmaserve {

namespace {

constexpr std::array<std::string_view, 22> kMarkers = {
    "<|channel>",       "<channel|>", "<|tool_call>",
    "<tool_call|>",     "<|\"|>",     "<|tool_response>",
    "<tool_response|>", "<turn|>",    "<eos>",
    "<|turn>",          "<bos>",      "<pad>",
    "<|think|>",        "<|tool>",    "<tool|>",
    "<|image>",         "<image|>",   "<|image|>",
    "<|audio>",         "<audio|>",   "<|audio|>",
    "<|video|>",
};

constexpr size_t kLongestMarker = [] {
  size_t n = 0;
  for (std::string_view m : kMarkers) n = std::max(n, m.size());
  return n;
}();

bool is_continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

}  // namespace

std::span<const std::string_view> gemma4_marker_texts() { return kMarkers; }

std::string_view marker_at(std::string_view text, size_t pos) {
  if (pos >= text.size() || text[pos] != '<') return {};
  std::string_view rest = text.substr(pos);
  for (std::string_view m : kMarkers) {
    if (rest.starts_with(m)) return m;
  }
  return {};
}

MarkerMatch find_marker(std::string_view text, size_t from) {
  for (size_t pos = text.find('<', from); pos != std::string_view::npos;
       pos = text.find('<', pos + 1)) {
    std::string_view m = marker_at(text, pos);
    if (!m.empty()) return {pos, m};
  }
  return {};
}

size_t partial_marker_suffix(std::string_view text) {
  // Every marker starts with '<', so only suffixes starting at a '<' near the end can qualify.
  size_t start = text.size() > kLongestMarker ? text.size() - kLongestMarker : 0;
  for (size_t pos = text.find('<', start); pos != std::string_view::npos;
       pos = text.find('<', pos + 1)) {
    std::string_view tail = text.substr(pos);
    for (std::string_view m : kMarkers) {
      if (tail.size() < m.size() && m.starts_with(tail)) return tail.size();
    }
  }
  return 0;
}

size_t incomplete_utf8_suffix(std::string_view text) {
  size_t n = text.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    auto lead = static_cast<unsigned char>(text[n - back]);
    if (is_continuation(lead)) continue;
    size_t need = 0;
    if (lead >= 0xC2 && lead <= 0xDF) need = 2;
    if (lead >= 0xE0 && lead <= 0xEF) need = 3;
    if (lead >= 0xF0 && lead <= 0xF4) need = 4;
    if (need <= back) return 0;  // ASCII, an invalid lead byte, or a complete sequence
    // The second byte's range depends on the lead (no overlongs, surrogates or > U+10FFFF).
    if (back >= 2) {
      auto second = static_cast<unsigned char>(text[n - back + 1]);
      unsigned char lo = 0x80;
      unsigned char hi = 0xBF;
      if (lead == 0xE0) lo = 0xA0;
      if (lead == 0xED) hi = 0x9F;
      if (lead == 0xF0) lo = 0x90;
      if (lead == 0xF4) hi = 0x8F;
      if (second < lo || second > hi) return 0;
    }
    return back;
  }
  return 0;
}

size_t unresolved_suffix(std::string_view text) {
  return std::max(partial_marker_suffix(text), incomplete_utf8_suffix(text));
}

void consume_markers(std::string& pending, bool final, FunctionRef<void(std::string_view)> on_text,
                     FunctionRef<void(std::string_view)> on_marker) {
  size_t i = 0;
  for (MarkerMatch m = find_marker(pending); m.pos != std::string_view::npos;
       m = find_marker(pending, i)) {
    on_text(std::string_view(pending).substr(i, m.pos - i));
    on_marker(m.marker);
    i = m.pos + m.marker.size();
  }
  const std::string_view rest = std::string_view(pending).substr(i);
  const size_t keep = final ? 0 : unresolved_suffix(rest);
  on_text(rest.substr(0, rest.size() - keep));
  pending.erase(0, pending.size() - keep);
}

std::string strip_special_token_text(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  for (MarkerMatch m = find_marker(text); m.pos != std::string_view::npos;
       m = find_marker(text, i)) {
    out.append(text.substr(i, m.pos - i));
    i = m.pos + m.marker.size();
  }
  out.append(text.substr(i));
  return out;
}

std::string SpecialTokenTextFilter::feed(std::string_view delta) {
  pending_.append(delta);
  size_t keep = unresolved_suffix(pending_);
  std::string out =
      strip_special_token_text(std::string_view(pending_).substr(0, pending_.size() - keep));
  pending_.erase(0, pending_.size() - keep);
  return out;
}

std::string SpecialTokenTextFilter::finish() {
  std::string out = std::move(pending_);
  pending_.clear();
  return out;  // a partial marker at the very end is ordinary text
}

}  // namespace gemmaserve
