// A Hugging Face checkpoint folder: config.json and model.safetensors or its shards
// (io/safetensors.h parses the files). Tensor names are HF's own.
#pragma once

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "checkpoint/checkpoint.h"
#include "io/safetensors.h"

namespace gemmaserve {

class HfSafetensorsCheckpoint final : public Checkpoint {
 public:
  // Reads DIR/config.json (InputError "DIR/config.json: missing (not a Hugging Face checkpoint
  // folder?)" when absent), then maps the safetensors as SafetensorsCheckpoint does.
  explicit HfSafetensorsCheckpoint(const std::filesystem::path& dir);

  std::string_view format() const override { return "safetensors"; }
  const std::filesystem::path& path() const override { return files_.dir(); }
  const nlohmann::json& config() const override { return config_; }
  const std::string& config_source() const override { return config_source_; }
  const std::map<std::string, const CheckpointTensor*>& tensors() const override {
    return files_.all();
  }

 private:
  std::string config_source_;
  nlohmann::json config_;
  SafetensorsCheckpoint files_;
};

}  // namespace gemmaserve
