// Added tokens (specials like <bos>, <|turn>, and user-defined ones like <|"|>): found verbatim in
// the text, leftmost-longest, before the rest goes through normalization and BPE.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/text_pipeline.h"
#include "tokenizer/tokenizer_spec.h"

namespace gemmaserve {

class AddedVocabulary {
 public:
  // Tokens with `normalized` set are matched in normalized text, so their content is normalized
  // with `normalizer` first (as tokenizers does). Empty contents are ignored.
  AddedVocabulary(std::vector<AddedToken> tokens, const Normalizer& normalizer);

  // A piece of the input: an added token (id >= 0) or text to tokenize further (id == -1).
  struct Piece {
    size_t begin;
    size_t end;
    int32_t id;
  };

  // Splits `text` on the tokens matched in raw text (`normalized_pass` false) or in normalized text
  // (true). With `skip_special`, special tokens are not matched (tokenizers'
  // encode_special_tokens).
  void split(std::string_view text, bool normalized_pass, bool skip_special,
             std::vector<Piece>& out) const;

  const AddedToken* find_id(int32_t id) const;
  const AddedToken* find_content(std::string_view content) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  // Byte trie over the patterns of one pass; finds the longest pattern starting at a position.
  class Trie {
   public:
    void insert(std::string_view pattern, size_t token_index);
    // Length of the longest pattern starting at text[pos] (0 if none) and its token index.
    size_t longest_at(std::string_view text, size_t pos, size_t& token_index) const;

   private:
    std::unordered_map<uint64_t, uint32_t> edges_;  // (node << 8 | byte) -> child node
    std::vector<int64_t> terminal_{-1};             // per node: token index or -1
    bool first_byte_[256] = {};
  };

  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> by_id_;
  std::unordered_map<std::string, size_t> by_content_;
  Trie raw_trie_;
  Trie normalized_trie_;
};

}  // namespace gemmaserve
