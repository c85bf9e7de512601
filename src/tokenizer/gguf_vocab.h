// Reading a GGUF vocabulary (tokenizer.ggml.*) into the spec Hugging Face's Gemma tokenizer has.
#pragma once

#include <optional>
#include <string>

#include "io/gguf.h"
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

}  // namespace gemmaserve
