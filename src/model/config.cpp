#include "model/config.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "core/error.h"
#include "core/logging.h"
#include "io/json_file.h"

namespace gemmaserve {
namespace {

using nlohmann::json;

const std::set<std::string> kSupportedArchitectures = {"Gemma4ForConditionalGeneration",
                                                       "Gemma4ForCausalLM",
                                                       "Gemma4Model",
                                                       "Gemma4TextModel",
                                                       "Gemma4UnifiedForConditionalGeneration",
                                                       "Gemma4UnifiedForCausalLM",
                                                       "Gemma4UnifiedModel",
                                                       "Gemma4UnifiedTextModel"};

bool is_unified_architecture(const std::string& architecture) {
  return architecture.rfind("Gemma4Unified", 0) == 0;
}

// Typed field access with errors naming the file and the field; absent or null → fallback.
class FieldReader {
 public:
  FieldReader(const json& obj, std::string source, std::string path)
      : obj_(obj), source_(std::move(source)), path_(std::move(path)) {}

  bool has(const char* key) const { return obj_.contains(key) && !obj_[key].is_null(); }

  int get_int(const char* key, int fallback) const {
    if (!has(key)) return fallback;
    const json& v = obj_[key];
    if (!v.is_number_integer()) fail(key, "must be an integer");
    auto x = v.get<int64_t>();
    if (x < 0 || x > (int64_t{1} << 31) - 1) fail(key, "is out of range");
    return static_cast<int>(x);
  }
  int require_positive_int(const char* key, int fallback) const {
    int v = get_int(key, fallback);
    if (v <= 0) fail(key, "must be a positive integer");
    return v;
  }
  double get_double(const char* key, double fallback) const {
    if (!has(key)) return fallback;
    const json& v = obj_[key];
    if (!v.is_number()) fail(key, "must be a number");
    return v.get<double>();
  }
  std::optional<double> get_optional_double(const char* key) const {
    if (!has(key)) return std::nullopt;
    return get_double(key, 0.0);
  }
  bool get_bool(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!obj_[key].is_boolean()) fail(key, "must be true or false");
    return obj_[key].get<bool>();
  }
  std::string get_string(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    if (!obj_[key].is_string()) fail(key, "must be a string");
    return obj_[key].get<std::string>();
  }
  // An id or list of ids (eos_token_id's two forms).
  std::vector<int> get_id_list(const char* key) const {
    std::vector<int> ids;
    if (!has(key)) return ids;
    const json& v = obj_[key];
    if (v.is_number_integer()) {
      ids.push_back(v.get<int>());
    } else if (v.is_array()) {
      for (const auto& e : v) {
        if (!e.is_number_integer()) fail(key, "must be an integer or a list of integers");
        ids.push_back(e.get<int>());
      }
    } else {
      fail(key, "must be an integer or a list of integers");
    }
    return ids;
  }
  std::optional<int> get_optional_int(const char* key) const {
    if (!has(key)) return std::nullopt;
    return get_int(key, 0);
  }
  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw InputError(source_ + ": field '" + path_ + key + "' " + what);
  }
  const std::string& source() const { return source_; }

 private:
  const json& obj_;
  std::string source_;
  std::string path_;
};

RopeSpec parse_rope(const json& j, const std::string& source, const std::string& path,
                    RopeSpec fallback) {
  if (j.is_null()) return fallback;
  if (!j.is_object()) throw InputError(source + ": field '" + path + "' must be an object");
  FieldReader r(j, source, path + ".");
  RopeSpec s;
  s.rope_type = r.get_string("rope_type", fallback.rope_type);
  if (s.rope_type != "default" && s.rope_type != "proportional") {
    r.fail("rope_type", "'" + s.rope_type + "' is not supported (default, proportional)");
  }
  s.theta = r.get_double("rope_theta", fallback.theta);
  s.partial_rotary_factor =
      r.get_double("partial_rotary_factor", s.rope_type == "proportional" ? 1.0 : 1.0);
  if (s.partial_rotary_factor <= 0 || s.partial_rotary_factor > 1) {
    r.fail("partial_rotary_factor", "must be in (0, 1]");
  }
  s.factor = r.get_double("factor", 1.0);
  if (s.factor <= 0) r.fail("factor", "must be positive");
  if (s.theta <= 0) r.fail("rope_theta", "must be positive");
  return s;
}

