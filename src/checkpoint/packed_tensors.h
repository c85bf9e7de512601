// Reading the stored tensors of packed quantized modules (gptq.cpp, awq.cpp,
// compressed_tensors.cpp): lookups that check dtype and shape before anything is allocated,
// element reads that need no alignment, the config fields every method reads, and the plan a
// method hands to PackedCheckpoint.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/packed_linear.h"

namespace gemmaserve {

// What a method reads from a checkpoint: its packed modules and the stored tensors they consume
// (hidden from PackedCheckpoint::tensors()).
struct PackedPlan {
  std::vector<std::unique_ptr<PackedLinear>> modules;
  std::set<std::string> consumed;
  // Suffixes of the method's packed tensors ("qzeros"): one that no module consumed is refused.
  std::vector<std::string> suffixes;
};

// The quantization config a method parses, with `source` (config.json or quantize_config.json)
// for its errors.
struct QuantizationConfig {
  nlohmann::ordered_json json;
  std::string source;
};

// InputError "<source>: quantization_config.<field> <why>".
[[noreturn]] void throw_config_error(const QuantizationConfig& c, const std::string& field,
                                     const std::string& why);
// An integer field (nullopt when absent or null); InputError when of another type.
std::optional<int64_t> config_int(const QuantizationConfig& c, const nlohmann::ordered_json& obj,
                                  const std::string& field);
std::optional<bool> config_bool(const QuantizationConfig& c, const nlohmann::ordered_json& obj,
                                const std::string& field);
std::optional<std::string> config_string(const QuantizationConfig& c,
                                         const nlohmann::ordered_json& obj,
                                         const std::string& field);

// Python's re.match(pattern, name): the pattern matches a prefix of name. InputError naming
// `where` for a pattern std::regex cannot compile.
bool regex_match_prefix(const std::string& pattern, const std::string& name,
                        const std::string& where);

// Module names of the tensors ending in `suffix` ("X.qweight" -> "X"), in name order.
std::vector<std::string> modules_with_suffix(const Checkpoint& base, const std::string& suffix);

// The tensor `name`, checked: InputError naming its file and the tensor when absent ("missing
// tensor"), of another dtype, or of another shape (`why` explains the expected shape).
const TensorView& packed_tensor(const Checkpoint& base, const std::string& name,
                                std::initializer_list<DType> dtypes,
                                const std::vector<int64_t>& shape, const std::string& why);
// The same checks for a tensor that may be absent (nullptr).
const TensorView* optional_packed_tensor(const Checkpoint& base, const std::string& name,
                                         std::initializer_list<DType> dtypes,
                                         const std::vector<int64_t>& shape, const std::string& why);
// A 2-D tensor of one of `dtypes` whose shape the caller derives the module's dims from.
const TensorView& packed_matrix(const Checkpoint& base, const std::string& name,
                                std::initializer_list<DType> dtypes);

// Element i of an F16 / BF16 / F32 tensor as f32 (exact).
float float_at(const TensorView& v, size_t i);
inline int32_t i32_at(const TensorView& v, size_t i) {
  int32_t x;
  std::memcpy(&x, v.data + i * sizeof x, sizeof x);
  return x;
}
// Element i of an I64 / I32 / I8 tensor.
int64_t int_at(const TensorView& v, size_t i);

// Checks every entry of a g_idx tensor (K entries of I32) lies in [0, groups).
void check_group_index(const TensorView& g_idx, int64_t groups);

// ASCII lower case ("GEMM" -> "gemm").
std::string ascii_lower(std::string s);

// ceil(a / b) for a >= 0, b > 0, without overflow (b may come from a config).
inline int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0); }

}  // namespace gemmaserve
