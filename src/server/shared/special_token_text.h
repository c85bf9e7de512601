// Gemma 4 control-token text in output detokenized without skipping special tokens: which
// markers exist, finding them (also half-arrived at the end of a stream), and stripping them.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

#include "core/function_ref.h"

namespace gemmaserve {

// Every Gemma 4 control/user-defined token text the output parsers act on or must hide (ids from
// the tokenizer's GGUF token types 3 and 4). Why each is stripped from client-visible text:
//   <|channel> <channel|>                thought-channel delimiters (the reasoning parser's input)
//   <|tool_call> <tool_call|> <|"|>      tool-call syntax (the tool parser's input)
//   <|tool_response> <tool_response|>    end-of-calling-turn stop token / tool result framing
//   <turn|> <eos>                        end of turn / sequence: stop tokens, leak with ignore_eos
//   <|turn> <bos> <pad>                  prompt framing the model may sample when it derails
//   <|think|> <|tool> <tool|>            system-turn switches and tool declarations
//   <|image> <image|> <|image|> <|audio> <audio|> <|audio|> <|video|>   media placeholders
// <unk> and <mask> are left alone: byte-fallback BPE never emits <unk>, <mask> is unused in chat,
// and both are ordinary words in prose about tokenizers. No marker is a prefix of another, so
// the first complete match at a position is the only one.
std::span<const std::string_view> gemma4_marker_texts();

inline constexpr std::string_view kChannelStart = "<|channel>";
inline constexpr std::string_view kChannelEnd = "<channel|>";
inline constexpr std::string_view kToolCallStart = "<|tool_call>";
inline constexpr std::string_view kToolCallEnd = "<tool_call|>";
inline constexpr std::string_view kStringDelimiter = "<|\"|>";
inline constexpr std::string_view kToolResponseStart = "<|tool_response>";

struct MarkerMatch {
  size_t pos = std::string_view::npos;  // npos when none was found
  std::string_view marker;
};

// The marker that starts exactly at text[pos], or an empty view.
std::string_view marker_at(std::string_view text, size_t pos);

// The first complete marker at or after `from`.
MarkerMatch find_marker(std::string_view text, size_t from = 0);

// Length of the longest suffix of `text` that is a proper prefix of some marker: bytes a streaming
// parser holds back until the next delta says whether a marker is arriving.
size_t partial_marker_suffix(std::string_view text);

// Length (0-3) of a trailing UTF-8 sequence that is well-formed so far but cut short.
size_t incomplete_utf8_suffix(std::string_view text);

// What a streaming parser must hold back at the end of its buffer: a partial marker or a
// cut-short character, whichever is longer (both are suffixes).
size_t unresolved_suffix(std::string_view text);

// The loop of every streaming marker parser: hands the text runs and markers of `pending` to the
// callbacks in order and leaves in it only what may still become a marker or a character (a
// partial one; nothing when `final`). The callbacks must not change `pending`.
void consume_markers(std::string& pending, bool final, FunctionRef<void(std::string_view)> on_text,
                     FunctionRef<void(std::string_view)> on_marker);

// Removes every marker in gemma4_marker_texts() from `text`.
std::string strip_special_token_text(std::string_view text);

// Streaming form of strip_special_token_text: feed deltas, then finish() once. The concatenated
// output equals strip_special_token_text(concatenated input) for every way of chunking the input,
// and no output piece ends inside a marker or a UTF-8 character.
class SpecialTokenTextFilter {
 public:
  std::string feed(std::string_view delta);
  std::string finish();

 private:
  std::string pending_;
};

}  // namespace gemmaserve
