// A GPTQ / AWQ / compressed-tensors checkpoint as PackedCheckpoint reads one, from a hostile
// quantization_config and hostile tensors. Input: a 4-byte little-endian length, that many
// bytes of quantization_config JSON, then a safetensors file.
#include <cstring>
#include <span>

#include "checkpoint/packed_checkpoint.h"
#include "core/logging.h"
#include "fuzz_support.h"
#include "io/safetensors.h"

using namespace gemmaserve;

namespace {

// The safetensors file's tensors as a checkpoint folder lists them.
class FileCheckpoint final : public Checkpoint {
 public:
  explicit FileCheckpoint(const std::filesystem::path& path) : file_(path), path_(path) {
    for (const auto& [name, view] : file_.tensors()) index_[name] = &view;
  }
  std::string_view format() const override { return "safetensors"; }
  const std::filesystem::path& path() const override { return path_; }
  const nlohmann::json& config() const override { return config_; }
  const std::string& config_source() const override { return source_; }
  const std::map<std::string, const CheckpointTensor*>& tensors() const override { return index_; }

 private:
  SafetensorsFile file_;
  std::filesystem::path path_;
  nlohmann::json config_ = nlohmann::json::object();
  std::string source_ = "config.json";
  std::map<std::string, const CheckpointTensor*> index_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = [] {
    log::set_level(log::Level::kOff);  // every input logs its conversion summary otherwise
    return true;
  }();
  (void)quiet;
  if (size < 4) return 0;
  uint32_t config_len;
  std::memcpy(&config_len, data, 4);
  if (config_len > size - 4) return 0;
  const std::string config(reinterpret_cast<const char*>(data + 4), config_len);
  const fuzz::MemoryFile file(
      std::span<const uint8_t>(data + 4 + config_len, size - 4 - config_len));
  fuzz::expect_input_errors_only([&] {
    QuantizationConfig q{nlohmann::ordered_json::parse(config), "config.json"};
    const PackedCheckpoint ckpt(std::make_shared<FileCheckpoint>(file.path()), std::move(q));
    for (const auto& [name, t] : ckpt.tensors()) {
      if (!dtype_is_quantized(t->dtype)) continue;
      // A converted module is whole rows of its dtype.
      const int64_t cols = t->shape.back(), rows = t->numel() / cols;
      fuzz::check(t->nbytes == static_cast<size_t>(rows) * dtype_row_bytes(t->dtype, cols),
                  "converted module is not whole rows");
    }
    for (const auto& m : ckpt.modules()) {
      std::vector<float> values(static_cast<size_t>(m->rows() * m->cols()));
      m->unpack_f32(values.data());
    }
  });
  return 0;
}