void parse_text_config(const json& t, const std::string& source, const std::string& path,
                       ModelFamily family, TextConfig* c) {
  FieldReader r(t, source, path);
  const bool unified = family == ModelFamily::kGemma4Unified;
  // Defaults are Hugging Face's Gemma4TextConfig defaults (Gemma4UnifiedTextConfig's for the
  // unified family), so sparse configs load as HF does.
  c->vocab_size = r.require_positive_int("vocab_size", 262144);
  c->hidden_size = r.require_positive_int("hidden_size", 2304);
  c->intermediate_size = r.require_positive_int("intermediate_size", 9216);
  c->num_hidden_layers = r.require_positive_int("num_hidden_layers", 30);
  c->num_attention_heads = r.require_positive_int("num_attention_heads", 8);
  c->num_key_value_heads = r.require_positive_int("num_key_value_heads", 4);
  c->head_dim = r.require_positive_int("head_dim", 256);
  c->global_head_dim = r.require_positive_int("global_head_dim", 512);
  c->num_global_key_value_heads = r.get_optional_int("num_global_key_value_heads");
  c->attention_k_eq_v = r.get_bool("attention_k_eq_v", false);
  c->sliding_window = r.require_positive_int("sliding_window", unified ? 1024 : 512);
  c->rms_norm_eps = r.get_double("rms_norm_eps", 1e-6);
  c->final_logit_softcapping = r.get_optional_double("final_logit_softcapping");
  // null disables per-layer inputs (HF: None); only an absent field takes HF's default 256.
  c->hidden_size_per_layer_input =
      t.contains("hidden_size_per_layer_input") && t["hidden_size_per_layer_input"].is_null()
          ? 0
          : r.get_int("hidden_size_per_layer_input", 256);
  c->vocab_size_per_layer_input = r.get_int("vocab_size_per_layer_input", 262144);
  c->num_kv_shared_layers = r.get_int("num_kv_shared_layers", 0);
  c->use_double_wide_mlp = r.get_bool("use_double_wide_mlp", false);
  c->enable_moe_block = r.get_bool("enable_moe_block", false);
  c->num_experts = r.get_int("num_experts", 0);
  c->top_k_experts = r.get_int("top_k_experts", 0);
  c->moe_intermediate_size = r.get_int("moe_intermediate_size", 0);
  c->hidden_activation = r.get_string("hidden_activation", "gelu_pytorch_tanh");
  // Unified: absent means HF's default "vision"; an explicit null turns it off.
  c->use_bidirectional_attention = unified && !t.contains("use_bidirectional_attention")
                                       ? "vision"
                                       : r.get_string("use_bidirectional_attention", "");
  c->max_position_embeddings = r.get_int("max_position_embeddings", unified ? 262144 : 131072);
  c->tie_word_embeddings = r.get_bool("tie_word_embeddings", true);
  c->pad_token_id = r.get_int("pad_token_id", 0);
  c->bos_token_id = r.get_int("bos_token_id", 2);

  if (r.get_bool("attention_bias", false)) r.fail("attention_bias", "true is not supported");
  if (c->hidden_activation != "gelu_pytorch_tanh" && c->hidden_activation != "gelu_tanh") {
    r.fail("hidden_activation", "'" + c->hidden_activation + "' is not supported");
  }
  if (c->use_bidirectional_attention == "all") {
    r.fail("use_bidirectional_attention", "'all' (encoder mode) is not supported");
  }
  if (!c->use_bidirectional_attention.empty() && c->use_bidirectional_attention != "vision") {
    r.fail("use_bidirectional_attention",
           "'" + c->use_bidirectional_attention + "' is not one of null, 'vision'");
  }
  if (c->num_kv_shared_layers >= c->num_hidden_layers) {
    r.fail("num_kv_shared_layers", "must be smaller than num_hidden_layers");
  }
  if (unified) {
    // Gemma4UnifiedTextConfig has no per-layer inputs or MoE: its model never reads these fields.
    if (c->hidden_size_per_layer_input > 0 && t.contains("hidden_size_per_layer_input")) {
      GS_LOG_WARNING << source << ": " << path
                     << "hidden_size_per_layer_input is not used by the unified Gemma 4 (no "
                        "per-layer embeddings), as in Hugging Face";
    }
    if (c->enable_moe_block) {
      GS_LOG_WARNING << source << ": " << path
                     << "enable_moe_block is not used by the unified Gemma 4 (no MoE), as in "
                        "Hugging Face";
    }
    c->hidden_size_per_layer_input = 0;
    c->vocab_size_per_layer_input = 0;
    c->enable_moe_block = false;
    c->num_experts = c->top_k_experts = c->moe_intermediate_size = 0;
  }
  if (c->enable_moe_block) {
    if (c->num_experts <= 0) r.fail("num_experts", "must be positive when enable_moe_block");
    if (c->top_k_experts <= 0 || c->top_k_experts > c->num_experts) {
      r.fail("top_k_experts", "must be in [1, num_experts]");
    }
    if (c->moe_intermediate_size <= 0) r.fail("moe_intermediate_size", "must be positive");
  }
  if (c->hidden_size_per_layer_input > 0 && c->vocab_size_per_layer_input <= 0) {
    r.fail("vocab_size_per_layer_input", "must be positive when per-layer inputs are used");
  }

  // Layer types: explicit list, or HF's default 5:1 pattern; HF forces the last layer to full.
  c->layer_types.clear();
  if (r.has("layer_types")) {
    const json& lt = t["layer_types"];
    if (!lt.is_array() || static_cast<int>(lt.size()) != c->num_hidden_layers) {
      r.fail("layer_types", "must be a list of num_hidden_layers (" +
                                std::to_string(c->num_hidden_layers) + ") layer types");
    }
    for (const auto& e : lt) {
      std::string s = e.is_string() ? e.get<std::string>() : "";
      if (s == "sliding_attention") {
        c->layer_types.push_back(AttentionType::kSliding);
      } else if (s == "full_attention") {
        c->layer_types.push_back(AttentionType::kFull);
      } else {
        r.fail("layer_types",
               "holds '" + e.dump() + "' (expected sliding_attention or full_attention)");
      }
    }
  } else {
    for (int i = 0; i < c->num_hidden_layers; ++i) {
      c->layer_types.push_back((i + 1) % 6 ? AttentionType::kSliding : AttentionType::kFull);
    }
  }
  if (c->layer_types.back() != AttentionType::kFull) {
    GS_LOG_WARNING << source << ": last layer must use full_attention; forcing it (as HF does)";
    c->layer_types.back() = AttentionType::kFull;
  }

  // RoPE per layer type.
  c->rope[0] = RopeSpec{"default", 10000.0, 1.0, 1.0};
  c->rope[1] = RopeSpec{"proportional", 1000000.0, 0.25, 1.0};
  if (r.has("rope_parameters")) {
    const json& rp = t["rope_parameters"];
    if (!rp.is_object()) r.fail("rope_parameters", "must be an object");
    if (rp.contains("rope_type") || rp.contains("rope_theta")) {
      r.fail("rope_parameters", "must be keyed by layer type (sliding_attention, full_attention)");
    }
    if (rp.contains("sliding_attention")) {
      c->rope[0] = parse_rope(rp["sliding_attention"], source,
                              path + "rope_parameters.sliding_attention", c->rope[0]);
    }
    if (rp.contains("full_attention")) {
      c->rope[1] = parse_rope(rp["full_attention"], source, path + "rope_parameters.full_attention",
                              c->rope[1]);
    }
  }

  // Per-layer geometry: explicit per_layer_config wins; else HF's global_head_dim /
  // num_global_key_value_heads (the latter only when attention_k_eq_v) on full layers.
  const int L = c->num_hidden_layers;
  c->layers.assign(L, LayerSpec{});
  const bool has_plc = r.has("per_layer_config");
  const json* plc = has_plc ? &t["per_layer_config"] : nullptr;
  if (plc && !plc->is_object()) {
    r.fail("per_layer_config", "must be an object keyed by layer index");
  }
  // HF writes the keys zero-padded to a common width ("04", "09", "14"), so look layers up by
  // the parsed index, not by the key's spelling.
  std::map<int, const json*> layer_overrides;
  if (plc) {
    for (auto it = plc->begin(); it != plc->end(); ++it) {
      const std::string& key = it.key();
      int idx = -1;
      if (!key.empty() && key.size() <= 9 &&
          std::all_of(key.begin(), key.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
        idx = std::stoi(key);
      }
      if (idx < 0 || idx >= L) {
        r.fail("per_layer_config",
               "has key '" + key + "' that is not a layer index < " + std::to_string(L));
      }
      if (!it->is_object()) r.fail("per_layer_config." + key, "must be an object");
      // Any other per-layer override (intermediate_size, sliding_window, skip, ...) would change
      // the math; refuse rather than silently ignore it.
      for (auto f = it->begin(); f != it->end(); ++f) {
        if (f.key() != "head_dim" && f.key() != "num_key_value_heads" &&
            f.key() != "num_attention_heads") {
          r.fail("per_layer_config." + key + "." + f.key(),
                 "is not supported (per-layer head_dim and num_key_value_heads only)");
        }
      }
      if (!layer_overrides.emplace(idx, &*it).second) {
        r.fail("per_layer_config", "has two keys for layer " + std::to_string(idx));
      }
    }
  }
  const int first_shared = L - c->num_kv_shared_layers;
  for (int i = 0; i < L; ++i) {
    LayerSpec& s = c->layers[i];
    s.layer_index = i;
    s.type = c->layer_types[i];
    const bool full = s.type == AttentionType::kFull;
    s.head_dim = c->head_dim;
    s.num_kv_heads = c->num_key_value_heads;
    if (plc) {
      if (auto o = layer_overrides.find(i); o != layer_overrides.end()) {
        FieldReader lr(*o->second, source, path + "per_layer_config." + std::to_string(i) + ".");
        s.head_dim = lr.require_positive_int("head_dim", s.head_dim);
        s.num_kv_heads = lr.require_positive_int("num_key_value_heads", s.num_kv_heads);
        int heads = lr.require_positive_int("num_attention_heads", c->num_attention_heads);
        if (heads != c->num_attention_heads) {
          lr.fail("num_attention_heads",
                  "differs from the model's; per-layer head counts are "
                  "not supported");
        }
      }
    } else if (full) {
      s.head_dim = c->global_head_dim;
      if (c->attention_k_eq_v && c->num_global_key_value_heads) {
        s.num_kv_heads = *c->num_global_key_value_heads;
      }
    }
    if (s.num_kv_heads <= 0 || c->num_attention_heads % s.num_kv_heads != 0) {
      throw InputError(source + ": layer " + std::to_string(i) + " has " +
                       std::to_string(s.num_kv_heads) + " KV heads, which must divide " +
                       std::to_string(c->num_attention_heads) + " attention heads");
    }
    s.k_eq_v = c->attention_k_eq_v && full;
    s.kv_source_layer = i;
    if (i >= first_shared) {
      int src = -1;
      for (int j = first_shared - 1; j >= 0; --j) {
        if (c->layer_types[j] == s.type) {
          src = j;
          break;
        }
      }
      if (src < 0) {
        throw InputError(source + ": KV-shared layer " + std::to_string(i) +
                         " has no earlier non-shared layer of its type to share with");
      }
      s.kv_source_layer = src;
    }
    s.intermediate_size = c->intermediate_size;
    if (c->use_double_wide_mlp && i >= first_shared) s.intermediate_size *= 2;
  }
  for (int i = first_shared; i < L; ++i) {
    const LayerSpec& s = c->layers[i];
    const LayerSpec& src = c->layers[s.kv_source_layer];
    if (s.head_dim != src.head_dim || s.num_kv_heads != src.num_kv_heads) {
      throw InputError(source + ": KV-shared layer " + std::to_string(i) +
                       " has a different head geometry from its source layer " +
                       std::to_string(s.kv_source_layer));
    }
  }
}

VisionConfig parse_vision_config(const json& v, const std::string& source) {
  const std::string path = "vision_config.";
  if (!v.is_object()) throw InputError(source + ": field 'vision_config' must be an object");
  const std::string type = v.value("model_type", std::string("gemma4_vision"));
  if (type != "gemma4_vision") {
    throw InputError(source + ": field 'vision_config.model_type' is '" + type +
                     "', expected 'gemma4_vision'");
  }
  FieldReader r(v, source, path);
  VisionConfig c;
  c.hidden_size = r.require_positive_int("hidden_size", c.hidden_size);
  c.intermediate_size = r.require_positive_int("intermediate_size", c.intermediate_size);
  c.num_hidden_layers = r.require_positive_int("num_hidden_layers", c.num_hidden_layers);
  c.num_attention_heads = r.require_positive_int("num_attention_heads", c.num_attention_heads);
  c.num_key_value_heads = r.require_positive_int("num_key_value_heads", c.num_key_value_heads);
  c.head_dim = r.require_positive_int("head_dim", c.head_dim);
  c.hidden_activation = r.get_string("hidden_activation", c.hidden_activation);
  c.rms_norm_eps = r.get_double("rms_norm_eps", c.rms_norm_eps);
  c.max_position_embeddings = r.get_int("max_position_embeddings", c.max_position_embeddings);
  c.pooling_kernel_size = r.require_positive_int("pooling_kernel_size", c.pooling_kernel_size);
  c.patch_size = r.require_positive_int("patch_size", c.patch_size);
  c.position_embedding_size =
      r.require_positive_int("position_embedding_size", c.position_embedding_size);
  c.use_clipped_linears = r.get_bool("use_clipped_linears", c.use_clipped_linears);
  c.standardize = r.get_bool("standardize", c.standardize);
  c.default_output_length = r.get_optional_int("default_output_length");
  if (r.get_bool("attention_bias", false)) r.fail("attention_bias", "true is not supported");
  if (c.hidden_activation != "gelu_pytorch_tanh" && c.hidden_activation != "gelu_tanh") {
    r.fail("hidden_activation", "'" + c.hidden_activation + "' is not supported");
  }
  if (r.has("rope_parameters")) {
    const RopeSpec rope = parse_rope(v["rope_parameters"], source, path + "rope_parameters",
                                     RopeSpec{"default", 100.0});
    if (rope.rope_type != "default" || rope.factor != 1.0) {
      r.fail("rope_parameters", "must be rope_type 'default' without a factor (2-D vision RoPE)");
    }
    c.rope_theta = rope.theta;
  }
  // 2-D RoPE rotates two halves of each head (x, then y) in rotate-half pairs.
  if (c.head_dim % 4 != 0) r.fail("head_dim", "must be a multiple of 4 (2-D RoPE)");
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    r.fail("num_key_value_heads", "must divide num_attention_heads");
  }
  return c;
}

