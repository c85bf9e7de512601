// A Gemma 4 Hugging Face checkpoint written as llama.cpp's GGUF files (the inverse of
// model/gemma4_gguf.h): the text model with llama.cpp's converter's metadata, tensor names and
// tokenizer (arch "gemma4"), and the vision tower as a separate mmproj file (arch "clip",
// projector "gemma4v"), so the files serve in llama.cpp, ollama or gemmaserve alone.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "io/gguf_writer.h"

namespace gemmaserve {

struct Gemma4GgufOptions {
  // F32, F16 or BF16: every matrix in that type (convert_hf_to_gguf's --outtype); Q8_0, Q4_0 or
  // Q4_K: the weights `gemmaserve quantize` quantizes, each in the type it chooses
  // (model/quantize.h), everything else as stored. 1-D tensors, norms, the router, the
  // position table and the patch embedding are F32 as the converter keeps them (the patch
  // embedding is F16 in an F16 file: llama.cpp runs it as a convolution kernel).
  DType type = DType::kQ8_0;
  std::string name;              // general.name; empty: the checkpoint folder's name
  uint64_t split_max_bytes = 0;  // the text model in parts of at most this many tensor bytes
};

// The mmproj file written beside a model file: "mmproj-<model file name>" in its folder.
std::filesystem::path gemma4_mmproj_path(const std::filesystem::path& model_file);

// The file name a model gets in a folder: "<name>-<TYPE>.gguf" ("tiny-Q4_K.gguf").
std::string gemma4_gguf_file_name(const std::string& name, DType type);

// llama.cpp's general.file_type (LLAMA_FTYPE) for a file of `type`: ALL_F32 0, MOSTLY_F16 1,
// MOSTLY_Q4_0 2, MOSTLY_Q8_0 7, MOSTLY_Q4_K_S 14, MOSTLY_BF16 32.
uint32_t gemma4_gguf_file_type(DType type);

// Plans the GGUF files of the Hugging Face checkpoint folder `in_dir` (its config.json,
// safetensors, tokenizer.json / tokenizer_config.json and chat template), then writes them.
// InputError for a checkpoint that is not Gemma 4, is already quantized, or whose tensors have
// no GGUF name.
class Gemma4GgufWriter {
 public:
  Gemma4GgufWriter(const std::filesystem::path& in_dir, const std::filesystem::path& model_file,
                   const Gemma4GgufOptions& options);
  ~Gemma4GgufWriter();
  Gemma4GgufWriter(const Gemma4GgufWriter&) = delete;
  Gemma4GgufWriter& operator=(const Gemma4GgufWriter&) = delete;

  // Every file that write() creates (split parts, then the mmproj), and their total size.
  std::vector<std::filesystem::path> files() const;
  std::optional<std::filesystem::path> mmproj_file() const;
  uint64_t disk_bytes() const;
  bool has_tokenizer() const;

  // Tensors per stored type over both files ("Q4_K" -> 120), for the summary line.
  std::map<std::string, size_t> tensor_types() const;
  size_t quantized_tensors() const;  // tensors stored in a block-quantized type

  // Writes the text model, then the mmproj; progress counts bytes over both.
  void write(const GgufWriteOptions& io) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gemmaserve
