// Plain description of a tokenizer, the common form that tokenizer.json and GGUF vocabularies are
// read into (and that the tokenizer.json writer serializes). Mirrors Hugging Face's components.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace gemmaserve {

// A token matched verbatim in the input before normalization/BPE (tokenizer.json "added_tokens").
struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;     // skipped by decode(skip_special) and by encode without parse_special
  bool normalized = false;  // matched against the normalized text instead of the raw text
  bool lstrip = false;      // the match swallows whitespace on its left
  bool rstrip = false;      // ... and on its right
};

struct NormalizerStep {
  enum class Kind { kReplace, kPrepend };
  Kind kind = Kind::kReplace;
  std::string pattern;  // Replace: literal string to replace
  std::string content;  // Replace: replacement; Prepend: prefix
};

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// The Split pre-tokenizer with a literal pattern (the only pre-tokenizer Gemma uses).
struct PreTokenizerStep {
  std::string pattern;
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
};

struct DecoderStep {
  enum class Kind { kReplace, kByteFallback, kFuse, kStrip };
  Kind kind = Kind::kFuse;
  std::string pattern;  // Replace
  std::string content;  // Replace: replacement; Strip: the (single) character to strip
  size_t start = 0;     // Strip: at most this many leading characters
  size_t stop = 0;      // Strip: at most this many trailing characters
};

struct BpeOptions {
  std::optional<std::string> unk_token;
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;
};

struct TokenizerSpec {
  std::string source;  // file the spec came from, for error messages

  std::vector<std::string> vocab;                   // BPE model vocabulary: piece of id i at [i]
  std::vector<std::pair<int32_t, int32_t>> merges;  // merge pairs (token ids) in rank order
  BpeOptions bpe;

  std::vector<AddedToken> added_tokens;
  std::vector<NormalizerStep> normalizer;           // applied in order; empty: none
  std::vector<PreTokenizerStep> pre_tokenizer;      // applied in order; empty: none
  std::optional<std::vector<DecoderStep>> decoder;  // nullopt: no decoder (pieces joined by " ")

  std::vector<int32_t> prefix_ids;  // what encode(add_special=true) puts before the text
  std::vector<int32_t> suffix_ids;  // ... and after it
  std::optional<int32_t> bos_id;
  std::vector<int32_t> eos_ids;
  std::optional<int32_t> pad_id;
};

// The components Hugging Face's GemmaTokenizer sets (tokenization_gemma.py): " " -> "▁", a Split
// on " " that is a no-op after that, and ▁ -> " ", byte fallback, fuse when decoding.
std::vector<NormalizerStep> gemma_normalizer();
std::vector<PreTokenizerStep> gemma_pre_tokenizer();
std::vector<DecoderStep> gemma_decoder();

}  // namespace gemmaserve