UnifiedVisionConfig parse_unified_vision_config(const json& v, const std::string& source) {
  const std::string path = "vision_config.";
  if (!v.is_object()) throw InputError(source + ": field 'vision_config' must be an object");
  const std::string type = v.value("model_type", std::string("gemma4_unified_vision"));
  if (type != "gemma4_unified_vision") {
    throw InputError(source + ": field 'vision_config.model_type' is '" + type +
                     "', expected 'gemma4_unified_vision'");
  }
  FieldReader r(v, source, path);
  UnifiedVisionConfig c;
  c.patch_size = r.require_positive_int("patch_size", c.patch_size);
  c.pooling_kernel_size = r.require_positive_int("pooling_kernel_size", c.pooling_kernel_size);
  c.mm_embed_dim = r.require_positive_int("mm_embed_dim", c.mm_embed_dim);
  c.mm_posemb_size = r.require_positive_int("mm_posemb_size", c.mm_posemb_size);
  c.rms_norm_eps = r.get_double("rms_norm_eps", c.rms_norm_eps);
  c.output_proj_dims = r.require_positive_int("output_proj_dims", c.output_proj_dims);
  // A saved property of HF's config: its setter refuses any other value, and so do we.
  if (r.has("model_patch_size") &&
      r.get_int("model_patch_size", 0) != c.patch_size * c.pooling_kernel_size) {
    r.fail("model_patch_size", "must equal patch_size x pooling_kernel_size (" +
                                   std::to_string(c.patch_size * c.pooling_kernel_size) + ")");
  }
  if (c.output_proj_dims != c.mm_embed_dim) {
    r.fail("output_proj_dims", "must equal mm_embed_dim (" + std::to_string(c.mm_embed_dim) +
                                   "): the embedder's projection reads the position-normed "
                                   "patch embedding");
  }
  if (c.rms_norm_eps <= 0) r.fail("rms_norm_eps", "must be positive");
  return c;
}

