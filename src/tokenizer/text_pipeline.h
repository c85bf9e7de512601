// The string-level stages around the BPE model: normalizer, pre-tokenizer and decoder, with the
// semantics of the Hugging Face tokenizers components they are read from.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer_spec.h"

namespace gemmaserve {

class Normalizer {
 public:
  explicit Normalizer(std::vector<NormalizerStep> steps) : steps_(std::move(steps)) {}
  std::string apply(std::string_view text) const;

 private:
  std::vector<NormalizerStep> steps_;
};

class PreTokenizer {
 public:
  explicit PreTokenizer(std::vector<PreTokenizerStep> steps) : steps_(std::move(steps)) {}
  // Appends the non-empty words of `text` (views into it) to `words`.
  void split(std::string_view text, std::vector<std::string_view>& words) const;

 private:
  std::vector<PreTokenizerStep> steps_;
};

class Decoder {
 public:
  explicit Decoder(std::optional<std::vector<DecoderStep>> steps);

  // Turns token pieces into text. With `raw_bytes`, byte tokens (<0xNN>) are emitted as the bytes
  // themselves even when they are not valid UTF-8 (instead of one U+FFFD per byte, as HF does).
  std::string decode(std::vector<std::string> pieces, bool raw_bytes) const;

  // True when decode(a + b) == decode(a) + decode(b) whenever `a` does not end inside a run of byte
  // tokens: per-piece steps, byte fallback and a final Fuse. Streaming relies on this.
  bool streamable() const { return streamable_; }
  bool has_byte_fallback() const { return has_byte_fallback_; }

  // The byte a "<0xNN>" piece stands for, as HF's ByteFallback decoder recognizes it.
  static std::optional<uint8_t> byte_of_piece(std::string_view piece);

 private:
  std::optional<std::vector<DecoderStep>> steps_;
  bool streamable_ = false;
  bool has_byte_fallback_ = false;
};

// Replaces every non-overlapping occurrence of `from` (scanning left to right).
std::string replace_all(std::string_view text, std::string_view from, std::string_view to);

}  // namespace gemmaserve
