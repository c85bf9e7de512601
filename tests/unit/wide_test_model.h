// A synthetic 256-wide Gemma 4 model for quality tests: the dense golden fixture's config with
// every matrix row a multiple of 256 (Q4_K's block), random weights of a chosen dtype.
#pragma once

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/dtype.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "model/test_model_presets.h"
#include "test_support.h"

namespace gemmaserve::testing {

// Writes `config` and random weights of `dtype` (model.safetensors, with the vision tower when
// the config has one) into `dir`; returns dir.
inline std::filesystem::path write_model_of_config(const std::filesystem::path& dir,
                                                   const nlohmann::json& config, DType dtype) {
  write_test_model_of_config(dir, config, dtype, 3);
  return dir;
}

// Writes config.json and model.safetensors into `dir` and returns it.
inline std::filesystem::path write_wide_model(const std::filesystem::path& dir,
                                              DType dtype = DType::kF32) {
  std::ifstream in(source_dir() / "tests/data/golden/models/dense/config.json");
  nlohmann::json config = nlohmann::json::parse(in);
  nlohmann::json& t = config["text_config"];
  t["hidden_size"] = 256;
  t["intermediate_size"] = 512;
  t["head_dim"] = 64;
  t["global_head_dim"] = 128;
  t["hidden_size_per_layer_input"] = 256;
  t["num_hidden_layers"] = 4;
  t["num_kv_shared_layers"] = 1;
  t["layer_types"] = {"sliding_attention", "sliding_attention", "full_attention",
                      "sliding_attention"};
  return write_model_of_config(dir, config, dtype);
}

// The MoE golden fixture's config at hidden 256 with 96-wide experts: the experts' gate/up rows
// are whole Q4_K super-blocks, their down rows (96) are not (Q4_K falls back to Q4_0 there).
inline std::filesystem::path write_wide_moe_model(const std::filesystem::path& dir,
                                                  DType dtype = DType::kF32) {
  std::ifstream in(source_dir() / "tests/data/golden/models/moe/config.json");
  nlohmann::json config = nlohmann::json::parse(in);
  nlohmann::json& t = config["text_config"];
  t["hidden_size"] = 256;
  t["intermediate_size"] = 512;
  t["moe_intermediate_size"] = 96;
  t["head_dim"] = 64;
  t["global_head_dim"] = 128;
  return write_model_of_config(dir, config, dtype);
}

}  // namespace gemmaserve::testing
