// Gemma 4 GGUF files as a Hugging Face checkpoint: llama.cpp's converter (arch "gemma4", its
// tensor names and metadata keys) and its vision projector file (arch "clip", projector
// "gemma4v", llama-server's --mmproj). Tensors appear under HF's names, config() is the
// config.json the metadata describes, so the Gemma 4 loader binds GGUF and safetensors alike.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/checkpoint.h"

namespace gemmaserve {

// The files of one GGUF model: the path given, or all parts of a split model
// ("name-00001-of-00003.gguf"; any part may be given), in part order. InputError for a missing
// or inconsistent part.
std::vector<std::filesystem::path> gguf_split_parts(const std::filesystem::path& path);

// Opens a Gemma 4 GGUF model (all split parts) and, when given, its mmproj file. InputError for
// another architecture (naming it), an mmproj passed as the model, metadata Gemma 4's config
// cannot express, or tensors named as no Gemma 4 converter names them.
std::shared_ptr<const Checkpoint> open_gemma4_gguf(
    const std::filesystem::path& model, const std::optional<std::filesystem::path>& mmproj);

// The HF name of a llama.cpp Gemma 4 tensor name ("blk.3.attn_q.weight" ->
// "model.language_model.layers.3.self_attn.q_proj.weight"); nullopt when unknown.
std::optional<std::string> gemma4_hf_name_of_gguf(std::string_view gguf_name);
// The inverse (for writers); nullopt for HF names GGUF does not store.
std::optional<std::string> gemma4_gguf_name_of_hf(std::string_view hf_name);

// The model file among a folder's .gguf files (the one that is not an mmproj) and its mmproj,
// for `serve DIR` on a folder of GGUF files; nullopt when the folder holds no .gguf file.
struct GgufFolder {
  std::filesystem::path model;
  std::optional<std::filesystem::path> mmproj;
};
std::optional<GgufFolder> find_gguf_in_folder(const std::filesystem::path& dir);

}  // namespace gemmaserve
