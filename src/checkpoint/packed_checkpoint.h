// A Hugging Face folder quantized by GPTQ, AWQ or compressed-tensors, as a Checkpoint: every
// packed module X (gptq.h, awq.h, compressed_tensors.h) is listed as a tensor `X.weight` of
// logical shape [N, K] in the dtype the kernels run (packed_linear.h: Q4_0 / Q8_0 exact where
// the format allows, else Q8_0 re-rounded or F32), converted once at open into buffers this
// checkpoint owns; the packed tensors themselves (qweight, qzeros, scales, g_idx,
// weight_packed, weight_scale, weight_zero_point, weight_shape, weight_g_idx) are hidden, and
// every other tensor is the folder's own. open_checkpoint returns one when config.json's
// quantization_config.quant_method (or GPTQ's quantize_config.json) names one of the methods.
#pragma once

#include <cstddef>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/packed_linear.h"
#include "checkpoint/packed_tensors.h"

namespace gemmaserve {

// The method a quant_method value names, as vLLM's --quantization spells it: "gptq", "awq",
// "compressed-tensors" (compressed_tensors too); "" for any other.
std::string packed_method_name(const std::string& quant_method);

// The quantization config of a folder whose method is packed: config.json's
// quantization_config (re-read from `config_source` in file order, as GPTQModel's `dynamic`
// rules apply in order), or quantize_config.json when config.json has none (AutoGPTQ);
// nullopt for every other checkpoint.
std::optional<QuantizationConfig> packed_quantization_config(const std::filesystem::path& dir,
                                                             const nlohmann::json& config,
                                                             const std::string& config_source);

// How one packed module was converted.
struct PackedModuleReport {
  std::string tensor;  // "X.weight", as listed
  DType dtype = DType::kF32;
  bool exact = true;
  std::string reason;  // see ConvertedLinear
  double max_rel_error = 0.0;
  size_t packed_bytes = 0, bytes = 0;
  bool permuted = false;  // act-order columns sorted by group (listed with "X.input_perm")
};

struct PackedSummary {
  std::string method;
  std::vector<PackedModuleReport> modules;  // in name order
  double seconds = 0.0;
  // One line: modules per dtype, exact and not, why, the worst error of the inexact ones,
  // bytes before and after.
  std::string text() const;
};

class PackedCheckpoint final : public Checkpoint {
 public:
  // `base` lists the folder's stored tensors under their HF names. Every packed module's
  // tensors are checked before anything is allocated (InputError naming the module or the
  // tensor); then the modules are converted in parallel and the summary is logged. With
  // GEMMASERVE_PACKED_WEIGHTS=f32 in the environment every module becomes F32 (exact; for
  // comparing against a float reference).
  PackedCheckpoint(std::shared_ptr<const Checkpoint> base, QuantizationConfig config);

  std::string_view format() const override { return base_->format(); }
  const std::filesystem::path& path() const override { return base_->path(); }
  const nlohmann::json& config() const override { return base_->config(); }
  const std::string& config_source() const override { return base_->config_source(); }
  const std::map<std::string, const CheckpointTensor*>& tensors() const override { return index_; }
  std::string_view quant_method() const override { return method_; }
  std::map<std::string, std::shared_ptr<const void>> take_built_tensors() const override;

  const PackedSummary& summary() const { return summary_; }
  // The modules as stored (unpack_f32 reads them again from the mapped files).
  const std::vector<std::unique_ptr<PackedLinear>>& modules() const { return plan_.modules; }

 private:
  std::shared_ptr<const Checkpoint> base_;
  std::string method_;
  PackedPlan plan_;
  std::vector<CheckpointTensor> built_;
  mutable std::map<std::string, std::shared_ptr<const void>> owners_;
  std::map<std::string, const CheckpointTensor*> index_;
  PackedSummary summary_;
};

}  // namespace gemmaserve
