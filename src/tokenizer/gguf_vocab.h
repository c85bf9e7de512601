// Reading a GGUF vocabulary (tokenizer.ggml.*) into the spec Hugging Face's Gemma tokenizer has.
#pragma once

#include <optional>
#include <string>

#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "tokenizer/tokenizer_spec.h"

namespace gemmaserve {

// GGUF token types (llama.cpp's llama_token_type).
enum class GgufTokenType : int {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// Maps tokenizer.ggml.model "gemma4" (BPE over ▁-escaped UTF-8 with byte fallback) to the spec
// transformers' GemmaTokenizer builds: control/unknown tokens become special added tokens and
// user-defined ones non-special added tokens, as convert_hf_to_gguf assigned those types.
// Throws InputError naming the file for other tokenizer models or malformed arrays.
TokenizerSpec tokenizer_spec_from_gguf(const GgufFile& gguf);

// tokenizer.chat_template, when the file has one.
std::optional<std::string> gguf_chat_template(const GgufFile& gguf);

// The inverse of tokenizer_spec_from_gguf, as llama.cpp's converter writes a Gemma 4 vocabulary:
// tokenizer.ggml.model "gemma4", every id's piece (added tokens past the model vocabulary
// included; "[PAD<i>]" for ids neither covers), scores of -1000, token types (special added
// tokens CONTROL, other added tokens and the converter's always-visible markers such as
// <|tool_call> USER_DEFINED, <0xNN> pieces BYTE, the rest NORMAL), the merges as "a b", the
// special ids, add_bos/add_eos_token, the chat template when given, add_space_prefix false.
struct GgufVocabExtras {
  std::optional<int32_t> mask_id;  // tokenizer.ggml.mask_token_id
  std::optional<std::string> chat_template;
};
void add_gguf_vocab(const TokenizerSpec& spec, const GgufVocabExtras& extras, GgufMetadata& out);

}  // namespace gemmaserve
