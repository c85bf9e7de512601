#include "checkpoint/hf_safetensors.h"

#include "core/error.h"
#include "io/json_file.h"

namespace gemmaserve {
namespace {

nlohmann::json read_config(const std::filesystem::path& path) {
  if (!std::filesystem::exists(path)) {
    throw InputError(path.string() + ": missing (not a Hugging Face checkpoint folder?)");
  }
  return read_json_file(path);
}

}  // namespace

HfSafetensorsCheckpoint::HfSafetensorsCheckpoint(const std::filesystem::path& dir)
    : config_source_((dir / "config.json").string()),
      config_(read_config(dir / "config.json")),
      files_(dir) {}

}  // namespace gemmaserve
