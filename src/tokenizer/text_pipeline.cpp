#include "tokenizer/text_pipeline.h"

#include <algorithm>
#include <utility>

#include "core/utf8.h"

namespace gemmaserve {

std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
  std::string out;
  if (from.empty()) return std::string(text);
  out.reserve(text.size());
  size_t pos = 0;
  for (size_t hit; (hit = text.find(from, pos)) != std::string_view::npos;
       pos = hit + from.size()) {
    out.append(text, pos, hit - pos).append(to);
  }
  out.append(text, pos);
  return out;
}

std::vector<NormalizerStep> gemma_normalizer() {
  return {NormalizerStep{NormalizerStep::Kind::kReplace, " ", "\u2581"}};
}

std::vector<PreTokenizerStep> gemma_pre_tokenizer() {
  return {PreTokenizerStep{" ", SplitBehavior::kMergedWithPrevious, false}};
}

std::vector<DecoderStep> gemma_decoder() {
  return {DecoderStep{DecoderStep::Kind::kReplace, "\u2581", " ", 0, 0},
          DecoderStep{DecoderStep::Kind::kByteFallback, "", "", 0, 0},
          DecoderStep{DecoderStep::Kind::kFuse, "", "", 0, 0}};
}

std::string Normalizer::apply(std::string_view text) const {
  std::string s(text);
  for (const NormalizerStep& step : steps_) {
    switch (step.kind) {
      case NormalizerStep::Kind::kReplace:
        s = replace_all(s, step.pattern, step.content);
        break;
      case NormalizerStep::Kind::kPrepend:
        if (!s.empty()) s.insert(0, step.content);  // HF prepends to non-empty strings only
        break;
    }
  }
  return s;
}

namespace {

struct Span {
  size_t begin;
  size_t end;
  bool is_match;
};

// tokenizers' NormalizedString::split: covering spans of `text`, then the behavior's regrouping.
void split_one(std::string_view text, const PreTokenizerStep& step,
               std::vector<std::string_view>& out) {
  std::vector<Span> spans;
  size_t pos = 0;
  if (!step.pattern.empty()) {
    for (size_t hit; (hit = text.find(step.pattern, pos)) != std::string_view::npos;
         pos = hit + step.pattern.size()) {
      if (hit > pos) spans.push_back({pos, hit, false});
      spans.push_back({hit, hit + step.pattern.size(), true});
    }
  }
  if (pos < text.size() || spans.empty()) spans.push_back({pos, text.size(), false});
  if (step.invert) {
    for (Span& s : spans) s.is_match = !s.is_match;
  }

  std::vector<Span> groups;  // is_match here means "remove"
  bool previous_match = false;
  switch (step.behavior) {
    case SplitBehavior::kIsolated:
      for (Span s : spans) groups.push_back({s.begin, s.end, false});
      break;
    case SplitBehavior::kRemoved:
      groups = spans;
      break;
    case SplitBehavior::kContiguous:
      for (Span s : spans) {
        if (s.is_match == previous_match && !groups.empty()) {
          groups.back().end = s.end;
        } else {
          groups.push_back({s.begin, s.end, false});
        }
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (Span s : spans) {
        if (s.is_match && !previous_match && !groups.empty()) {
          groups.back().end = s.end;
        } else {
          groups.push_back({s.begin, s.end, false});
        }
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && !groups.empty()) {
          groups.back().begin = it->begin;
        } else {
          groups.push_back({it->begin, it->end, false});
        }
        previous_match = it->is_match;
      }
      std::reverse(groups.begin(), groups.end());
      break;
  }
  for (const Span& g : groups) {
    if (!g.is_match && g.end > g.begin) out.push_back(text.substr(g.begin, g.end - g.begin));
  }
}

}  // namespace

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& words) const {
  if (text.empty()) return;
  std::vector<std::string_view> current{text};
  std::vector<std::string_view> next;
  for (const PreTokenizerStep& step : steps_) {
    next.clear();
    for (std::string_view piece : current) split_one(piece, step, next);
    current.swap(next);
  }
  words.insert(words.end(), current.begin(), current.end());
}

Decoder::Decoder(std::optional<std::vector<DecoderStep>> steps) : steps_(std::move(steps)) {
  if (!steps_) return;
  streamable_ = true;
  for (size_t i = 0; i < steps_->size(); ++i) {
    const DecoderStep& step = (*steps_)[i];
    if (step.kind == DecoderStep::Kind::kByteFallback) has_byte_fallback_ = true;
    // After Fuse a step sees the whole text at once, so a prefix of tokens cannot be decoded alone.
    if (step.kind == DecoderStep::Kind::kFuse && i + 1 != steps_->size()) streamable_ = false;
  }
}

std::optional<uint8_t> Decoder::byte_of_piece(std::string_view piece) {
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return std::nullopt;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  int hi = hex(piece[3]);
  int lo = hex(piece[4]);
  if (hi < 0 || lo < 0) return std::nullopt;
  return static_cast<uint8_t>(hi * 16 + lo);
}

namespace {

// The piece for a run of byte tokens: its text when valid UTF-8, else U+FFFD per byte (HF), or
// the raw bytes when asked to keep them.
void flush_bytes(std::string& bytes, bool raw_bytes, std::vector<std::string>& out) {
  if (bytes.empty()) return;
  if (raw_bytes || utf8::is_valid(bytes)) {
    out.push_back(std::move(bytes));
  } else {
    for (size_t i = 0; i < bytes.size(); ++i) out.emplace_back(utf8::kReplacementChar);
  }
  bytes.clear();
}

std::string strip_piece(const std::string& piece, const DecoderStep& step) {
  std::string_view s = piece;
  const std::string_view c = step.content;
  for (size_t i = 0; i < step.start && !c.empty() && s.substr(0, c.size()) == c; ++i) {
    s.remove_prefix(c.size());
  }
  for (size_t i = 0;
       i < step.stop && !c.empty() && s.size() >= c.size() && s.substr(s.size() - c.size()) == c;
       ++i) {
    s.remove_suffix(c.size());
  }
  return std::string(s);
}

}  // namespace

std::string Decoder::decode(std::vector<std::string> pieces, bool raw_bytes) const {
  std::string text;
  if (!steps_) {
    // tokenizers joins the pieces with spaces when a tokenizer has no decoder.
    for (size_t i = 0; i < pieces.size(); ++i) {
      if (i > 0) text.push_back(' ');
      text += pieces[i];
    }
    return text;
  }
  for (const DecoderStep& step : *steps_) {
    switch (step.kind) {
      case DecoderStep::Kind::kReplace:
        for (std::string& p : pieces) {
          if (p.find(step.pattern) != std::string::npos)
            p = replace_all(p, step.pattern, step.content);
        }
        break;
      case DecoderStep::Kind::kStrip:
        for (std::string& p : pieces) p = strip_piece(p, step);
        break;
      case DecoderStep::Kind::kFuse: {
        std::string fused;
        for (const std::string& p : pieces) fused += p;
        pieces.assign(1, std::move(fused));
        break;
      }
      case DecoderStep::Kind::kByteFallback: {
        std::vector<std::string> out;
        out.reserve(pieces.size());
        std::string bytes;
        for (std::string& p : pieces) {
          if (auto b = byte_of_piece(p)) {
            bytes.push_back(static_cast<char>(*b));
          } else {
            flush_bytes(bytes, raw_bytes, out);
            out.push_back(std::move(p));
          }
        }
        flush_bytes(bytes, raw_bytes, out);
        pieces.swap(out);
        break;
      }
    }
  }
  for (const std::string& p : pieces) text += p;
  return text;
}

}  // namespace gemmaserve
