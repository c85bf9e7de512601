#include "checkpoint/checkpoint.h"

#include "checkpoint/gguf_checkpoint.h"
#include "checkpoint/hf_safetensors.h"
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

std::shared_ptr<const Checkpoint> open_checkpoint(const std::filesystem::path& path) {
  if (!std::filesystem::is_directory(path) && GgufFile::has_gguf_magic(path)) {
    return std::make_shared<GgufCheckpoint>(path);
  }
  return std::make_shared<HfSafetensorsCheckpoint>(path);
}

}  // namespace gemmaserve
