#include "checkpoint/packed_tensors.h"

#include <regex>

#include "core/error.h"

namespace gemmaserve {
namespace {

std::string dtype_list(std::initializer_list<DType> dtypes) {
  std::string out;
  for (DType d : dtypes) out += (out.empty() ? "" : " or ") + std::string(dtype_name(d));
  return out;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

void check_dtype(const TensorView& v, std::initializer_list<DType> dtypes) {
  for (DType d : dtypes) {
    if (v.dtype == d) return;
  }
  throw InputError(v.file.string() + ": tensor '" + v.name + "' has dtype " + dtype_name(v.dtype) +
                   ", expected " + dtype_list(dtypes));
}

}  // namespace

std::string ascii_lower(std::string s) {
  for (char& ch : s) {
    if (ch >= 'A' && ch <= 'Z') ch = static_cast<char>(ch - 'A' + 'a');
  }
  return s;
}

void throw_config_error(const QuantizationConfig& c, const std::string& field,
                        const std::string& why) {
  throw InputError(c.source + ": quantization_config." + field + " " + why);
}

std::optional<int64_t> config_int(const QuantizationConfig& c, const nlohmann::ordered_json& obj,
                                  const std::string& field) {
  auto it = obj.find(field);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  if (!it->is_number_integer()) throw_config_error(c, field, "must be an integer");
  return it->get<int64_t>();
}

std::optional<bool> config_bool(const QuantizationConfig& c, const nlohmann::ordered_json& obj,
                                const std::string& field) {
  auto it = obj.find(field);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) throw_config_error(c, field, "must be true or false");
  return it->get<bool>();
}

std::optional<std::string> config_string(const QuantizationConfig& c,
                                         const nlohmann::ordered_json& obj,
                                         const std::string& field) {
  auto it = obj.find(field);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) throw_config_error(c, field, "must be a string");
  return it->get<std::string>();
}

bool regex_match_prefix(const std::string& pattern, const std::string& name,
                        const std::string& where) {
  // std::regex recurses per character: bound what it sees (real names are < 200 characters).
  constexpr size_t kMaxLength = 1024;
  if (pattern.size() > kMaxLength || name.size() > kMaxLength) {
    throw InputError(where + ": pattern or module name longer than " + std::to_string(kMaxLength) +
                     " characters");
  }
  try {
    const std::regex re(pattern, std::regex::ECMAScript);
    return std::regex_search(name, re, std::regex_constants::match_continuous);
  } catch (const std::regex_error& e) {
    throw InputError(where + ": pattern '" + pattern + "' is not a regular expression (" +
                     e.what() + ")");
  }
}

std::vector<std::string> modules_with_suffix(const Checkpoint& base, const std::string& suffix) {
  std::vector<std::string> out;
  for (const auto& [name, v] : base.tensors()) {
    if (ends_with(name, suffix) && name.size() > suffix.size()) {
      out.push_back(name.substr(0, name.size() - suffix.size()));
    }
  }
  return out;
}

const TensorView* optional_packed_tensor(const Checkpoint& base, const std::string& name,
                                         std::initializer_list<DType> dtypes,
                                         const std::vector<int64_t>& shape,
                                         const std::string& why) {
  const TensorView* v = base.find(name);
  if (!v) return nullptr;
  check_dtype(*v, dtypes);
  if (v->shape != shape) {
    TensorView want;
    want.shape = shape;
    throw InputError(v->file.string() + ": tensor '" + name + "' has shape " + v->shape_string() +
                     ", expected " + want.shape_string() + " (" + why + ")");
  }
  return v;
}

const TensorView& packed_tensor(const Checkpoint& base, const std::string& name,
                                std::initializer_list<DType> dtypes,
                                const std::vector<int64_t>& shape, const std::string& why) {
  const TensorView* v = optional_packed_tensor(base, name, dtypes, shape, why);
  if (!v) throw InputError(base.path().string() + ": missing tensor '" + name + "' (" + why + ")");
  return *v;
}

const TensorView& packed_matrix(const Checkpoint& base, const std::string& name,
                                std::initializer_list<DType> dtypes) {
  const TensorView* v = base.find(name);
  if (!v) throw InputError(base.path().string() + ": missing tensor '" + name + "'");
  check_dtype(*v, dtypes);
  if (v->shape.size() != 2 || v->shape[0] <= 0 || v->shape[1] <= 0) {
    throw InputError(v->file.string() + ": tensor '" + name + "' has shape " + v->shape_string() +
                     ", expected a non-empty matrix");
  }
  return *v;
}

float float_at(const TensorView& v, size_t i) {
  switch (v.dtype) {
    case DType::kF32: {
      float x;
      std::memcpy(&x, v.data + i * 4, 4);
      return x;
    }
    case DType::kF16:
    case DType::kBF16: {
      uint16_t h;
      std::memcpy(&h, v.data + i * 2, 2);
      return v.dtype == DType::kF16 ? f16_to_f32(h) : bf16_to_f32(h);
    }
    default:
      throw InputError(v.file.string() + ": tensor '" + v.name + "' is not a float tensor");
  }
}

int64_t int_at(const TensorView& v, size_t i) {
  switch (v.dtype) {
    case DType::kI64: {
      int64_t x;
      std::memcpy(&x, v.data + i * 8, 8);
      return x;
    }
    case DType::kI32:
      return i32_at(v, i);
    case DType::kI8:
      return static_cast<int8_t>(v.data[i]);
    default:
      throw InputError(v.file.string() + ": tensor '" + v.name + "' is not an integer tensor");
  }
}

void check_group_index(const TensorView& g_idx, int64_t groups) {
  const int64_t n = g_idx.numel();
  for (int64_t k = 0; k < n; ++k) {
    const int32_t g = i32_at(g_idx, static_cast<size_t>(k));
    if (g < 0 || g >= groups) {
      throw InputError(g_idx.file.string() + ": tensor '" + g_idx.name + "' holds " +
                       std::to_string(g) + " at column " + std::to_string(k) +
                       ", outside the groups [0, " + std::to_string(groups) + ")");
    }
  }
}

}  // namespace gemmaserve