UnifiedAudioConfig parse_unified_audio_config(const json& a, const std::string& source) {
  const std::string path = "audio_config.";
  if (!a.is_object()) throw InputError(source + ": field 'audio_config' must be an object");
  const std::string type = a.value("model_type", std::string("gemma4_unified_audio"));
  if (type != "gemma4_unified_audio") {
    throw InputError(source + ": field 'audio_config.model_type' is '" + type +
                     "', expected 'gemma4_unified_audio'");
  }
  FieldReader r(a, source, path);
  UnifiedAudioConfig c;
  // HF's hidden_size, output_proj_dims and audio_samples_per_token are aliases of
  // audio_embed_dim (one value, saved under each name): they must agree.
  c.audio_embed_dim = r.require_positive_int("audio_embed_dim", c.audio_embed_dim);
  for (const char* alias : {"hidden_size", "output_proj_dims", "audio_samples_per_token"}) {
    if (r.has(alias) && r.get_int(alias, 0) != c.audio_embed_dim) {
      r.fail(alias, "must equal audio_embed_dim (" + std::to_string(c.audio_embed_dim) +
                        "): both are the samples of one audio soft token");
    }
  }
  c.rms_norm_eps = r.get_double("rms_norm_eps", c.rms_norm_eps);
  if (c.rms_norm_eps <= 0) r.fail("rms_norm_eps", "must be positive");
  return c;
}

