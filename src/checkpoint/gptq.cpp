#include "checkpoint/gptq.h"

#include <algorithm>

#include "core/error.h"

namespace gemmaserve {
namespace {

class GptqLinear final : public PackedLinear {
 public:
  GptqLinear(const std::string& module, int64_t rows, int64_t cols, int bits, int64_t groups,
             int64_t group_size, const TensorView& qweight, const TensorView& qzeros,
             const TensorView& scales, const TensorView* g_idx, int32_t zero_offset)
      : PackedLinear(module, qweight.file.string(), rows, cols, bits, groups),
        group_size_(group_size),
        qweight_(qweight),
        qzeros_(qzeros),
        scales_(scales),
        g_idx_(g_idx),
        zero_offset_(zero_offset) {}

  size_t packed_bytes() const override {
    return qweight_.nbytes + qzeros_.nbytes + scales_.nbytes + (g_idx_ ? g_idx_->nbytes : 0);
  }

  void group_index(int32_t* dst) const override {
    for (int64_t k = 0; k < cols(); ++k) {
      dst[k] =
          g_idx_ ? i32_at(*g_idx_, static_cast<size_t>(k)) : static_cast<int32_t>(k / group_size_);
    }
  }

  void decode_rows(int64_t n0, int64_t count, uint8_t* codes, float* scales,
                   int32_t* zeros) const override {
    const int64_t N = rows(), K = cols(), G = groups();
    const int b = bits(), per = 32 / b;
    const uint32_t mask = (1u << b) - 1;
    if (codes) {
      for (int64_t w = 0; w < K / per; ++w) {
        for (int64_t i = 0; i < count; ++i) {
          const auto word =
              static_cast<uint32_t>(i32_at(qweight_, static_cast<size_t>(w * N + n0 + i)));
          uint8_t* dst = codes + i * K + w * per;
          for (int j = 0; j < per; ++j) dst[j] = static_cast<uint8_t>((word >> (b * j)) & mask);
        }
      }
    }
    const int64_t zero_words = N / per;
    for (int64_t g = 0; g < G; ++g) {
      for (int64_t i = 0; i < count; ++i) {
        const int64_t n = n0 + i;
        scales[i * G + g] = float_at(scales_, static_cast<size_t>(g * N + n));
        const auto word =
            static_cast<uint32_t>(i32_at(qzeros_, static_cast<size_t>(g * zero_words + n / per)));
        zeros[i * G + g] = static_cast<int32_t>((word >> (b * (n % per))) & mask) + zero_offset_;
      }
    }
  }

