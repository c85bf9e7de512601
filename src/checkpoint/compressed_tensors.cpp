#include "checkpoint/compressed_tensors.h"

#include <optional>

#include "core/error.h"
#include "core/logging.h"

namespace gemmaserve {
namespace {

bool is_int_dtype(DType d) { return d == DType::kI8 || d == DType::kI32; }

// How a module's zero points are stored.
enum class ZeroStorage {
  kNone,      // symmetric: zero = offset
  kPacked,    // int32 [ceil(N / per), G], packed along the output dim, stored zp + offset
  kUnpacked,  // integers [N, G] holding zp
  kSingle,    // one zp for the whole tensor
};

struct CtLayout {
  int bits = 4;                        // of the stored codes (8 for unpacked int8 weights)
  const TensorView* packed = nullptr;  // pack-quantized codes, else `weight` holds int8 q
  const TensorView* weight = nullptr;
  const TensorView* scale = nullptr;
  const TensorView* zero_point = nullptr;
  ZeroStorage zeros = ZeroStorage::kNone;
  const TensorView* g_idx = nullptr;
  int64_t group_size = 0;
  int32_t offset = 8;  // 2^(bits - 1): signed q and zp are stored (or read) as value + offset
};

class CtLinear final : public PackedLinear {
 public:
  CtLinear(const std::string& module, int64_t rows, int64_t cols, int64_t groups,
           const CtLayout& layout)
      : PackedLinear(module, (layout.packed ? layout.packed : layout.weight)->file.string(), rows,
                     cols, layout.bits, groups),
        l_(layout) {}

  size_t packed_bytes() const override {
    size_t n = (l_.packed ? l_.packed : l_.weight)->nbytes + l_.scale->nbytes;
    if (l_.zero_point) n += l_.zero_point->nbytes;
    if (l_.g_idx) n += l_.g_idx->nbytes;
    return n;
  }

  void group_index(int32_t* dst) const override {
    for (int64_t k = 0; k < cols(); ++k) {
      dst[k] = l_.g_idx ? i32_at(*l_.g_idx, static_cast<size_t>(k))
                        : static_cast<int32_t>(k / l_.group_size);
    }
  }

  void decode_rows(int64_t n0, int64_t count, uint8_t* codes, float* scales,
                   int32_t* zeros) const override {
    const int64_t K = cols(), G = groups();
    const int b = l_.bits, per = 32 / b;
    const uint32_t mask = (1u << b) - 1;
    if (codes && l_.packed) {
      const int64_t words = l_.packed->shape[1];
      for (int64_t i = 0; i < count; ++i) {
        uint8_t* dst = codes + i * K;
        for (int64_t k = 0; k < K; ++k) {
          const auto word = static_cast<uint32_t>(
              i32_at(*l_.packed, static_cast<size_t>((n0 + i) * words + k / per)));
          dst[k] = static_cast<uint8_t>((word >> (b * (k % per))) & mask);
        }
      }
    } else if (codes) {
      for (int64_t i = 0; i < count * K; ++i) {
        const auto q = static_cast<int8_t>(l_.weight->data[static_cast<size_t>(n0 * K + i)]);
        codes[i] = static_cast<uint8_t>(q + 128);
      }
    }
    const bool one_scale = l_.scale->numel() == 1;
    for (int64_t i = 0; i < count; ++i) {
      const int64_t n = n0 + i;
      for (int64_t g = 0; g < G; ++g) {
        scales[i * G + g] = float_at(*l_.scale, one_scale ? 0 : static_cast<size_t>(n * G + g));
        zeros[i * G + g] = zero(n, g);
      }
    }
  }

 private:
  int32_t zero(int64_t n, int64_t g) const {
    const int b = l_.bits, per = 32 / b;
    switch (l_.zeros) {
      case ZeroStorage::kNone:
        return l_.offset;
      case ZeroStorage::kPacked: {
        const auto word = static_cast<uint32_t>(
            i32_at(*l_.zero_point, static_cast<size_t>((n / per) * groups() + g)));
        return static_cast<int32_t>((word >> (b * (n % per))) & ((1u << b) - 1));
      }
      case ZeroStorage::kUnpacked:
        return static_cast<int32_t>(int_at(*l_.zero_point, static_cast<size_t>(n * groups() + g))) +
               l_.offset;
      case ZeroStorage::kSingle:
        return static_cast<int32_t>(int_at(*l_.zero_point, 0)) + l_.offset;
    }
    return l_.offset;
  }