AudioConfig parse_audio_config(const json& a, const std::string& source) {
  const std::string path = "audio_config.";
  if (!a.is_object()) throw InputError(source + ": field 'audio_config' must be an object");
  const std::string type = a.value("model_type", std::string("gemma4_audio"));
  if (type != "gemma4_audio") {
    throw InputError(source + ": field 'audio_config.model_type' is '" + type +
                     "', expected 'gemma4_audio'");
  }
  FieldReader r(a, source, path);
  AudioConfig c;
  c.hidden_size = r.require_positive_int("hidden_size", c.hidden_size);
  c.num_hidden_layers = r.require_positive_int("num_hidden_layers", c.num_hidden_layers);
  c.num_attention_heads = r.require_positive_int("num_attention_heads", c.num_attention_heads);
  c.hidden_act = r.get_string("hidden_act", c.hidden_act);
  if (r.has("subsampling_conv_channels")) {
    const json& ch = a["subsampling_conv_channels"];
    if (!ch.is_array() || ch.size() != 2) {
      r.fail("subsampling_conv_channels", "must be a list of two channel counts");
    }
    for (size_t i = 0; i < 2; ++i) {
      if (!ch[i].is_number_integer() || ch[i].get<int64_t>() <= 0 ||
          ch[i].get<int64_t>() > (int64_t{1} << 20)) {
        r.fail("subsampling_conv_channels", "must hold positive integers");
      }
      c.subsampling_conv_channels[i] = ch[i].get<int>();
    }
  }
  c.conv_kernel_size = r.require_positive_int("conv_kernel_size", c.conv_kernel_size);
  c.residual_weight = r.get_double("residual_weight", c.residual_weight);
  c.attention_chunk_size = r.require_positive_int("attention_chunk_size", c.attention_chunk_size);
  c.attention_context_left =
      r.require_positive_int("attention_context_left", c.attention_context_left);
  c.attention_context_right = r.get_int("attention_context_right", c.attention_context_right);
  c.attention_logit_cap = r.get_double("attention_logit_cap", c.attention_logit_cap);
  c.attention_invalid_logits_value =
      r.get_double("attention_invalid_logits_value", c.attention_invalid_logits_value);
  c.use_clipped_linears = r.get_bool("use_clipped_linears", c.use_clipped_linears);
  c.rms_norm_eps = r.get_double("rms_norm_eps", c.rms_norm_eps);
  c.gradient_clipping = r.get_double("gradient_clipping", c.gradient_clipping);
  c.output_proj_dims = r.require_positive_int("output_proj_dims", c.output_proj_dims);
  // silu is what every Gemma 4 audio tower uses (HF's "swish" is the same function).
  if (c.hidden_act != "silu" && c.hidden_act != "swish") {
    r.fail("hidden_act", "'" + c.hidden_act + "' is not supported (silu only)");
  }
  if (c.hidden_size % c.num_attention_heads != 0) {
    r.fail("num_attention_heads", "must divide hidden_size");
  }
  // Future context changes the relative-position table's meaning; no Gemma 4 checkpoint has it.
  if (c.attention_context_right != 0) r.fail("attention_context_right", "only 0 is supported");
  if (!(c.attention_logit_cap > 0)) r.fail("attention_logit_cap", "must be positive");
  if (!(c.gradient_clipping > 0)) r.fail("gradient_clipping", "must be positive");
  if (!(c.rms_norm_eps > 0)) r.fail("rms_norm_eps", "must be positive");
  if (!std::isfinite(c.attention_invalid_logits_value)) {
    r.fail("attention_invalid_logits_value", "must be finite");
  }
  return c;
}

}  // namespace

