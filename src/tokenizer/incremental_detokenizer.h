// Streaming detokenization: text for ids fed one at a time, never half a UTF-8 character, and in
// total exactly what Tokenizer::decode() gives for the whole sequence (unless
// spaces_between_special_tokens is off, see below).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace gemmaserve {

class IncrementalDetokenizer {
 public:
  // Keeps a reference: the tokenizer must outlive this object (it holds a 262k-entry vocabulary,
  // so per-request copies are avoided). With skip_special false and
  // spaces_between_special_tokens false, an added token fed right after another added token
  // yields its raw content instead of its decoded text, as vLLM's fast-tokenizer detokenizer does
  // (with Hugging Face's decoders the two differ only where the content holds a "▁" the decoder
  // would turn into a space; Gemma 4's added tokens hold none).
  explicit IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special = false,
                                  bool spaces_between_special_tokens = true);
  // A temporary would dangle.
  explicit IncrementalDetokenizer(Tokenizer&& tokenizer, bool skip_special = false,
                                  bool spaces_between_special_tokens = true) = delete;

  // The text that `id` completes (often empty while a byte-fallback run is unfinished: HF renders
  // a whole run as U+FFFDs if any of it is invalid, so none of it is final before the run ends).
  // Throws InputError for an id outside the vocabulary.
  std::string feed(int32_t id);
  // Flushes what is held back (an unfinished byte run renders as decode() renders it).
  std::string finish();
  // Forgets everything fed so far.
  void reset();

 private:
  std::string decode_next(int32_t id);

  const Tokenizer* tokenizer_;  // not owned
  bool skip_special_;
  bool raw_adjacent_added_;  // !skip_special && !spaces_between_special_tokens
  bool streamable_;
  bool last_added_ = false;       // the previous id fed was an added token
  std::vector<int32_t> pending_;  // streamable: the held-back ids; otherwise every id so far
  size_t emitted_ = 0;            // non-streamable: bytes of the full decode already returned
};

}  // namespace gemmaserve
