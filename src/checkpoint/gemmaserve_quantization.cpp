#include "checkpoint/gemmaserve_quantization.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "checkpoint/packed_checkpoint.h"
#include "core/error.h"
#include "kernels/cpu/quant.h"

namespace gemmaserve {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

DType tensor_quant_type(DType type, const std::string& name) {
  if (type == DType::kQ8_0) return type;
  const bool embedding = name == "lm_head.weight" || (ends_with(name, "embed_tokens.weight") &&
                                                      !ends_with(name, "_per_layer.weight"));
  return embedding ? DType::kQ8_0 : type;
}

std::optional<DType> block_fit_type(DType wanted, int64_t cols) {
  if (cols % dtype_block_elems(wanted) == 0) return wanted;
  if (wanted == DType::kQ4_K && cols % dtype_block_elems(DType::kQ4_0) == 0) return DType::kQ4_0;
  return std::nullopt;
}

std::string block_fit_note(const std::string& name, DType wanted, int64_t cols, DType float_dtype) {
  const std::optional<DType> fit = block_fit_type(wanted, cols);
  return name + ": row length " + std::to_string(cols) + " is not a multiple of " +
         std::to_string(dtype_block_elems(wanted)) + "; " +
         (fit ? std::string("stored as ") + dtype_name(*fit)
              : std::string("kept as ") + dtype_name(float_dtype));
}

bool is_quantizable_tensor(const std::string& key) {
  if (key.find("router.") != std::string::npos) return false;
  static const char* kSuffixes[] = {"embed_tokens.weight",
                                    "embed_tokens_per_layer.weight",
                                    "per_layer_model_projection.weight",
                                    "self_attn.q_proj.weight",
                                    "self_attn.k_proj.weight",
                                    "self_attn.v_proj.weight",
                                    "self_attn.o_proj.weight",
                                    "mlp.gate_proj.weight",
                                    "mlp.up_proj.weight",
                                    "mlp.down_proj.weight",
                                    "per_layer_input_gate.weight",
                                    "per_layer_projection.weight",
                                    "experts.gate_up_proj",
                                    "experts.down_proj",
                                    "lm_head.weight"};
  for (const char* s : kSuffixes) {
    if (ends_with(key, s)) return true;
  }
  return false;
}

bool is_quantizable_vision_tensor(const std::string& name) {
  if (name == "model.vision_tower.patch_embedder.input_proj.weight" ||
      name == "model.embed_vision.embedding_projection.weight" ||
      name == "model.vision_embedder.patch_dense.weight" ||
      name == "model.embed_audio.embedding_projection.weight") {
    return true;
  }
  return name.rfind("model.vision_tower.encoder.layers.", 0) == 0 &&
         ends_with(name, ".linear.weight");
}

std::optional<StoredQuantization> stored_quantization(const nlohmann::json& config,
                                                      const std::string& source) {
  if (!config.is_object()) return std::nullopt;
  auto it = config.find("quantization_config");
  if (it == config.end() || it->is_null()) return std::nullopt;
  const auto bad = [&](const std::string& why) {
    std::string msg = source;
    msg.append(": quantization_config ").append(why);
    return InputError(msg);
  };
  if (!it->is_object()) throw bad("must be an object");
  const auto m = it->find("quant_method");
  const std::string method = m != it->end() && m->is_string() ? m->get<std::string>() : "";
  // GPTQ, AWQ and compressed-tensors folders open as a PackedCheckpoint (packed_checkpoint.h).
  if (!packed_method_name(method).empty()) return std::nullopt;
  if (method != kQuantMethod) {
    throw bad("quant_method '" + method + "' is not supported (supported: " + kQuantMethod +
              ", gptq, awq, compressed-tensors)");
  }
  StoredQuantization q;
  if (!it->contains("weight_type") || !(*it)["weight_type"].is_string()) {
    throw bad("needs a string weight_type");
  }
  q.type = cpu::parse_quantization_type((*it)["weight_type"].get<std::string>(),
                                        source + ": quantization_config.weight_type");
  auto t = it->find("tensors");
  if (t == it->end() || !t->is_object()) throw bad("needs a tensors object");
  for (const auto& [name, value] : t->items()) {
    if (!value.is_string()) throw bad("tensors['" + name + "'] must be a string");
    q.tensors[name] = cpu::parse_quantization_type(value.get<std::string>(),
                                                   source + ": quantization_config.tensors");
  }
  return q;
}

nlohmann::json quantization_config_json(DType type, const std::map<std::string, DType>& tensors) {
  nlohmann::json t = nlohmann::json::object();
  for (const auto& [name, d] : tensors) t[name] = cpu::quantization_type_name(d);
  return {{"quant_method", kQuantMethod},
          {"weight_type", cpu::quantization_type_name(type)},
          {"storage", "U8 tensors of shape [rows..., row_bytes]: rows of llama.cpp-layout blocks"},
          {"tensors", t}};
}

void fill_quantized_bytes(DType type, int64_t cols, int64_t first, int64_t count, std::byte* dst,
                          const std::function<void(int64_t, float*)>& row_values) {
  const auto row_bytes = static_cast<int64_t>(dtype_row_bytes(type, cols));
  std::vector<float> values(static_cast<size_t>(cols));
  std::vector<std::byte> row(static_cast<size_t>(row_bytes));
  int64_t pos = first;
  const int64_t end = first + count;
  while (pos < end) {
    const int64_t r = pos / row_bytes, in_row = pos % row_bytes;
    const int64_t n = std::min(end - pos, row_bytes - in_row);
    row_values(r, values.data());
    cpu::quantize_row(type, values.data(), row.data(), cols);
    std::memcpy(dst + (pos - first), row.data() + in_row, static_cast<size_t>(n));
    pos += n;
  }
}

}  // namespace gemmaserve