ModelConfig parse_model_config(const json& config, const std::string& source) {
  if (!config.is_object()) throw InputError(source + ": config must be a JSON object");
  ModelConfig mc;
  mc.raw = config;
  FieldReader top(config, source, "");
  mc.model_type = top.get_string("model_type", "");
  if (top.has("architectures")) {
    const json& a = config["architectures"];
    if (!a.is_array() || a.empty() || !a[0].is_string()) {
      top.fail("architectures", "must be a non-empty list of strings");
    }
    mc.architecture = a[0].get<std::string>();
  } else if (mc.model_type == "gemma4") {
    mc.architecture = "Gemma4ForConditionalGeneration";
  } else if (mc.model_type == "gemma4_text") {
    mc.architecture = "Gemma4ForCausalLM";
  } else if (mc.model_type == "gemma4_unified") {
    mc.architecture = "Gemma4UnifiedForConditionalGeneration";
  } else if (mc.model_type == "gemma4_unified_text") {
    mc.architecture = "Gemma4UnifiedForCausalLM";
  } else {
    throw InputError(source + ": no 'architectures' and model_type '" + mc.model_type +
                     "' is not a Gemma 4 type");
  }
  if (!kSupportedArchitectures.count(mc.architecture)) {
    throw InputError(source + ": unsupported architecture '" + mc.architecture +
                     "' (supported: Gemma4ForConditionalGeneration, Gemma4ForCausalLM, "
                     "Gemma4UnifiedForConditionalGeneration, Gemma4UnifiedForCausalLM)");
  }
  const bool unified = is_unified_architecture(mc.architecture);
  mc.family = unified ? ModelFamily::kGemma4Unified : ModelFamily::kGemma4;
  const bool nested = config.contains("text_config") && !config["text_config"].is_null();
  if (nested) {
    const json& t = config["text_config"];
    if (!t.is_object()) top.fail("text_config", "must be an object");
    const std::string want = unified ? "gemma4_unified_text" : "gemma4_text";
    std::string tt = t.value("model_type", want);
    if (tt != want) {
      throw InputError(source + ": field 'text_config.model_type' is '" + tt + "', expected '" +
                       want + "'");
    }
    parse_text_config(t, source, "text_config.", mc.family, &mc.text);
    mc.tensor_prefix = "model.language_model.";
  } else {
    if (mc.architecture == "Gemma4ForConditionalGeneration" ||
        mc.architecture == "Gemma4UnifiedForConditionalGeneration") {
      top.fail("text_config", "is required for " + mc.architecture);
    }
    parse_text_config(config, source, "", mc.family, &mc.text);
    mc.tensor_prefix = "model.";
  }
  // Top-level tie flag wins for the multimodal wrapper (HF reads it there).
  if (nested && top.has("tie_word_embeddings")) {
    mc.text.tie_word_embeddings = top.get_bool("tie_word_embeddings", true);
  }
  mc.has_vision = config.contains("vision_config") && !config["vision_config"].is_null();
  mc.has_audio = config.contains("audio_config") && !config["audio_config"].is_null();
  if (unified) {
    if (mc.has_vision) {
      mc.unified_vision = parse_unified_vision_config(config["vision_config"], source);
    }
    if (mc.has_audio) mc.unified_audio = parse_unified_audio_config(config["audio_config"], source);
  } else {
    if (mc.has_vision) mc.vision = parse_vision_config(config["vision_config"], source);
    if (mc.has_audio) mc.audio = parse_audio_config(config["audio_config"], source);
  }
  mc.eos_token_ids = top.get_id_list("eos_token_id");
  if (mc.eos_token_ids.empty() && nested) {
    mc.eos_token_ids =
        FieldReader(config["text_config"], source, "text_config.").get_id_list("eos_token_id");
  }
  // Gemma4Config's defaults apply to the multimodal wrapper only.
  const auto id = [&](const char* key, int hf_default) -> std::optional<int> {
    if (top.has(key)) return top.get_int(key, 0);
    if (nested) return hf_default;
    return std::nullopt;
  };
  mc.image_token_id = id("image_token_id", 258880);
  mc.boi_token_id = id("boi_token_id", 255999);
  mc.eoi_token_id = id("eoi_token_id", 258882);
  mc.audio_token_id = id("audio_token_id", 258881);
  mc.video_token_id = id("video_token_id", 258884);
  mc.boa_token_id = id("boa_token_id", 256000);
  // HF names it eoa_token_index; some converters write eoa_token_id.
  mc.eoa_token_id =
      top.has("eoa_token_index") ? id("eoa_token_index", 258883) : id("eoa_token_id", 258883);
  mc.vision_soft_tokens_per_image = top.get_optional_int("vision_soft_tokens_per_image");
  return mc;
}

