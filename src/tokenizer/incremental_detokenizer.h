// Streaming detokenization: text for ids fed one at a time, never half a UTF-8 character, and in
// total exactly what Tokenizer::decode() gives for the whole sequence.
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
  // so per-request copies are avoided).
  explicit IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special = false);
  // A temporary would dangle.
  explicit IncrementalDetokenizer(Tokenizer&& tokenizer, bool skip_special = false) = delete;

  // The text that `id` completes (often empty while a byte-fallback run is unfinished: HF renders
  // a whole run as U+FFFDs if any of it is invalid, so none of it is final before the run ends).
  // Throws InputError for an id outside the vocabulary.
  std::string feed(int32_t id);
  // Flushes what is held back (an unfinished byte run renders as decode() renders it).
  std::string finish();
  // Forgets everything fed so far.
  void reset();

 private:
  const Tokenizer* tokenizer_;  // not owned
  bool skip_special_;
  bool streamable_;
  std::vector<int32_t> pending_;  // streamable: the held-back ids; otherwise every id so far
  size_t emitted_ = 0;            // non-streamable: bytes of the full decode already returned
};

}  // namespace gemmaserve
