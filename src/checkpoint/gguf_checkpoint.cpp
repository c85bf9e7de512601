#include "checkpoint/gguf_checkpoint.h"

#include <cstdint>
#include <limits>
#include <optional>

#include "core/error.h"

namespace gemmaserve {
namespace {

// A metadata value as JSON; nullopt for string and nested arrays.
std::optional<nlohmann::json> metadata_json(const GgufValue& v) {
  switch (v.type()) {
    case GgufType::kString:
      return std::string(v.as_string());
    case GgufType::kBool:
      return v.as_bool();
    case GgufType::kFloat32:
    case GgufType::kFloat64:
      return v.as_float();
    case GgufType::kArray:
      switch (v.array_type()) {
        case GgufType::kString:
        case GgufType::kArray:
          return std::nullopt;
        case GgufType::kBool:
          return v.as_bool_array();
        case GgufType::kFloat32:
        case GgufType::kFloat64:
          return v.as_float_array();
        default:
          return v.as_int_array();
      }
    default:
      return v.as_int();
  }
}

}  // namespace

GgufCheckpoint::GgufCheckpoint(const std::filesystem::path& path)
    : file_(path), config_source_(path.string()), config_(nlohmann::json::object()) {
  for (const GgufValue& v : file_.metadata()) {
    if (std::optional<nlohmann::json> j = metadata_json(v)) config_[v.key()] = std::move(*j);
  }
  tensors_.reserve(file_.tensors().size());
  for (const GgufTensorInfo& info : file_.tensors()) {
    const std::optional<DType> dtype = dtype_of_ggml_type(info.ggml_type);
    if (!dtype) {
      const std::optional<std::string_view> name = ggml_type_name(info.ggml_type);
      throw InputError(path.string() + ": tensor '" + info.name + "' has ggml type " +
                       std::to_string(info.ggml_type) + " (" +
                       (name ? std::string(*name) : "unknown") + "), which gemmaserve cannot read");
    }
    for (uint64_t d : info.dims) {
      if (d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        throw InputError(path.string() + ": tensor '" + info.name + "' has a dimension of " +
                         std::to_string(d));
      }
    }
    CheckpointTensor t;
    t.name = info.name;
    t.dtype = *dtype;
    t.shape.assign(info.dims.rbegin(), info.dims.rend());  // GGUF lists the innermost first
    t.data = info.data;
    t.nbytes = static_cast<size_t>(*info.byte_size);  // known for every type with a DType
    t.file = path;
    tensors_.push_back(std::move(t));
  }
  for (const CheckpointTensor& t : tensors_) {
    if (!index_.emplace(t.name, &t).second) {
      throw InputError(path.string() + ": tensor '" + t.name + "' appears twice");
    }
  }
}

}  // namespace gemmaserve