 private:
  int64_t group_size_;
  const TensorView& qweight_;
  const TensorView& qzeros_;
  const TensorView& scales_;
  const TensorView* g_idx_;
  int32_t zero_offset_;
};

// Per-module settings after GPTQModel's `dynamic` rules.
struct GptqModuleConfig {
  bool excluded = false;
  std::string rule;  // the rule that excluded it
  int64_t bits = 4;
  int64_t group_size = 128;
  bool desc_act = false;
};

GptqModuleConfig module_config(const QuantizationConfig& c, const GptqModuleConfig& defaults,
                               const std::string& module) {
  GptqModuleConfig m = defaults;
  auto dyn = c.json.find("dynamic");
  if (dyn == c.json.end() || dyn->is_null()) return m;
  if (!dyn->is_object()) throw_config_error(c, "dynamic", "must be an object");
  for (const auto& [key, overrides] : dyn->items()) {
    const bool exclude = key.rfind("-:", 0) == 0;
    const std::string pattern =
        key.rfind("-:", 0) == 0 || key.rfind("+:", 0) == 0 ? key.substr(2) : key;
    if (!regex_match_prefix(pattern, module, c.source + ": quantization_config.dynamic")) continue;
    if (exclude) {
      m.excluded = true;
      m.rule = key;
      return m;
    }
    if (!overrides.is_object())
      throw_config_error(c, "dynamic['" + key + "']", "must be an object");
    if (auto v = config_int(c, overrides, "bits")) m.bits = *v;
    if (auto v = config_int(c, overrides, "group_size")) m.group_size = *v;
    if (auto v = config_bool(c, overrides, "desc_act")) m.desc_act = *v;
    return m;
  }
  return m;
}

}  // namespace

PackedPlan plan_gptq(const Checkpoint& base, const QuantizationConfig& c) {
  const nlohmann::ordered_json& q = c.json;
  GptqModuleConfig defaults;
  defaults.bits = config_int(c, q, "bits").value_or(4);
  defaults.group_size = config_int(c, q, "group_size").value_or(128);
  defaults.desc_act = config_bool(c, q, "desc_act").value_or(false);
  std::string format = config_string(c, q, "checkpoint_format")
                           .value_or(config_string(c, q, "format").value_or("gptq"));
  format = ascii_lower(format);
  if (format != "gptq" && format != "gptq_v2") {
    throw_config_error(c, "checkpoint_format",
                       "'" + format + "' is not supported (gptq and gptq_v2 are)");
  }
  if (config_bool(c, q, "is_marlin_format").value_or(false)) {
    throw_config_error(c, "is_marlin_format", "true is not supported (Marlin-packed GPTQ)");
  }
  const std::string pack_dtype = config_string(c, q, "pack_dtype").value_or("int32");
  if (pack_dtype != "int32") {
    throw_config_error(c, "pack_dtype", "'" + pack_dtype + "' is not supported (int32 is)");
  }
  const int32_t zero_offset = format == "gptq" ? 1 : 0;

  PackedPlan plan;
  plan.suffixes = {".qweight", ".qzeros", ".scales", ".g_idx"};
  for (const std::string& module : modules_with_suffix(base, ".qweight")) {
    const GptqModuleConfig m = module_config(c, defaults, module);
    const TensorView& qweight = packed_matrix(base, module + ".qweight", {DType::kI32});
    const std::string file = qweight.file.string();
    if (m.excluded) {
      throw InputError(file + ": '" + module + "' is stored packed but quantization_config." +
                       "dynamic rule '" + m.rule + "' excludes it from quantization");
    }
    if (m.bits != 4 && m.bits != 8) {
      throw InputError(file + ": '" + module + "' is quantized to " + std::to_string(m.bits) +
                       " bits; only 4- and 8-bit GPTQ is supported");
    }
    if (m.group_size == 0 || m.group_size < -1) {
      throw InputError(file + ": '" + module + "' has group_size " + std::to_string(m.group_size) +
                       " (expected -1 or a positive size)");
    }
    const int bits = static_cast<int>(m.bits), per = 32 / bits;
    const int64_t N = qweight.shape[1], K = qweight.shape[0] * per;
    const int64_t group = m.group_size == -1 ? K : m.group_size;
    const int64_t G = ceil_div(K, group);
    const std::string dims = std::to_string(K) + " input columns (" +
                             std::to_string(qweight.shape[0]) + " qweight rows of " +
                             std::to_string(per) + " " + std::to_string(bits) +
                             "-bit values) in groups of " + std::to_string(group) + ", " +
                             std::to_string(N) + " outputs";
    if (N % per != 0) {
      throw InputError(file + ": '" + module + "' has " + std::to_string(N) +
                       " output features, not a multiple of " + std::to_string(per) +
                       " (qzeros packs them " + std::to_string(per) + " to a word)");
    }
    const TensorView& scales = packed_tensor(
        base, module + ".scales", {DType::kF16, DType::kBF16, DType::kF32}, {G, N}, dims);
    const TensorView& qzeros =
        packed_tensor(base, module + ".qzeros", {DType::kI32}, {G, N / per}, dims);
    const TensorView* g_idx =
        optional_packed_tensor(base, module + ".g_idx", {DType::kI32}, {K}, dims);
    if (g_idx) check_group_index(*g_idx, G);
    if (base.find(module + ".weight")) {
      throw InputError(file + ": '" + module + "' has both a packed qweight and a float weight");
    }
    for (const char* s : {".qweight", ".qzeros", ".scales", ".g_idx"}) {
      plan.consumed.insert(module + s);
    }
    // Like vLLM, g_idx orders the groups only under desc_act (act-order); else groups are k / G.
    plan.modules.push_back(std::make_unique<GptqLinear>(module, N, K, bits, G, group, qweight,
                                                        qzeros, scales,
                                                        m.desc_act ? g_idx : nullptr, zero_offset));
  }
  return plan;
}

}  // namespace gemmaserve
