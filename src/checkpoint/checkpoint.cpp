#include "checkpoint/checkpoint.h"

#include "checkpoint/gguf_checkpoint.h"
#include "checkpoint/hf_safetensors.h"
#include "checkpoint/packed_checkpoint.h"
#include "io/gguf.h"

namespace gemmaserve {

const CheckpointTensor* Checkpoint::find(const std::string& name) const {
  const auto& all = tensors();
  auto it = all.find(name);
  return it == all.end() ? nullptr : it->second;
}

size_t Checkpoint::total_bytes() const {
  size_t n = 0;
  for (const auto& [name, t] : tensors()) n += t->nbytes;
  return n;
}

std::string checkpoint_method_of_flag(const std::string& text) {
  const std::string t = ascii_lower(text);
  if (t == "gptq" || t == "gptq_marlin") return "gptq";
  if (t == "awq" || t == "awq_marlin") return "awq";
  if (t == "compressed-tensors" || t == "compressed_tensors") return "compressed-tensors";
  if (t == "gguf") return "gguf";
  return "";
}

std::shared_ptr<const Checkpoint> open_checkpoint(const std::filesystem::path& path) {
  if (!std::filesystem::is_directory(path) && GgufFile::has_gguf_magic(path)) {
    return std::make_shared<GgufCheckpoint>(path);
  }
  auto folder = std::make_shared<HfSafetensorsCheckpoint>(path);
  if (std::optional<QuantizationConfig> q =
          packed_quantization_config(path, folder->config(), folder->config_source())) {
    return std::make_shared<PackedCheckpoint>(std::move(folder), std::move(*q));
  }
  return folder;
}

}  // namespace gemmaserve
