// UTF-8 helpers: strict sequence decoding that tolerates invalid bytes.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace gemmaserve::utf8 {

// Length (1-4) of the well-formed UTF-8 sequence starting at s[pos], or 0 when the byte there does
// not start one (stray continuation byte, overlong form, surrogate, > U+10FFFF, or cut short).
size_t sequence_length(std::string_view s, size_t pos);

// Length of the "character" at s[pos] as the tokenizer sees it: a well-formed sequence, or a
// single invalid byte (which then falls back to its <0xNN> byte token).
inline size_t char_length(std::string_view s, size_t pos) {
  size_t n = sequence_length(s, pos);
  return n == 0 ? 1 : n;
}

bool is_valid(std::string_view s);

// Code point of the well-formed sequence at s[pos] (caller checked sequence_length > 0).
char32_t decode_at(std::string_view s, size_t pos);

void append(std::string& out, char32_t cp);

// Unicode White_Space property (what Rust's regex `\s` and char::is_whitespace accept).
bool is_whitespace(char32_t cp);

// U+FFFD, what an undecodable byte becomes in Hugging Face decoding.
inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";

}  // namespace gemmaserve::utf8
