// The text <-> token-id tokenizer for Gemma models, built from a Hugging Face tokenizer.json (what
// checkpoints ship) or from a GGUF vocabulary (tokenizer.ggml.*), with Hugging Face semantics.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer_spec.h"

namespace gemmaserve {

class GgufFile;

class Tokenizer {
 public:
  // Loads a tokenizer.json, a .gguf (by its magic), or a model folder holding tokenizer.json (its
  // tokenizer_config.json, when present, supplies add_bos_token, bos/eos_token and
  // added_tokens_decoder). Throws InputError naming the path on any problem.
  static Tokenizer from_path(const std::filesystem::path& path);
  // The tokenizer of a model folder, or nullopt when it ships none (token-id prompts still work).
  static std::optional<Tokenizer> from_model_dir(const std::filesystem::path& dir);
  static Tokenizer from_gguf(const GgufFile& gguf);
  // `config` is the parsed tokenizer_config.json or nullptr; the sources name the files in errors.
  static Tokenizer from_json(const nlohmann::json& tokenizer_json, const nlohmann::json* config,
                             const std::string& source,
                             const std::string& config_source = "tokenizer_config.json");
  explicit Tokenizer(TokenizerSpec spec);

  // Text to ids. `add_special` adds what the tokenizer's post-processor adds (Gemma: <bos> in
  // front). With `parse_special` false, special tokens written in the text ("<bos>") are tokenized
  // as plain text; non-special added tokens (<|"|>, <|tool_call>, ...) are still matched, as with
  // Hugging Face's split_special_tokens. Invalid UTF-8 bytes are encoded as their <0xNN> tokens.
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const;

  // Ids to text exactly as Hugging Face decodes: always valid UTF-8, a run of byte tokens that is
  // not valid UTF-8 gives one U+FFFD per byte. Throws InputError for an id outside the vocabulary.
  std::string decode(std::span<const int32_t> ids, bool skip_special) const;
  // Like decode(), but byte tokens become their raw bytes, so arbitrary byte strings round-trip:
  // decode_bytes(encode(s)) == s for any s.
  std::string decode_bytes(std::span<const int32_t> ids, bool skip_special) const;

  // The stored piece of a token ("▁Hello", "<0x0A>", "<bos>"); InputError if the id is unknown.
  std::string_view id_to_piece(int32_t id) const;
  std::optional<int32_t> piece_to_id(std::string_view piece) const;
  // One past the largest id (model vocabulary plus added tokens).
  size_t vocab_size() const;
  bool contains(int32_t id) const;
  // The BOS token id, or -1 when the tokenizer has none.
  int32_t bos_id() const;
  // The tokenizer's own end-of-sequence ids (Gemma: <eos>; tokenizer_config's eos_token wins).
  const std::vector<int32_t>& eos_ids() const;
  bool is_special(int32_t id) const;
  // Whether encode(add_special=true) prepends the BOS token.
  bool adds_bos() const;
  const std::string& source() const;

 private:
  friend class IncrementalDetokenizer;
  struct Impl;
  std::string decode_impl(std::span<const int32_t> ids, bool skip_special, bool raw_bytes) const;
  // For IncrementalDetokenizer: whether decoding is local (see Decoder::streamable), and whether
  // `id` is a byte-fallback token whose text depends on the rest of its run (validates the id).
  bool streamable_decoder() const;
  bool holds_back(int32_t id) const;
  // For IncrementalDetokenizer: the content of `id` when it is an added token (special or not).
  std::optional<std::string_view> added_content(int32_t id) const;

  std::shared_ptr<const Impl> impl_;  // immutable and shared: copies are cheap and thread-safe
};

}  // namespace gemmaserve
