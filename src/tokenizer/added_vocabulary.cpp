#include "tokenizer/added_vocabulary.h"

#include <algorithm>

#include "core/utf8.h"

namespace gemmaserve {

void AddedVocabulary::Trie::insert(std::string_view pattern, size_t token_index) {
  uint32_t node = 0;
  for (char c : pattern) {
    const auto byte = static_cast<uint8_t>(c);
    const uint64_t key = (static_cast<uint64_t>(node) << 8) | byte;
    auto it = edges_.find(key);
    if (it == edges_.end()) {
      auto child = static_cast<uint32_t>(terminal_.size());
      terminal_.push_back(-1);
      it = edges_.emplace(key, child).first;
    }
    node = it->second;
  }
  first_byte_[static_cast<uint8_t>(pattern.front())] = true;
  // The first token with a given content keeps it.
  if (terminal_[node] < 0) terminal_[node] = static_cast<int64_t>(token_index);
}

size_t AddedVocabulary::Trie::longest_at(std::string_view text, size_t pos,
                                         size_t& token_index) const {
  if (!first_byte_[static_cast<uint8_t>(text[pos])]) return 0;
  uint32_t node = 0;
  size_t best = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    auto it = edges_.find((static_cast<uint64_t>(node) << 8) | static_cast<uint8_t>(text[i]));
    if (it == edges_.end()) break;
    node = it->second;
    if (terminal_[node] >= 0) {
      best = i + 1 - pos;
      token_index = static_cast<size_t>(terminal_[node]);
    }
  }
  return best;
}

AddedVocabulary::AddedVocabulary(std::vector<AddedToken> tokens, const Normalizer& normalizer)
    : tokens_(std::move(tokens)) {
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const AddedToken& t = tokens_[i];
    by_id_.emplace(t.id, i);
    by_content_.emplace(t.content, i);
    if (t.content.empty()) continue;
    if (t.normalized) {
      std::string normalized = normalizer.apply(t.content);
      if (!normalized.empty()) normalized_trie_.insert(normalized, i);
    } else {
      raw_trie_.insert(t.content, i);
    }
  }
}

const AddedToken* AddedVocabulary::find_id(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

const AddedToken* AddedVocabulary::find_content(std::string_view content) const {
  auto it = by_content_.find(std::string(content));
  return it == by_content_.end() ? nullptr : &tokens_[it->second];
}

namespace {

// Start of the run of whitespace that ends at `end` (never before `floor`).
size_t whitespace_run_start(std::string_view text, size_t end, size_t floor) {
  // Walk back over UTF-8 characters; continuation bytes are 10xxxxxx.
  size_t start = end;
  while (start > floor) {
    size_t c = start - 1;
    while (c > floor && (static_cast<uint8_t>(text[c]) & 0xC0) == 0x80) --c;
    size_t len = utf8::sequence_length(text, c);
    if (len != start - c || !utf8::is_whitespace(utf8::decode_at(text, c))) break;
    start = c;
  }
  return start;
}

size_t whitespace_run_end(std::string_view text, size_t begin) {
  size_t end = begin;
  while (end < text.size()) {
    size_t len = utf8::sequence_length(text, end);
    if (len == 0 || !utf8::is_whitespace(utf8::decode_at(text, end))) break;
    end += len;
  }
  return end;
}

}  // namespace

void AddedVocabulary::split(std::string_view text, bool normalized_pass, bool skip_special,
                            std::vector<Piece>& out) const {
  const Trie& trie = normalized_pass ? normalized_trie_ : raw_trie_;
  size_t emitted = 0;  // end of the last piece pushed
  for (size_t pos = 0; pos < text.size();) {
    size_t index = 0;
    const size_t len = trie.longest_at(text, pos, index);
    if (len == 0) {
      ++pos;
      continue;
    }
    const AddedToken& token = tokens_[index];
    size_t start = pos;
    size_t stop = pos + len;
    pos = stop;
    if (skip_special && token.special) continue;  // left in the text, as tokenizers does
    if (token.lstrip) start = whitespace_run_start(text, start, emitted);
    if (token.rstrip) stop = pos = whitespace_run_end(text, stop);
    if (start > emitted) out.push_back({emitted, start, -1});
    out.push_back({start, stop, token.id});
    emitted = stop;
  }
  if (emitted < text.size()) out.push_back({emitted, text.size(), -1});
}

}  // namespace gemmaserve