  CtLayout l_;
};

// One config group's weight scheme.
struct CtScheme {
  std::string group;   // its key in config_groups, for messages
  std::string format;  // pack-quantized, naive-quantized, int-quantized
  int64_t bits = 4;
  std::string strategy;  // group, channel, tensor
  int64_t group_size = 0;
  bool symmetric = true;
};

struct CtGroup {
  std::vector<std::string> targets;
  std::optional<CtScheme> scheme;  // nullopt: the group does not quantize weights
};

std::vector<std::string> string_list(const QuantizationConfig& c, const nlohmann::ordered_json& j,
                                     const std::string& field) {
  std::vector<std::string> out;
  if (j.is_null()) return out;
  if (!j.is_array()) throw_config_error(c, field, "must be a list of strings");
  for (const auto& e : j) {
    if (!e.is_string()) throw_config_error(c, field, "must be a list of strings");
    out.push_back(e.get<std::string>());
  }
  return out;
}

CtScheme parse_scheme(const QuantizationConfig& c, const std::string& key,
                      const nlohmann::ordered_json& g, const std::string& global_format) {
  const std::string field = "config_groups." + key;
  CtScheme s;
  s.group = key;
  const nlohmann::ordered_json& w = g["weights"];
  if (auto acts = g.find("input_activations"); acts != g.end() && !acts->is_null()) {
    throw_config_error(c, field + ".input_activations",
                       "is set: activation quantization (W8A8, FP8 activations) is not "
                       "supported; weight-only schemes (W4A16, W8A16) are");
  }
  s.format = config_string(c, g, "format").value_or(global_format);
  if (s.format.empty()) s.format = "pack-quantized";
  if (s.format == "float-quantized") {
    throw_config_error(c, field + ".format",
                       "'float-quantized' (FP8 weights) is not supported yet; integer weight "
                       "schemes (pack-quantized, int-quantized) are");
  }
  if (s.format != "pack-quantized" && s.format != "naive-quantized" &&
      s.format != "int-quantized") {
    throw_config_error(c, field + ".format",
                       "'" + s.format +
                           "' is not supported (pack-quantized, naive-quantized and "
                           "int-quantized are)");
  }
  if (!w.is_object()) throw_config_error(c, field + ".weights", "must be an object");
  const std::string type = config_string(c, w, "type").value_or("int");
  if (type != "int") {
    throw_config_error(c, field + ".weights.type",
                       "'" + type + "' is not supported (integer weights are)");
  }
  s.bits = config_int(c, w, "num_bits").value_or(8);
  if (s.bits != 4 && s.bits != 8) {
    throw_config_error(c, field + ".weights.num_bits",
                       std::to_string(s.bits) + " is not supported (4 and 8 are)");
  }
  if (config_bool(c, w, "dynamic").value_or(false)) {
    throw_config_error(c, field + ".weights.dynamic", "true is not supported for weights");
  }
  s.strategy = config_string(c, w, "strategy").value_or("tensor");
  if (s.strategy != "group" && s.strategy != "channel" && s.strategy != "tensor") {
    throw_config_error(c, field + ".weights.strategy",
                       "'" + s.strategy + "' is not supported (group, channel and tensor are)");
  }
  s.symmetric = config_bool(c, w, "symmetric").value_or(true);
  if (s.strategy == "group") {
    s.group_size = config_int(c, w, "group_size").value_or(0);
    if (s.group_size <= 0) {
      throw_config_error(c, field + ".weights.group_size", "must be positive for strategy group");
    }
  }
  return s;
}

// Target / ignore entries: a name, `re:` + a pattern matching the start of the name, or a
// class name (only Linear is known: every packed module is a linear layer).
enum class MatchKind { kNone, kClass, kRegex, kName };

MatchKind match_kind(const QuantizationConfig& c, const std::string& target,
                     const std::string& module, const std::string& where) {
  if (target == module) return MatchKind::kName;
  if (target.rfind("re:", 0) == 0) {
    return regex_match_prefix(target.substr(3), module, c.source + ": quantization_config." + where)
               ? MatchKind::kRegex
               : MatchKind::kNone;
  }
  return target == "Linear" ? MatchKind::kClass : MatchKind::kNone;
}

}  // namespace

PackedPlan plan_compressed_tensors(const Checkpoint& base, const QuantizationConfig& c) {
  const nlohmann::ordered_json& q = c.json;
  const std::string global_format = config_string(c, q, "format").value_or("");
  if (auto sp = q.find("sparsity_config"); sp != q.end() && sp->is_object() && !sp->empty()) {
    const std::string f = config_string(c, *sp, "format").value_or("dense");
    if (f != "dense") {
      throw_config_error(c, "sparsity_config.format",
                         "'" + f + "' is not supported (sparse weights must be stored dense)");
    }
  }
  if (auto t = q.find("transform_config"); t != q.end() && !t->is_null() && !t->empty()) {
    throw_config_error(c, "transform_config", "is set: rotation transforms are not supported");
  }
  if (auto kv = q.find("kv_cache_scheme"); kv != q.end() && !kv->is_null()) {
    GS_LOG_WARNING << c.source << ": quantization_config.kv_cache_scheme is ignored: the KV cache "
                   << "keeps the engine's own format (--kv-cache-dtype)";
  }
  auto groups_it = q.find("config_groups");
  if (groups_it == q.end() || !groups_it->is_object()) {
    throw_config_error(c, "config_groups", "must be an object");
  }
  std::vector<std::pair<std::string, CtGroup>> groups;
  for (const auto& [key, g] : groups_it->items()) {
    if (!g.is_object()) throw_config_error(c, "config_groups." + key, "must be an object");
    CtGroup group;
    group.targets = string_list(c, g.contains("targets") ? g["targets"] : nlohmann::ordered_json(),
                                "config_groups." + key + ".targets");
    if (g.contains("weights") && !g["weights"].is_null()) {
      group.scheme = parse_scheme(c, key, g, global_format);
    }
    groups.emplace_back(key, std::move(group));
  }
  const std::vector<std::string> ignore =
      string_list(c, q.contains("ignore") ? q["ignore"] : nlohmann::ordered_json(), "ignore");

  // Packed modules, and integer `weight`s that carry a scale (naive / int-quantized).
  std::vector<std::string> modules = modules_with_suffix(base, ".weight_packed");
  for (const std::string& m : modules_with_suffix(base, ".weight_scale")) {
    const TensorView* w = base.find(m + ".weight");
    if (w && is_int_dtype(w->dtype) && !base.find(m + ".weight_packed")) modules.push_back(m);
  }

  PackedPlan plan;
  plan.suffixes = {".weight_packed", ".weight_scale", ".weight_zero_point", ".weight_shape",
                   ".weight_g_idx"};
  for (const std::string& module : modules) {
    const TensorView* packed_view = base.find(module + ".weight_packed");
    const std::string file =
        (packed_view ? packed_view : base.find(module + ".weight"))->file.string();
    for (const std::string& entry : ignore) {
      if (match_kind(c, entry, module, "ignore") != MatchKind::kNone) {
        throw InputError(file + ": '" + module + "' is stored quantized but quantization_config." +
                         "ignore lists '" + entry + "'");
      }
    }
    const CtScheme* scheme = nullptr;
    MatchKind best = MatchKind::kNone;
    for (const auto& [key, g] : groups) {
      for (const std::string& t : g.targets) {
        const MatchKind k = match_kind(c, t, module, "config_groups." + key + ".targets");
        if (k > best && g.scheme) {
          best = k;
          scheme = &*g.scheme;
        }
      }
    }
    if (!scheme) {
      throw InputError(file + ": '" + module + "' is stored quantized but no quantization_config." +
                       "config_groups target with a weights scheme matches it");
    }
    const bool packed = scheme->format == "pack-quantized";
    if (packed != (packed_view != nullptr)) {
      throw InputError(file + ": '" + module + "' is stored " +
                       (packed_view ? "as weight_packed" : "as an integer weight") +
                       " but config group '" + scheme->group + "' has format " + scheme->format);
    }
    CtLayout l;
    int64_t N = 0, K = 0;
    std::string dims;
    if (packed) {
      l.bits = static_cast<int>(scheme->bits);
      const int per = 32 / l.bits;
      l.packed = &packed_matrix(base, module + ".weight_packed", {DType::kI32});
      N = l.packed->shape[0];
      const TensorView& shape =
          packed_tensor(base, module + ".weight_shape", {DType::kI64, DType::kI32}, {2},
                        "the unpacked [out, in] shape");
      K = int_at(shape, 1);
      if (int_at(shape, 0) != N || K <= 0 || K > l.packed->shape[1] * per ||
          ceil_div(K, per) != l.packed->shape[1]) {
        throw InputError(file + ": tensor '" + module + ".weight_shape' holds [" +
                         std::to_string(int_at(shape, 0)) + ", " + std::to_string(K) +
                         "], which disagrees with '" + module + ".weight_packed' " +
                         l.packed->shape_string() + " (" + std::to_string(per) + " " +
                         std::to_string(l.bits) + "-bit values per int32)");
      }
      plan.consumed.insert(module + ".weight_packed");
      plan.consumed.insert(module + ".weight_shape");
    } else {
      l.bits = 8;
      l.weight = &packed_matrix(base, module + ".weight", {DType::kI8});
      N = l.weight->shape[0];
      K = l.weight->shape[1];
      plan.consumed.insert(module + ".weight");
    }
    l.offset = 1 << (l.bits - 1);
    l.group_size = scheme->strategy == "group" ? scheme->group_size : K;
    const int64_t G = ceil_div(K, l.group_size);
    dims = std::to_string(N) + " outputs, " + std::to_string(K) + " inputs, strategy " +
           scheme->strategy +
           (scheme->strategy == "group" ? " of " + std::to_string(scheme->group_size) : "");
    const std::vector<int64_t> scale_shape =
        scheme->strategy == "tensor" ? std::vector<int64_t>{1} : std::vector<int64_t>{N, G};
    l.scale = &packed_tensor(base, module + ".weight_scale",
                             {DType::kBF16, DType::kF16, DType::kF32}, scale_shape, dims);
    plan.consumed.insert(module + ".weight_scale");
    if (!scheme->symmetric) {
      const int per = 32 / l.bits;
      if (scheme->strategy == "tensor") {
        l.zeros = ZeroStorage::kSingle;
        l.zero_point = &packed_tensor(base, module + ".weight_zero_point",
                                      {DType::kI8, DType::kI32}, {1}, dims);
      } else if (packed) {
        l.zeros = ZeroStorage::kPacked;
        l.zero_point = &packed_tensor(base, module + ".weight_zero_point", {DType::kI32},
                                      {ceil_div(N, per), G},
                                      dims +
                                          ", zero points packed along "
                                          "the output dim");
      } else {
        l.zeros = ZeroStorage::kUnpacked;
        l.zero_point = &packed_tensor(base, module + ".weight_zero_point",
                                      {DType::kI8, DType::kI32}, {N, G}, dims);
      }
      plan.consumed.insert(module + ".weight_zero_point");
    } else if (const TensorView* zp = base.find(module + ".weight_zero_point")) {
      // Symmetric schemes may store an all-zero zero point; it changes nothing.
      if (zp->dtype != DType::kI8 && zp->dtype != DType::kI32 && zp->dtype != DType::kI64) {
        throw InputError(file + ": tensor '" + zp->name + "' has dtype " + dtype_name(zp->dtype) +
                         ", expected I8, I32 or I64");
      }
      for (int64_t i = 0; i < zp->numel(); ++i) {
        if (int_at(*zp, static_cast<size_t>(i)) != 0) {
          throw InputError(file + ": tensor '" + zp->name + "' holds a non-zero zero point but " +
                           "config group '" + scheme->group + "' is symmetric");
        }
      }
      plan.consumed.insert(module + ".weight_zero_point");
    }
    l.g_idx = optional_packed_tensor(base, module + ".weight_g_idx", {DType::kI32}, {K}, dims);
    if (l.g_idx) {
      check_group_index(*l.g_idx, G);
      plan.consumed.insert(module + ".weight_g_idx");
    }
    plan.modules.push_back(std::make_unique<CtLinear>(module, N, K, G, l));
  }
  return plan;
}

}  // namespace gemmaserve
