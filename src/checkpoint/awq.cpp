#include "checkpoint/awq.h"

#include "core/error.h"

namespace gemmaserve {
namespace {

// AutoAWQ packs output columns 8c + [0, 2, 4, 6, 1, 3, 5, 7] into nibbles 0..7 of word c.
constexpr int kColumnOfNibble[8] = {0, 2, 4, 6, 1, 3, 5, 7};
constexpr int kNibbleOfColumn[8] = {0, 4, 1, 5, 2, 6, 3, 7};

class AwqLinear final : public PackedLinear {
 public:
  AwqLinear(const std::string& module, int64_t rows, int64_t cols, int64_t groups,
            int64_t group_size, const TensorView& qweight, const TensorView& qzeros,
            const TensorView& scales)
      : PackedLinear(module, qweight.file.string(), rows, cols, 4, groups),
        group_size_(group_size),
        qweight_(qweight),
        qzeros_(qzeros),
        scales_(scales) {}

  size_t packed_bytes() const override { return qweight_.nbytes + qzeros_.nbytes + scales_.nbytes; }

  void group_index(int32_t* dst) const override {
    for (int64_t k = 0; k < cols(); ++k) dst[k] = static_cast<int32_t>(k / group_size_);
  }

  void decode_rows(int64_t n0, int64_t count, uint8_t* codes, float* scales,
                   int32_t* zeros) const override {
    const int64_t N = rows(), K = cols(), G = groups(), words = N / 8;
    if (codes) {
      for (int64_t k = 0; k < K; ++k) {
        for (int64_t c = n0 / 8; c < (n0 + count + 7) / 8; ++c) {
          const auto word =
              static_cast<uint32_t>(i32_at(qweight_, static_cast<size_t>(k * words + c)));
          for (int j = 0; j < 8; ++j) {
            const int64_t n = 8 * c + kColumnOfNibble[j];
            if (n >= n0 && n < n0 + count) {
              codes[(n - n0) * K + k] = static_cast<uint8_t>((word >> (4 * j)) & 15u);
            }
          }
        }
      }
    }
    for (int64_t g = 0; g < G; ++g) {
      for (int64_t i = 0; i < count; ++i) {
        scales[i * G + g] = float_at(scales_, static_cast<size_t>(g * N + n0 + i));
        zeros[i * G + g] = nibble(qzeros_, g * words, n0 + i);
      }
    }
  }

 private:
  // Output column n of the packed row starting at word `row_start`.
  static uint8_t nibble(const TensorView& t, int64_t row_start, int64_t n) {
    const auto word = static_cast<uint32_t>(i32_at(t, static_cast<size_t>(row_start + n / 8)));
    return static_cast<uint8_t>((word >> (4 * kNibbleOfColumn[n % 8])) & 15u);
  }

  int64_t group_size_;
  const TensorView& qweight_;
  const TensorView& qzeros_;
  const TensorView& scales_;
};

// AutoAWQ skips a module when any listed name is a substring of its name (as vLLM does).
std::string excluded_by(const QuantizationConfig& c, const std::string& module) {
  auto it = c.json.find("modules_to_not_convert");
  if (it == c.json.end() || it->is_null()) return "";
  if (!it->is_array()) throw_config_error(c, "modules_to_not_convert", "must be a list");
  for (const auto& entry : *it) {
    if (!entry.is_string()) {
      throw_config_error(c, "modules_to_not_convert", "must be a list of strings");
    }
    const std::string key = entry.get<std::string>();
    if (module.find(key) != std::string::npos) return key;
  }
  return "";
}

}  // namespace

PackedPlan plan_awq(const Checkpoint& base, const QuantizationConfig& c) {
  const nlohmann::ordered_json& q = c.json;
  const int64_t bits = config_int(c, q, "bits").value_or(config_int(c, q, "w_bit").value_or(4));
  const int64_t group_size =
      config_int(c, q, "group_size").value_or(config_int(c, q, "q_group_size").value_or(128));
  const std::string version = ascii_lower(config_string(c, q, "version").value_or("gemm"));
  if (version != "gemm") {
    throw_config_error(c, "version",
                       "'" + version +
                           "' is not supported (AutoAWQ's GEMM layout, version gemm, "
                           "is; re-export the model with version gemm)");
  }
  if (group_size == 0 || group_size < -1) {
    throw_config_error(c, "group_size", "must be -1 or a positive size");
  }
  PackedPlan plan;
  plan.suffixes = {".qweight", ".qzeros", ".scales"};
  for (const std::string& module : modules_with_suffix(base, ".qweight")) {
    const TensorView& qweight = packed_matrix(base, module + ".qweight", {DType::kI32});
    const std::string file = qweight.file.string();
    if (const std::string key = excluded_by(c, module); !key.empty()) {
      throw InputError(file + ": '" + module + "' is stored packed but quantization_config." +
                       "modules_to_not_convert lists '" + key + "'");
    }
    if (bits != 4) {
      throw InputError(file + ": '" + module + "' is quantized to " + std::to_string(bits) +
                       " bits; only 4-bit AWQ is supported");
    }
    const int64_t K = qweight.shape[0], N = qweight.shape[1] * 8;
    const int64_t group = group_size == -1 ? K : group_size;
    const int64_t G = ceil_div(K, group);
    const std::string dims = std::to_string(K) + " input columns in groups of " +
                             std::to_string(group) + ", " + std::to_string(N) +
                             " outputs (qweight holds 8 per word)";
    const TensorView& scales = packed_tensor(
        base, module + ".scales", {DType::kF16, DType::kBF16, DType::kF32}, {G, N}, dims);
    const TensorView& qzeros =
        packed_tensor(base, module + ".qzeros", {DType::kI32}, {G, N / 8}, dims);
    if (base.find(module + ".weight")) {
      throw InputError(file + ": '" + module + "' has both a packed qweight and a float weight");
    }
    for (const char* s : {".qweight", ".qzeros", ".scales"}) plan.consumed.insert(module + s);
    plan.modules.push_back(
        std::make_unique<AwqLinear>(module, N, K, G, group, qweight, qzeros, scales));
  }
  return plan;
}

}  // namespace gemmaserve
