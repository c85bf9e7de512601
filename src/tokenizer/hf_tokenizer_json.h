// Hugging Face tokenizer.json: reading it into a TokenizerSpec (only the components Gemma's files
// use; anything else is an InputError naming it) and writing a spec back out in that format.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "tokenizer/tokenizer_spec.h"

namespace gemmaserve {

// `config` is the parsed tokenizer_config.json or nullptr; `source` and `config_source` name the
// two files in errors.
TokenizerSpec spec_from_hf_json(const nlohmann::json& tokenizer_json, const nlohmann::json* config,
                                const std::string& source,
                                const std::string& config_source = "tokenizer_config.json");

// Reads the tokenizer.json at `path` (and the tokenizer_config.json at `config_path`, if any) as
// spec_from_hf_json does; the big vocab and merges tables are read without building a JSON tree
// when the file is well formed. Malformed JSON is "<path>: malformed JSON: ...".
TokenizerSpec spec_from_hf_json_file(const std::filesystem::path& path,
                                     const std::optional<std::filesystem::path>& config_path);

// The tokenizer.json that Hugging Face tokenizers would save for `spec` (same field order).
// Throws InputError if a piece is not valid UTF-8 (JSON cannot carry it).
std::string to_hf_tokenizer_json(const TokenizerSpec& spec);

// A matching tokenizer_config.json (special tokens, add_bos/eos_token, optional chat template).
std::string to_hf_tokenizer_config_json(const TokenizerSpec& spec,
                                        const std::optional<std::string>& chat_template);

}  // namespace gemmaserve
