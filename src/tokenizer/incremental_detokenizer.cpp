#include "tokenizer/incremental_detokenizer.h"

namespace gemmaserve {

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special,
                                               bool spaces_between_special_tokens)
    : tokenizer_(&tokenizer),
      skip_special_(skip_special),
      raw_adjacent_added_(!skip_special && !spaces_between_special_tokens),
      streamable_(tokenizer.streamable_decoder()) {}

std::string IncrementalDetokenizer::feed(int32_t id) {
  std::string text = decode_next(id);
  if (raw_adjacent_added_) {
    const std::optional<std::string_view> added = tokenizer_->added_content(id);
    if (added && last_added_) text = std::string(*added);
    last_added_ = added.has_value();
  }
  return text;
}

std::string IncrementalDetokenizer::decode_next(int32_t id) {
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
  last_added_ = false;
}

}  // namespace gemmaserve
