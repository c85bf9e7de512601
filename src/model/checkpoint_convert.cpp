#include "model/checkpoint_convert.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "model/weights.h"

namespace gemmaserve {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }

bool is_float(DType d) { return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16; }

float load_float(DType d, const std::byte* p) {
  if (d == DType::kF32) {
    float x;
    std::memcpy(&x, p, 4);
    return x;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  return d == DType::kBF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

void store_float(DType d, float x, std::byte* p) {
  if (d == DType::kF32) {
    std::memcpy(p, &x, 4);
    return;
  }
  const uint16_t h = d == DType::kBF16 ? f32_to_bf16(x) : f32_to_f16(x);
  std::memcpy(p, &h, 2);
}

// The new name of a tensor in the target form; empty = dropped.
std::string target_name(const std::string& name, bool causal_lm) {
  if (!causal_lm) return name;
  static const char* kTowers[] = {"model.vision_tower.", "model.embed_vision.",
                                  "model.audio_tower.", "model.embed_audio.",
                                  "model.vision_embedder."};
  for (const char* t : kTowers) {
    if (starts_with(name, t)) return "";
  }
  static const std::string kText = "model.language_model.";
  if (starts_with(name, kText)) return "model." + name.substr(kText.size());
  return name;
}

void write_json(const fs::path& path, const json& j) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << j.dump(2) << "\n";
  out.close();
  if (!out) throw InputError(path.string() + ": cannot write");
}

}  // namespace

json to_per_layer_config_form(const json& config) {
  const bool nested = config.contains("text_config") && config["text_config"].is_object();
  json out = config;
  json& t = nested ? out["text_config"] : out;
  if (t.contains("per_layer_config") && !t["per_layer_config"].is_null()) return out;
  // Layer types as the loader resolves them (explicit list or HF's default pattern).
  const TextConfig text = parse_model_config(config, "config").text;
  const int L = text.num_hidden_layers;

  auto int_or = [&t](const char* key, std::optional<int> fallback) -> std::optional<int> {
    if (!t.contains(key) || t[key].is_null()) return fallback;
    return t[key].get<int>();
  };
  const int global_head_dim = *int_or("global_head_dim", 512);
  const std::optional<int> global_kv = int_or("num_global_key_value_heads", std::nullopt);
  const bool k_eq_v = t.value("attention_k_eq_v", false);
  std::map<int, std::map<std::string, int>> overrides;
  for (int i = 0; i < L; ++i) {
    if (text.layer_types[static_cast<size_t>(i)] != AttentionType::kFull) continue;
    overrides[i]["head_dim"] = global_head_dim;
    if (k_eq_v && global_kv) overrides[i]["num_key_value_heads"] = *global_kv;
  }
  // HF keeps an attribute per layer only where it actually varies; otherwise it is global.
  const std::map<std::string, int> globals = {
      {"head_dim", *int_or("head_dim", 256)},
      {"num_key_value_heads", *int_or("num_key_value_heads", 4)}};
  for (const auto& [attr, global] : globals) {
    std::set<int> values;
    for (int i = 0; i < L; ++i) {
      auto o = overrides.find(i);
      values.insert(o != overrides.end() && o->second.count(attr) ? o->second.at(attr) : global);
    }
    if (values.size() == 1) {
      bool any = false;
      for (auto& [i, o] : overrides) any = o.erase(attr) > 0 || any;
      if (any) t[attr] = *values.begin();
    }
  }
  json plc = json::object();
  int max_key = 0;
  for (const auto& [i, o] : overrides) {
    if (!o.empty()) max_key = std::max(max_key, i);
  }
  const size_t width = std::to_string(max_key).size();
  for (const auto& [i, o] : overrides) {
    if (o.empty()) continue;
    std::string key = std::to_string(i);
    key.insert(0, width - key.size(), '0');
    plc[key] = o;
  }
  t.erase("global_head_dim");
  t.erase("num_global_key_value_heads");
  t["per_layer_config"] = plc;
  return out;
}

