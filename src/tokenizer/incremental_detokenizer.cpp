#include "tokenizer/incremental_detokenizer.h"

namespace gemmaserve {

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(&tokenizer),
      skip_special_(skip_special),
      streamable_(tokenizer.streamable_decoder()) {}

std::string IncrementalDetokenizer::feed(int32_t id) {
  const bool byte_token = tokenizer_->holds_back(id);          // validates the id too
  if (skip_special_ && tokenizer_->is_special(id)) return {};  // dropped, as decode() drops it
  pending_.push_back(id);
  if (byte_token) return {};
  if (streamable_) {
    // Decoding is local up to the end of a non-byte token, so this window decodes on its own.
    std::string text = tokenizer_->decode(pending_, /*skip_special=*/false);
    pending_.clear();
    return text;
  }
  std::string full = tokenizer_->decode(pending_, /*skip_special=*/false);
  if (full.size() <= emitted_) return {};
  std::string text = full.substr(emitted_);
  emitted_ = full.size();
  return text;
}

std::string IncrementalDetokenizer::finish() {
  std::string full = tokenizer_->decode(pending_, /*skip_special=*/false);
  std::string text =
      streamable_ ? std::move(full) : (full.size() > emitted_ ? full.substr(emitted_) : "");
  reset();
  return text;
}

void IncrementalDetokenizer::reset() {
  pending_.clear();
  emitted_ = 0;
}

}  // namespace gemmaserve
