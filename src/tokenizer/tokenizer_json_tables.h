// A fast reader for the two big tables of a tokenizer.json (model.vocab and model.merges: a
// quarter of a million pieces and half a million merges for Gemma 4), straight from the text
// into ids, so that only the small rest of the file goes through a general JSON parser.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gemmaserve {

struct TokenizerJsonTables {
  std::string rest;                                 // the text with vocab as {} and merges as []
  std::vector<std::string> vocab;                   // piece of id i at [i]
  std::vector<std::pair<int32_t, int32_t>> merges;  // token-id pairs in rank order
};

// The tables when `text` is well-formed JSON whose model.vocab holds ids 0..N-1 without repeats
// and whose model.merges all name vocabulary pieces; nullopt for anything else (a byte-order
// mark, a duplicate key, ...), where the caller parses the whole text to report the exact error.
std::optional<TokenizerJsonTables> scan_tokenizer_json_tables(std::string_view text);

}  // namespace gemmaserve