json to_causal_lm_config(const json& config) {
  if (!config.contains("text_config") || !config["text_config"].is_object()) return config;
  json out = config["text_config"];
  const bool unified = config.value("model_type", std::string()) == "gemma4_unified";
  out["architectures"] = {unified ? "Gemma4UnifiedForCausalLM" : "Gemma4ForCausalLM"};
  if (config.contains("transformers_version")) {
    out["transformers_version"] = config["transformers_version"];
  }
  return out;
}

void convert_checkpoint(const fs::path& src, const fs::path& dst, const CheckpointForm& form,
                        ThreadPool* pool) {
  if (form.dtype && !is_float(*form.dtype)) {
    throw InputError(std::string("checkpoint conversion: target dtype must be F32, F16 or BF16, "
                                 "not ") +
                     dtype_name(*form.dtype));
  }
  if (form.num_shards < 0) throw InputError("checkpoint conversion: negative shard count");
  std::error_code ec;
  if (fs::exists(dst) && fs::equivalent(src, dst, ec)) {
    throw InputError(dst.string() + ": conversion target is the source folder");
  }
  const std::shared_ptr<const Checkpoint> ckpt = open_model_checkpoint(src);
  if (!ckpt->quant_method().empty()) {
    throw InputError(src.string() + ": checkpoint is quantized with " +
                     std::string(ckpt->quant_method()) + "; conversion takes float checkpoints");
  }
  json config = ckpt->config();
  parse_model_config(config, ckpt->config_source());  // validates before writing

  fs::create_directories(dst, ec);
  if (!fs::is_directory(dst)) throw InputError(dst.string() + ": cannot create directory");
  for (const auto& e : fs::directory_iterator(dst)) {
    const std::string n = e.path().filename().string();
    if (e.path().extension() == ".safetensors" || n == "model.safetensors.index.json") {
      throw InputError(dst.string() + ": already holds a checkpoint (" + n + ")");
    }
  }

  std::vector<TensorSpec> specs;
  std::vector<const TensorView*> sources;
  for (const auto& [name, view] : ckpt->tensors()) {
    const std::string renamed = target_name(name, form.causal_lm);
    if (renamed.empty()) continue;
    DType dtype = view->dtype;
    if (form.dtype && is_float(dtype)) dtype = *form.dtype;
    specs.push_back(TensorSpec{renamed, dtype, view->shape});
    sources.push_back(view);
  }
  std::map<std::string, std::string> metadata = {{"format", "pt"}};
  const SafetensorsPlan plan = form.num_shards > 0
                                   ? plan_num_shards(specs, form.num_shards, metadata)
                                   : plan_single_file(specs, metadata);
  StreamWriteOptions options;
  options.pool = pool;
  write_safetensors(
      dst, specs, plan,
      [&](size_t t, int64_t first, int64_t count, std::byte* out) {
        const TensorView& v = *sources[t];
        const DType to = specs[t].dtype;
        const size_t in_size = dtype_size(v.dtype), out_size = dtype_size(to);
        const std::byte* in = v.data + first * static_cast<int64_t>(in_size);
        if (to == v.dtype) {
          std::memcpy(out, in, static_cast<size_t>(count) * in_size);
          return;
        }
        for (int64_t i = 0; i < count; ++i) {
          store_float(to, load_float(v.dtype, in + i * in_size), out + i * out_size);
        }
      },
      options);

  if (form.causal_lm) config = to_causal_lm_config(config);
  if (form.per_layer_config) config = to_per_layer_config_form(config);
  if (form.dtype) {
    const char* torch_name = *form.dtype == DType::kF32   ? "float32"
                             : *form.dtype == DType::kF16 ? "float16"
                                                          : "bfloat16";
    if (config.contains("dtype")) config["dtype"] = torch_name;
    if (config.contains("text_config") && config["text_config"].is_object() &&
        config["text_config"].contains("dtype")) {
      config["text_config"]["dtype"] = torch_name;
    }
  }
  for (const auto& e : fs::directory_iterator(src)) {
    const std::string n = e.path().filename().string();
    if (!e.is_regular_file() || e.path().extension() == ".safetensors" ||
        n == "model.safetensors.index.json" || n == "config.json") {
      continue;
    }
    fs::copy_file(e.path(), dst / n, fs::copy_options::overwrite_existing);
  }
  write_json(dst / "config.json", config);
}

}  // namespace gemmaserve
