#include "model/gemma4_assistant_config.h"

#include <cstdint>

#include "core/error.h"
#include "io/json_file.h"

namespace gemmaserve {
namespace {

using nlohmann::json;

constexpr const char* kArchitecture = "Gemma4AssistantForCausalLM";
constexpr const char* kModelType = "gemma4_assistant";

[[noreturn]] void fail(const std::string& source, const std::string& field,
                       const std::string& what) {
  throw InputError(source + ": field '" + field + "' " + what);
}

bool present(const json& obj, const char* key) { return obj.contains(key) && !obj[key].is_null(); }

int64_t int_field(const json& obj, const char* key, int64_t fallback, const std::string& source,
                  const std::string& path) {
  if (!present(obj, key)) return fallback;
  if (!obj[key].is_number_integer()) fail(source, path + key, "must be an integer");
  return obj[key].get<int64_t>();
}

int positive_int(const json& obj, const char* key, int fallback, const std::string& source) {
  const int64_t v = int_field(obj, key, fallback, source, "");
  if (v <= 0 || v > INT32_MAX) fail(source, key, "must be a positive integer");
  return static_cast<int>(v);
}

bool bool_field(const json& obj, const char* key, bool fallback, const std::string& source,
                const std::string& path) {
  if (!present(obj, key)) return fallback;
  if (!obj[key].is_boolean()) fail(source, path + key, "must be true or false");
  return obj[key].get<bool>();
}

// HF's Gemma4AssistantConfig.validate_architecture(), with Gemma4TextConfig's defaults for
// absent fields (so a sparse text_config fails as it does in HF).
void check_assistant_text_fields(const json& t, const std::string& source, int num_layers) {
  const std::string path = "text_config.";
  for (const auto& [key, hf_default] : {std::pair{"hidden_size_per_layer_input", int64_t{256}},
                                        std::pair{"vocab_size_per_layer_input", int64_t{262144}}}) {
    const int64_t v = int_field(t, key, hf_default, source, path);
    if (v != 0)
      fail(source, path + key, "must be 0 for an assistant (got " + std::to_string(v) + ")");
  }
  if (bool_field(t, "enable_moe_block", false, source, path)) {
    fail(source, path + "enable_moe_block", "must be false for an assistant");
  }
  if (bool_field(t, "use_double_wide_mlp", false, source, path)) {
    fail(source, path + "use_double_wide_mlp", "must be false for an assistant");
  }
  // HF turns 0 (or absent) into "all layers": an assistant computes no K/V of its own.
  const int64_t shared = int_field(t, "num_kv_shared_layers", 0, source, path);
  if (shared != 0 && shared != num_layers) {
    fail(source, path + "num_kv_shared_layers",
         "must equal num_hidden_layers (" + std::to_string(num_layers) +
             "): every assistant layer reads the target's KV (got " + std::to_string(shared) + ")");
  }
}

}  // namespace

bool is_assistant_config(const json& config) {
  if (!config.is_object()) return false;
  if (config.value("model_type", json()).is_string() &&
      config["model_type"].get<std::string>() == kModelType) {
    return true;
  }
  const json a = config.value("architectures", json());
  return a.is_array() && !a.empty() && a[0].is_string() && a[0].get<std::string>() == kArchitecture;
}

AssistantConfig parse_assistant_config(const json& config, const std::string& source) {
  if (!config.is_object()) throw InputError(source + ": config must be a JSON object");
  AssistantConfig c;
  c.raw = config;
  if (present(config, "model_type")) {
    if (!config["model_type"].is_string()) fail(source, "model_type", "must be a string");
    c.model_type = config["model_type"].get<std::string>();
    if (c.model_type != kModelType) {
      fail(source, "model_type", "is '" + c.model_type + "', expected '" + kModelType + "'");
    }
  }
  if (present(config, "architectures")) {
    const json& a = config["architectures"];
    if (!a.is_array() || a.empty() || !a[0].is_string()) {
      fail(source, "architectures", "must be a non-empty list of strings");
    }
    c.architecture = a[0].get<std::string>();
    if (c.architecture != kArchitecture) {
      fail(source, "architectures",
           "names '" + c.architecture + "', expected '" + kArchitecture + "'");
    }
  }
  c.backbone_hidden_size =
      positive_int(config, "backbone_hidden_size", c.backbone_hidden_size, source);
  c.use_ordered_embeddings =
      bool_field(config, "use_ordered_embeddings", c.use_ordered_embeddings, source, "");
  c.num_centroids = positive_int(config, "num_centroids", c.num_centroids, source);
  c.centroid_intermediate_top_k =
      positive_int(config, "centroid_intermediate_top_k", c.centroid_intermediate_top_k, source);
  c.tie_word_embeddings =
      bool_field(config, "tie_word_embeddings", c.tie_word_embeddings, source, "");

  if (!present(config, "text_config") || !config["text_config"].is_object()) {
    fail(source, "text_config", "is required (the drafter's gemma4_text decoder, an object)");
  }
  const json& t = config["text_config"];
  const int64_t layers = int_field(t, "num_hidden_layers", 30, source, "text_config.");
  check_assistant_text_fields(t, source, static_cast<int>(layers));
  // The decoder geometry is a Gemma 4 text config: parse it with the target's parser, as
  // though no layer were shared, so every layer spec carries its own query geometry.
  json text = t;
  text["num_kv_shared_layers"] = 0;
  json wrapper = {{"architectures", {"Gemma4ForConditionalGeneration"}}, {"text_config", text}};
  wrapper["tie_word_embeddings"] = c.tie_word_embeddings;
  c.text = parse_model_config(wrapper, source).text;

  if (c.use_ordered_embeddings) {
    if (c.text.vocab_size % c.num_centroids != 0) {
      fail(source, "num_centroids",
           "must divide text_config.vocab_size (" + std::to_string(c.text.vocab_size) + ")");
    }
    if (c.centroid_intermediate_top_k > c.num_centroids) {
      fail(source, "centroid_intermediate_top_k", "must not exceed num_centroids");
    }
  }
  if (present(config, "eos_token_id")) {
    const json& e = config["eos_token_id"];
    if (e.is_number_integer()) {
      c.eos_token_ids.push_back(e.get<int>());
    } else if (e.is_array()) {
      for (const json& x : e) {
        if (!x.is_number_integer()) fail(source, "eos_token_id", "must be an integer or a list");
        c.eos_token_ids.push_back(x.get<int>());
      }
    } else {
      fail(source, "eos_token_id", "must be an integer or a list");
    }
  }
  return c;
}

AssistantConfig load_assistant_config(const std::filesystem::path& dir) {
  const auto path = dir / "config.json";
  if (!std::filesystem::exists(path)) {
    throw InputError(path.string() + ": missing (not a Hugging Face checkpoint folder?)");
  }
  return parse_assistant_config(read_json_file(path), path.string());
}

}  // namespace gemmaserve
