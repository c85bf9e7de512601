// A model checkpoint in any on-disk format, as the model sees it: every tensor under its logical
// (Hugging Face) name with its stored dtype, shape and mapped bytes, and the configuration the
// checkpoint carries. One class per format implements it (hf_safetensors.h, gguf_checkpoint.h,
// packed_checkpoint.h); open_checkpoint picks the format. Nothing here knows a model family.
#pragma once

#include <cstddef>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "io/safetensors.h"

namespace gemmaserve {

// One tensor as stored (io/safetensors.h's TensorView, produced by every format): name, dtype
// (a quantized type's rows are whole llama.cpp blocks), shape outermost first, its bytes in the
// mapped file (valid while the checkpoint lives), the file for error messages.
using CheckpointTensor = TensorView;

class Checkpoint {
 public:
  virtual ~Checkpoint() = default;

  // "safetensors" or "gguf": says how config() and the tensor names are spelled.
  virtual std::string_view format() const = 0;
  // The folder or file opened; errors about the checkpoint as a whole name it.
  virtual const std::filesystem::path& path() const = 0;
  // The configuration the checkpoint carries: Hugging Face's config.json (safetensors), the
  // metadata key/values (GGUF); config_source() names it in error messages.
  virtual const nlohmann::json& config() const = 0;
  virtual const std::string& config_source() const = 0;
  // Every tensor by name, in name order.
  virtual const std::map<std::string, const CheckpointTensor*>& tensors() const = 0;
  // The checkpoint's own quantization method as vLLM's --quantization names it ("gptq", "awq",
  // "compressed-tensors"); empty for float and gemmaserve-quantized checkpoints.
  virtual std::string_view quant_method() const { return {}; }
  // The buffers of tensors the checkpoint built at open (converted quantized modules), by
  // tensor name, handed over: the checkpoint drops its own reference, so each buffer lives as
  // long as the caller keeps its owner (a loader that copies or regroups a tensor frees the
  // original). Call once, before reading those tensors; empty when every tensor is mapped.
  virtual std::map<std::string, std::shared_ptr<const void>> take_built_tensors() const {
    return {};
  }

  // nullptr when absent.
  const CheckpointTensor* find(const std::string& name) const;
  // Bytes of every tensor's data.
  size_t total_bytes() const;
};

// The method a vLLM --quantization value names when it names a quantized checkpoint's own
// method: "gptq" (gptq, gptq_marlin), "awq" (awq, awq_marlin), "compressed-tensors", "gguf";
// "" for anything else (gemmaserve's load-time types q8_0, q4_0, q4_k among them).
std::string checkpoint_method_of_flag(const std::string& text);

// Opens a checkpoint: a .gguf file (by its magic) or a Hugging Face folder (config.json +
// safetensors; a PackedCheckpoint when quantized by GPTQ, AWQ or compressed-tensors). Throws
// InputError naming the path for anything unreadable.
std::shared_ptr<const Checkpoint> open_checkpoint(const std::filesystem::path& path);

}  // namespace gemmaserve