ModelConfig load_model_config(const std::filesystem::path& dir) {
  const auto path = dir / "config.json";
  if (!std::filesystem::exists(path)) {
    throw InputError(path.string() + ": missing (not a Hugging Face checkpoint folder?)");
  }
  return parse_model_config(read_json_file(path), path.string());
}

GenerationConfig load_generation_config(const std::filesystem::path& dir) {
  GenerationConfig g;
  const auto path = dir / "generation_config.json";
  if (!std::filesystem::exists(path)) return g;
  g.raw = read_json_file(path);
  if (!g.raw.is_object()) throw InputError(path.string() + ": must be a JSON object");
  FieldReader r(g.raw, path.string(), "");
  g.eos_token_ids = r.get_id_list("eos_token_id");
  g.bos_token_id = r.get_optional_int("bos_token_id");
  g.pad_token_id = r.get_optional_int("pad_token_id");
  g.temperature = r.get_optional_double("temperature");
  g.top_p = r.get_optional_double("top_p");
  g.min_p = r.get_optional_double("min_p");
  g.repetition_penalty = r.get_optional_double("repetition_penalty");
  g.top_k = r.get_optional_int("top_k");
  g.max_new_tokens = r.get_optional_int("max_new_tokens");
  if (r.has("do_sample")) g.do_sample = r.get_bool("do_sample", false);
  return g;
}

}  // namespace gemmaserve
