// A GGUF file (llama.cpp's format; io/gguf.h parses it) as a checkpoint. Tensor names are the
// file's own (llama.cpp's "blk.N.attn_q.weight"): mapping them to Hugging Face's names belongs to
// model/gemma4_gguf (Gemma 4's name and metadata map).
#pragma once

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "io/gguf.h"

namespace gemmaserve {

class GgufCheckpoint final : public Checkpoint {
 public:
  // Maps and parses the file; InputError for a tensor whose ggml type has no DType (Q8_1, Q8_K
  // and codes ggml does not define), naming the tensor and the type.
  explicit GgufCheckpoint(const std::filesystem::path& path);

  std::string_view format() const override { return "gguf"; }
  const std::filesystem::path& path() const override { return file_.path(); }
  // The metadata's scalars and arrays of numbers or bools by key; string arrays (the tokenizer's
  // vocabulary) and nested arrays are left to file().
  const nlohmann::json& config() const override { return config_; }
  const std::string& config_source() const override { return config_source_; }
  const std::map<std::string, const CheckpointTensor*>& tensors() const override { return index_; }
  const GgufFile& file() const { return file_; }

 private:
  GgufFile file_;
  std::string config_source_;
  nlohmann::json config_;
  std::vector<CheckpointTensor> tensors_;
  std::map<std::string, const CheckpointTensor*> index_;
};

}  // namespace gemmaserve
