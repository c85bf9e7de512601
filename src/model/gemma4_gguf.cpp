#include "model/gemma4_gguf.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <map>
#include <regex>
#include <set>
#include <utility>

#include "checkpoint/gguf_checkpoint.h"
#include "core/error.h"
#include "core/logging.h"

namespace gemmaserve {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// llama.cpp's names inside "blk.N." -> HF's inside "model.language_model.layers.N.".
constexpr std::array<std::pair<std::string_view, std::string_view>, 27> kTextBlockNames = {{
    {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_k.weight", "self_attn.k_proj.weight"},
    {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_output.weight", "self_attn.o_proj.weight"},
    {"attn_q_norm.weight", "self_attn.q_norm.weight"},
    {"attn_k_norm.weight", "self_attn.k_norm.weight"},
    {"attn_norm.weight", "input_layernorm.weight"},
    {"post_attention_norm.weight", "post_attention_layernorm.weight"},
    {"ffn_norm.weight", "pre_feedforward_layernorm.weight"},
    {"post_ffw_norm.weight", "post_feedforward_layernorm.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},
    {"ffn_up.weight", "mlp.up_proj.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
    {"layer_output_scale.weight", "layer_scalar"},
    {"inp_gate.weight", "per_layer_input_gate.weight"},
    {"proj.weight", "per_layer_projection.weight"},
    {"post_norm.weight", "post_per_layer_input_norm.weight"},
    {"ffn_gate_inp.weight", "router.proj.weight"},
    {"ffn_gate_inp.scale", "router.scale"},
    {"ffn_gate_up_exps.weight", "experts.gate_up_proj"},
    {"ffn_down_exps.weight", "experts.down_proj"},
    {"ffn_down_exps.scale", "router.per_expert_scale"},
    {"pre_ffw_norm_2.weight", "pre_feedforward_layernorm_2.weight"},
    {"post_ffw_norm_1.weight", "post_feedforward_layernorm_1.weight"},
    {"post_ffw_norm_2.weight", "post_feedforward_layernorm_2.weight"},
    // Older converters wrote the experts' gate and up apart (fused at load, see below).
    {"ffn_gate_exps.weight", "experts.gate_proj"},
    {"ffn_up_exps.weight", "experts.up_proj"},
}};

constexpr std::array<std::pair<std::string_view, std::string_view>, 6> kTextTopNames = {{
    {"token_embd.weight", "embed_tokens.weight"},
    {"output_norm.weight", "norm.weight"},
    {"per_layer_token_embd.weight", "embed_tokens_per_layer.weight"},
    {"per_layer_model_proj.weight", "per_layer_model_projection.weight"},
    {"per_layer_proj_norm.weight", "per_layer_projection_norm.weight"},
    {"output.weight", "lm_head.weight"},
}};

// Vision block norms; the clipped linears are listed apart (weight + four bounds each).
constexpr std::array<std::pair<std::string_view, std::string_view>, 6> kVisionBlockNorms = {{
    {"ln1.weight", "input_layernorm.weight"},
    {"attn_post_norm.weight", "post_attention_layernorm.weight"},
    {"ln2.weight", "pre_feedforward_layernorm.weight"},
    {"ffn_post_norm.weight", "post_feedforward_layernorm.weight"},
    {"attn_q_norm.weight", "self_attn.q_norm.weight"},
    {"attn_k_norm.weight", "self_attn.k_norm.weight"},
}};
constexpr std::array<std::pair<std::string_view, std::string_view>, 7> kVisionLinears = {{
    {"attn_q", "self_attn.q_proj"},
    {"attn_k", "self_attn.k_proj"},
    {"attn_v", "self_attn.v_proj"},
    {"attn_out", "self_attn.o_proj"},
    {"ffn_gate", "mlp.gate_proj"},
    {"ffn_up", "mlp.up_proj"},
    {"ffn_down", "mlp.down_proj"},
}};
constexpr std::array<std::string_view, 4> kClipBounds = {".input_min", ".input_max", ".output_min",
                                                         ".output_max"};
constexpr std::array<std::pair<std::string_view, std::string_view>, 5> kVisionTopNames = {{
    {"v.patch_embd.weight", "model.vision_tower.patch_embedder.input_proj.weight"},
    {"v.position_embd.weight", "model.vision_tower.patch_embedder.position_embedding_table"},
    {"v.std_bias", "model.vision_tower.std_bias"},
    {"v.std_scale", "model.vision_tower.std_scale"},
    {"mm.input_projection.weight", "model.embed_vision.embedding_projection.weight"},
}};

constexpr std::string_view kTextPrefix = "model.language_model.";
constexpr std::string_view kVisionLayers = "model.vision_tower.encoder.layers.";

// "blk.12.rest" -> (12, "rest") for the given block prefix.
std::optional<std::pair<int, std::string_view>> split_block(std::string_view name,
                                                            std::string_view prefix) {
  if (name.substr(0, prefix.size()) != prefix) return std::nullopt;
  name.remove_prefix(prefix.size());
  size_t digits = 0;
  while (digits < name.size() && digits < 6 && name[digits] >= '0' && name[digits] <= '9') {
    ++digits;
  }
  if (digits == 0 || digits >= name.size() || name[digits] != '.') return std::nullopt;
  return std::pair{std::stoi(std::string(name.substr(0, digits))), name.substr(digits + 1)};
}

template <size_t N>
std::optional<std::string_view> lookup(
    const std::array<std::pair<std::string_view, std::string_view>, N>& table, std::string_view key,
    bool reverse = false) {
  for (const auto& [a, b] : table) {
    if ((reverse ? b : a) == key) return reverse ? a : b;
  }
  return std::nullopt;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// ---- Metadata access ----------------------------------------------------------------------

class Metadata {
 public:
  Metadata(const GgufFile& file, std::string arch) : file_(file), arch_(std::move(arch)) {}

  const GgufValue* find(std::string_view key) const {
    return file_.find(arch_ + "." + std::string(key));
  }
  const GgufValue& get(std::string_view key) const {
    return file_.get(arch_ + "." + std::string(key));
  }
  int64_t integer(std::string_view key) const { return get(key).as_int(); }
  std::optional<int64_t> opt_integer(std::string_view key) const {
    const GgufValue* v = find(key);
    return v ? std::optional<int64_t>(v->as_int()) : std::nullopt;
  }
  std::optional<double> opt_float(std::string_view key) const {
    const GgufValue* v = find(key);
    return v ? std::optional<double>(v->as_float()) : std::nullopt;
  }
  // A per-layer key stored as one number or as an array of `layers` numbers.
  std::vector<int64_t> per_layer(std::string_view key, int64_t layers) const {
    const GgufValue& v = get(key);
    if (v.type() != GgufType::kArray)
      return std::vector<int64_t>(static_cast<size_t>(layers), v.as_int());
    std::vector<int64_t> out = v.as_int_array();
    if (static_cast<int64_t>(out.size()) != layers)
      fail(key, "has " + std::to_string(out.size()) + " entries for " + std::to_string(layers) +
                    " layers");
    return out;
  }
  [[noreturn]] void fail(std::string_view key, const std::string& what) const {
    throw InputError(file_.path().string() + ": metadata '" + arch_ + "." + std::string(key) +
                     "' " + what);
  }
  const GgufFile& file() const { return file_; }

 private:
  const GgufFile& file_;
  std::string arch_;
};

std::string architecture_of(const GgufFile& f) {
  const GgufValue* v = f.find("general.architecture");
  if (!v) throw InputError(f.path().string() + ": missing metadata key 'general.architecture'");
  return std::string(v->as_string());
}

// Later parts of a split model carry only the split keys (as gguf-split and gguf-py write
// them): no architecture, and not an mmproj.
bool is_mmproj(const GgufFile& f) {
  const GgufValue* arch = f.find("general.architecture");
  const GgufValue* type = f.find("general.type");
  return (arch && arch->as_string() == "clip") || (type && type->as_string() == "mmproj");
}

// Gemma 4's end-of-turn markers by their text: real checkpoints stop on <eos>, <turn|> and
// <|tool_response>, while GGUF metadata names only the first.
constexpr std::array<std::string_view, 3> kEndMarkers = {"<turn|>", "<|tool_response>",
                                                         "<end_of_turn>"};

// The token ids of end markers and (with a vision tower) multimodal markers, found by their text
// in the vocabulary. A text-only model keeps HF's default multimodal ids, as a text-only
// checkpoint's config does: its prompts never hold image placeholders.
void add_vocabulary_ids(const GgufFile& f, bool multimodal, json& top, json& text) {
  const std::pair<std::string_view, const char*> markers[] = {
      {"<|image|>", "image_token_id"}, {"<|image>", "boi_token_id"},
      {"<image|>", "eoi_token_id"},    {"<|audio|>", "audio_token_id"},
      {"<|audio>", "boa_token_id"},    {"<audio|>", "eoa_token_index"},
      {"<|video|>", "video_token_id"}};
  // Only these ten pieces are wanted: one pass over the vocabulary, no index of all of it.
  std::map<std::string_view, int64_t> ids;
  for (const auto& [piece, key] : markers) ids.emplace(piece, -1);
  for (std::string_view marker : kEndMarkers) ids.emplace(marker, -1);
  const GgufValue* tokens = f.find("tokenizer.ggml.tokens");
  if (tokens && tokens->type() == GgufType::kArray && tokens->array_type() == GgufType::kString) {
    const std::vector<std::string_view> list = tokens->as_string_array();
    for (size_t i = 0; i < list.size(); ++i) {
      if (list[i].empty() || list[i][0] != '<') continue;
      if (auto it = ids.find(list[i]); it != ids.end() && it->second < 0) {
        it->second = static_cast<int64_t>(i);
      }
    }
  }
  std::erase_if(ids, [](const auto& entry) { return entry.second < 0; });
  for (const auto& [piece, key] : markers) {
    if (auto it = ids.find(piece); multimodal && it != ids.end()) top[key] = it->second;
  }
  auto id_key = [&](const char* key) -> std::optional<int64_t> {
    const GgufValue* v = f.find(key);
    return v ? std::optional<int64_t>(v->as_int()) : std::nullopt;
  };
  if (auto bos = id_key("tokenizer.ggml.bos_token_id")) text["bos_token_id"] = *bos;
  if (auto pad = id_key("tokenizer.ggml.padding_token_id")) text["pad_token_id"] = *pad;
  json eos = json::array();
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                          "tokenizer.ggml.eom_token_id"}) {
    if (auto id = id_key(key); id && std::find(eos.begin(), eos.end(), *id) == eos.end()) {
      eos.push_back(*id);
    }
  }
  for (std::string_view marker : kEndMarkers) {
    if (auto it = ids.find(marker);
        it != ids.end() && std::find(eos.begin(), eos.end(), it->second) == eos.end()) {
      eos.push_back(it->second);
    }
  }
  if (!eos.empty()) text["eos_token_id"] = eos;
}

// ---- The checkpoint -----------------------------------------------------------------------

class Gemma4GgufCheckpoint final : public Checkpoint {
 public:
  Gemma4GgufCheckpoint(const fs::path& model, const std::optional<fs::path>& mmproj);

  std::string_view format() const override { return "gguf"; }
  std::string_view quant_method() const override { return "gguf"; }  // vLLM's name for it
  const fs::path& path() const override { return path_; }
  const json& config() const override { return config_; }
  const std::string& config_source() const override { return config_source_; }
  const std::map<std::string, const CheckpointTensor*>& tensors() const override { return index_; }

 private:
  void add_text_tensors(const GgufCheckpoint& part);
  void add_vision_tensors(const GgufCheckpoint& mmproj);
  void add(CheckpointTensor t, std::string hf_name);
  void fuse_split_experts();
  json text_config(const GgufFile& f) const;
  json vision_config(const GgufFile& f) const;
  const CheckpointTensor* own(const std::string& hf_name) const {
    auto it = index_.find(hf_name);
    return it == index_.end() ? nullptr : it->second;
  }

  fs::path path_;
  std::string config_source_;
  json config_;
  std::vector<std::shared_ptr<const GgufCheckpoint>> files_;
  std::vector<std::unique_ptr<CheckpointTensor>> tensors_;
  std::map<std::string, const CheckpointTensor*> index_;
  std::vector<std::shared_ptr<std::vector<std::byte>>> owned_;
  std::vector<float> rope_freqs_;
};

void Gemma4GgufCheckpoint::add(CheckpointTensor t, std::string hf_name) {
  const std::string gguf_name = t.name, file = t.file.string();
  t.name = hf_name;
  tensors_.push_back(std::make_unique<CheckpointTensor>(std::move(t)));
  if (!index_.emplace(std::move(hf_name), tensors_.back().get()).second) {
    throw InputError(file + ": tensor '" + gguf_name + "' appears twice");
  }
}

void Gemma4GgufCheckpoint::add_text_tensors(const GgufCheckpoint& part) {
  for (const auto& [name, t] : part.tensors()) {
    if (name == "rope_freqs.weight") {
      if (t->dtype != DType::kF32 || t->shape.size() != 1) {
        throw InputError(t->file.string() + ": tensor 'rope_freqs.weight' must be a 1-D F32");
      }
      rope_freqs_.resize(static_cast<size_t>(t->shape[0]));
      std::memcpy(rope_freqs_.data(), t->data, rope_freqs_.size() * sizeof(float));
      continue;
    }
    std::optional<std::string> hf = gemma4_hf_name_of_gguf(name);
    if (!hf || hf->rfind(kTextPrefix, 0) != 0) {
      throw InputError(t->file.string() + ": tensor '" + name +
                       "' is not a tensor of llama.cpp's Gemma 4 text model");
    }
    add(*t, *hf);
  }
}

void Gemma4GgufCheckpoint::add_vision_tensors(const GgufCheckpoint& mmproj) {
  for (const auto& [name, t] : mmproj.tensors()) {
    std::optional<std::string> hf = gemma4_hf_name_of_gguf(name);
    if (!hf || hf->rfind(kTextPrefix, 0) == 0) {
      throw InputError(t->file.string() + ": tensor '" + name +
                       "' is not a tensor of llama.cpp's Gemma 4 vision projector (gemma4v)");
    }
    if (name != "v.patch_embd.weight") {
      add(*t, *hf);
      continue;
    }
    // The converter stores HF's [Hv, p*p*3] patch embedding as a conv kernel [Hv, 3, p, p].
    if (t->shape.size() != 4 || t->shape[1] != 3 || t->shape[2] != t->shape[3] ||
        (t->dtype != DType::kF32 && t->dtype != DType::kF16 && t->dtype != DType::kBF16)) {
      throw InputError(t->file.string() + ": tensor 'v.patch_embd.weight' has shape " +
                       t->shape_string() + " and dtype " + dtype_name(t->dtype) +
                       ", expected a float [hidden, 3, patch, patch]");
    }
    const int64_t out = t->shape[0], p = t->shape[2];
    const size_t es = dtype_size(t->dtype);
    auto buf = std::make_shared<std::vector<std::byte>>(t->nbytes);
    for (int64_t o = 0; o < out; ++o) {
      for (int64_t c = 0; c < 3; ++c) {
        for (int64_t y = 0; y < p; ++y) {
          for (int64_t x = 0; x < p; ++x) {
            const int64_t src = ((o * 3 + c) * p + y) * p + x;
            const int64_t dst = o * 3 * p * p + (y * p + x) * 3 + c;
            std::memcpy(buf->data() + dst * es, t->data + src * es, es);
          }
        }
      }
    }
    CheckpointTensor permuted = *t;
    permuted.shape = {out, 3 * p * p};
    permuted.data = buf->data();
    owned_.push_back(std::move(buf));
    add(std::move(permuted), *hf);
  }
}

// Separate gate / up expert tensors [E, I, H] become HF's fused [E, 2I, H] (gate rows first).
void Gemma4GgufCheckpoint::fuse_split_experts() {
  std::vector<std::string> gates;
  for (const auto& [name, t] : index_) {
    if (ends_with(name, ".experts.gate_proj")) gates.push_back(name);
  }
  for (const std::string& gate_name : gates) {
    const std::string base =
        gate_name.substr(0, gate_name.size() - std::string("gate_proj").size());
    const CheckpointTensor* gate = own(gate_name);
    const CheckpointTensor* up = own(base + "up_proj");
    if (!up || up->dtype != gate->dtype || up->shape != gate->shape || gate->shape.size() != 3) {
      throw InputError(gate->file.string() + ": expert gate tensor of '" + base +
                       "' has no matching up tensor of the same type and shape");
    }
    const size_t per_expert = gate->nbytes / static_cast<size_t>(gate->shape[0]);
    auto buf = std::make_shared<std::vector<std::byte>>(gate->nbytes + up->nbytes);
    for (int64_t e = 0; e < gate->shape[0]; ++e) {
      std::byte* dst = buf->data() + 2 * per_expert * static_cast<size_t>(e);
      std::memcpy(dst, gate->data + per_expert * e, per_expert);
      std::memcpy(dst + per_expert, up->data + per_expert * e, per_expert);
    }
    CheckpointTensor fused = *gate;
    fused.shape[1] *= 2;
    fused.data = buf->data();
    fused.nbytes = buf->size();
    owned_.push_back(std::move(buf));
    index_.erase(gate_name);
    index_.erase(base + "up_proj");
    add(std::move(fused), base + "gate_up_proj");
  }
}

json Gemma4GgufCheckpoint::text_config(const GgufFile& f) const {
  const Metadata m(f, "gemma4");
  const std::string prefix(kTextPrefix);
  const int64_t L = m.integer("block_count");
  if (L <= 0 || L > 4096) m.fail("block_count", "is " + std::to_string(L));
  json c;
  c["model_type"] = "gemma4_text";
  c["hidden_size"] = m.integer("embedding_length");
  c["num_hidden_layers"] = L;
  c["max_position_embeddings"] = m.opt_integer("context_length").value_or(131072);
  c["rms_norm_eps"] = m.opt_float("attention.layer_norm_rms_epsilon").value_or(1e-6);
  c["hidden_activation"] = "gelu_pytorch_tanh";
  if (auto cap = m.opt_float("final_logit_softcapping")) c["final_logit_softcapping"] = *cap;

  // Layer types: the pattern marks sliding layers.
  const GgufValue* pattern = m.find("attention.sliding_window_pattern");
  if (!pattern || pattern->type() != GgufType::kArray) {
    m.fail("attention.sliding_window_pattern", "must be an array of one bool per layer");
  }
  const std::vector<bool> sliding = pattern->as_bool_array();
  if (static_cast<int64_t>(sliding.size()) != L) {
    m.fail("attention.sliding_window_pattern", "has " + std::to_string(sliding.size()) +
                                                   " entries for " + std::to_string(L) + " layers");
  }
  json types = json::array();
  for (bool s : sliding) types.push_back(s ? "sliding_attention" : "full_attention");
  c["layer_types"] = types;
  c["sliding_window"] = m.integer("attention.sliding_window");
  const int64_t head_dim =
      m.opt_integer("attention.key_length_swa").value_or(m.integer("attention.key_length"));
  const int64_t global_head_dim = m.integer("attention.key_length");
  c["head_dim"] = head_dim;
  c["global_head_dim"] = global_head_dim;
  for (const char* key : {"attention.value_length", "attention.value_length_swa"}) {
    const bool swa = std::string_view(key).ends_with("_swa");
    if (auto v = m.opt_integer(key); v && *v != (swa ? head_dim : global_head_dim)) {
      m.fail(key, "differs from the key length: Gemma 4 has equal key and value head sizes");
    }
  }

  const std::vector<int64_t> heads = m.per_layer("attention.head_count", L);
  if (std::adjacent_find(heads.begin(), heads.end(), std::not_equal_to<>()) != heads.end()) {
    m.fail("attention.head_count", "varies by layer, which Gemma 4's config cannot express");
  }
  c["num_attention_heads"] = heads[0];
  const std::vector<int64_t> kv = m.per_layer("attention.head_count_kv", L);
  const int64_t shared = m.opt_integer("attention.shared_kv_layers").value_or(0);
  c["num_kv_shared_layers"] = shared;
  std::optional<int64_t> kv_sliding, kv_full;
  bool k_eq_v = false;
  for (int64_t i = 0; i < L; ++i) {
    std::optional<int64_t>& slot = sliding[i] ? kv_sliding : kv_full;
    if (!slot) slot = kv[i];
    if (*slot != kv[i]) {
      m.fail("attention.head_count_kv", "varies between layers of one attention type");
    }
    const std::string p = prefix + "layers." + std::to_string(i) + ".self_attn.";
    if (!sliding[i] && i < L - shared && own(p + "k_proj.weight") && !own(p + "v_proj.weight")) {
      k_eq_v = true;
    }
  }
  c["num_key_value_heads"] = kv_sliding.value_or(kv_full.value_or(1));
  c["attention_k_eq_v"] = k_eq_v;
  if (kv_full && kv_full != kv_sliding) c["num_global_key_value_heads"] = *kv_full;

  const std::vector<int64_t> ffn = m.per_layer("feed_forward_length", L);
  c["intermediate_size"] = ffn[0];
  c["use_double_wide_mlp"] = shared > 0 && ffn[static_cast<size_t>(L - 1)] == 2 * ffn[0];

  // RoPE: full layers are proportional; rope_freqs holds 1 for each rotated frequency pair and
  // a huge divisor (no rotation) for the rest.
  double partial = 1.0;
  if (!rope_freqs_.empty()) {
    if (static_cast<int64_t>(rope_freqs_.size()) * 2 != global_head_dim) {
      throw InputError(
          f.path().string() + ": rope_freqs has " + std::to_string(rope_freqs_.size()) +
          " entries, expected key_length / 2 = " + std::to_string(global_head_dim / 2));
    }
    size_t rotated = 0;
    while (rotated < rope_freqs_.size() && rope_freqs_[rotated] == 1.0f) ++rotated;
    for (size_t i = rotated; i < rope_freqs_.size(); ++i) {
      if (!(rope_freqs_[i] >= 1e20f)) {
        throw InputError(f.path().string() + ": rope_freqs[" + std::to_string(i) + "] is " +
                         std::to_string(rope_freqs_[i]) +
                         "; Gemma 4 rotates a leading run of pairs (1) and leaves the rest (1e30)");
      }
    }
    partial = 2.0 * static_cast<double>(rotated) / static_cast<double>(global_head_dim);
  }
  const double theta = m.opt_float("rope.freq_base").value_or(1000000.0);
  c["rope_parameters"] = {
      {"full_attention",
       {{"rope_type", "proportional"}, {"rope_theta", theta}, {"partial_rotary_factor", partial}}},
      {"sliding_attention",
       {{"rope_type", "default"},
        {"rope_theta", m.opt_float("rope.freq_base_swa").value_or(10000.0)}}}};
  if (const GgufValue* scaling = m.find("rope.scaling.type");
      scaling && scaling->as_string() != "none") {
    m.fail("rope.scaling.type",
           "is '" + std::string(scaling->as_string()) + "'; Gemma 4 GGUFs carry no RoPE scaling");
  }

  const int64_t ple = m.opt_integer("embedding_length_per_layer_input").value_or(0);
  c["hidden_size_per_layer_input"] = ple;
  const CheckpointTensor* ple_table = own(prefix + "embed_tokens_per_layer.weight");
  c["vocab_size_per_layer_input"] = ple_table ? ple_table->shape[0] : 0;
  const CheckpointTensor* embed = own(prefix + "embed_tokens.weight");
  if (!embed || embed->shape.size() != 2) {
    throw InputError(f.path().string() + ": missing tensor 'token_embd.weight'");
  }
  c["vocab_size"] = embed->shape[0];
  c["tie_word_embeddings"] = own(prefix + "lm_head.weight") == nullptr;
  const int64_t experts = m.opt_integer("expert_count").value_or(0);
  c["enable_moe_block"] = experts > 0;
  if (experts > 0) {
    c["num_experts"] = experts;
    c["top_k_experts"] = m.integer("expert_used_count");
    c["moe_intermediate_size"] = m.integer("expert_feed_forward_length");
  }
  // E2B / E4B (per-layer embeddings) attend causally over images; 31B / 26B-A4B see each
  // image's soft tokens bidirectionally (HF config use_bidirectional_attention).
  c["use_bidirectional_attention"] = ple > 0 ? json(nullptr) : json("vision");
  return c;
}

json Gemma4GgufCheckpoint::vision_config(const GgufFile& f) const {
  const Metadata m(f, "clip");
  if (const GgufValue* proj = f.find("clip.vision.projector_type");
      !proj || proj->as_string() != "gemma4v") {
    throw InputError(f.path().string() + ": mmproj projector type is '" +
                     std::string(proj ? proj->as_string() : "") +
                     "'; Gemma 4's vision tower is 'gemma4v'");
  }
  json v;
  v["model_type"] = "gemma4_vision";
  v["hidden_size"] = m.integer("vision.embedding_length");
  v["intermediate_size"] = m.integer("vision.feed_forward_length");
  v["num_hidden_layers"] = m.integer("vision.block_count");
  const int64_t heads = m.integer("vision.attention.head_count");
  v["num_attention_heads"] = heads;
  v["patch_size"] = m.integer("vision.patch_size");
  v["rms_norm_eps"] = m.opt_float("vision.attention.layer_norm_epsilon").value_or(1e-6);
  // llama.cpp assumes the released models' 3x3 pooling when the key is absent.
  v["pooling_kernel_size"] = m.opt_integer("vision.projector.scale_factor").value_or(3);
  v["hidden_activation"] = "gelu_pytorch_tanh";
  v["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 100.0}};
  const std::string l0(std::string(kVisionLayers) + "0.self_attn.");
  const CheckpointTensor* q_norm = own(l0 + "q_norm.weight");
  const CheckpointTensor* k = own(l0 + "k_proj.linear.weight");
  const int64_t head_dim = q_norm ? q_norm->shape[0] : v["hidden_size"].get<int64_t>() / heads;
  v["head_dim"] = head_dim;
  v["global_head_dim"] = head_dim;
  v["num_key_value_heads"] = k ? k->shape[0] / head_dim : heads;
  const CheckpointTensor* table = own("model.vision_tower.patch_embedder.position_embedding_table");
  if (!table || table->shape.size() != 3) {
    throw InputError(f.path().string() + ": missing tensor 'v.position_embd.weight'");
  }
  v["position_embedding_size"] = table->shape[1];
  v["standardize"] = own("model.vision_tower.std_bias") != nullptr;
  v["use_clipped_linears"] = own(l0 + "q_proj.input_max") != nullptr;
  v["default_output_length"] = 280;  // the processor's budget; the mmproj does not store it
  return v;
}

Gemma4GgufCheckpoint::Gemma4GgufCheckpoint(const fs::path& model,
                                           const std::optional<fs::path>& mmproj)
    : path_(model), config_source_(model.string() + " (GGUF metadata)") {
  const std::vector<fs::path> parts = gguf_split_parts(model);
  for (const fs::path& p : parts) files_.push_back(std::make_shared<GgufCheckpoint>(p));
  const GgufFile& head = files_.front()->file();
  if (is_mmproj(head)) {
    throw InputError(model.string() +
                     ": is a multimodal projector (mmproj) file; pass the model GGUF and give "
                     "this one with --mmproj");
  }
  const std::string arch = architecture_of(head);
  if (arch != "gemma4") {
    throw InputError(model.string() + ": GGUF architecture is '" + arch +
                     "'; gemmaserve serves Gemma 4 (architecture 'gemma4')");
  }
  for (const auto& part : files_) add_text_tensors(*part);
  fuse_split_experts();
  json text = text_config(head);
  json top = {{"architectures", {"Gemma4ForConditionalGeneration"}},
              {"model_type", "gemma4"},
              {"audio_config", nullptr},
              {"vision_config", nullptr}};
  add_vocabulary_ids(head, mmproj.has_value(), top, text);
  top["tie_word_embeddings"] = text["tie_word_embeddings"];
  if (mmproj) {
    files_.push_back(std::make_shared<GgufCheckpoint>(*mmproj));
    const GgufFile& mm = files_.back()->file();
    if (!is_mmproj(mm)) {
      throw InputError(mmproj->string() +
                       ": --mmproj needs a multimodal projector GGUF, this is a " +
                       architecture_of(mm) + " model");
    }
    add_vision_tensors(*files_.back());
    top["vision_config"] = vision_config(mm);
    top["vision_soft_tokens_per_image"] = 280;
  }
  top["text_config"] = std::move(text);
  config_ = std::move(top);
}

}  // namespace

std::vector<fs::path> gguf_split_parts(const fs::path& path) {
  const GgufFile first(path);
  const GgufValue* count = first.find("split.count");
  if (!count || count->as_int() <= 1) return {path};
  const int64_t n = count->as_int();
  static const std::regex kPattern(R"((.*)-(\d{5})-of-(\d{5})\.gguf)");
  std::smatch match;
  const std::string name = path.filename().string();
  if (!std::regex_match(name, match, kPattern) || std::stoll(match[3].str()) != n) {
    throw InputError(path.string() + ": a split GGUF of " + std::to_string(n) +
                     " parts must be named NAME-0000i-of-" +
                     std::string(5 - std::min<size_t>(5, std::to_string(n).size()), '0') +
                     std::to_string(n) + ".gguf");
  }
  std::vector<fs::path> parts;
  for (int64_t i = 1; i <= n; ++i) {
    char suffix[64];
    std::snprintf(suffix, sizeof suffix, "-%05lld-of-%05lld.gguf", static_cast<long long>(i),
                  static_cast<long long>(n));
    fs::path part = path.parent_path() / (match[1].str() + suffix);
    if (!fs::exists(part)) {
      throw InputError(part.string() + ": missing part " + std::to_string(i) + " of " +
                       std::to_string(n) + " of the split GGUF " + path.string());
    }
    parts.push_back(std::move(part));
  }
  return parts;
}

std::optional<std::string> gemma4_hf_name_of_gguf(std::string_view name) {
  const std::string text(kTextPrefix);
  if (auto hf = lookup(kTextTopNames, name)) {
    return *hf == "lm_head.weight" ? std::string(*hf) : text + std::string(*hf);
  }
  if (auto hf = lookup(kVisionTopNames, name)) return std::string(*hf);
  if (auto block = split_block(name, "blk.")) {
    if (auto hf = lookup(kTextBlockNames, block->second)) {
      return text + "layers." + std::to_string(block->first) + "." + std::string(*hf);
    }
    return std::nullopt;
  }
  if (auto block = split_block(name, "v.blk.")) {
    const std::string layer = std::string(kVisionLayers) + std::to_string(block->first) + ".";
    if (auto hf = lookup(kVisionBlockNorms, block->second)) return layer + std::string(*hf);
    for (const auto& [gguf, hf] : kVisionLinears) {
      const std::string_view rest = block->second;
      if (rest.substr(0, gguf.size()) != gguf) continue;
      const std::string_view tail = rest.substr(gguf.size());
      if (tail == ".weight") return layer + std::string(hf) + ".linear.weight";
      for (std::string_view bound : kClipBounds) {
        if (tail == bound) return layer + std::string(hf) + std::string(bound);
      }
    }
  }
  return std::nullopt;
}

std::optional<std::string> gemma4_gguf_name_of_hf(std::string_view name) {
  if (name == "lm_head.weight") return std::string("output.weight");
  if (auto g = lookup(kVisionTopNames, name, true)) return std::string(*g);
  if (name.substr(0, kTextPrefix.size()) == kTextPrefix) {
    const std::string_view rest = name.substr(kTextPrefix.size());
    if (auto g = lookup(kTextTopNames, rest, true)) return std::string(*g);
    if (auto block = split_block(rest, "layers.")) {
      if (auto g = lookup(kTextBlockNames, block->second, true)) {
        return "blk." + std::to_string(block->first) + "." + std::string(*g);
      }
    }
    return std::nullopt;
  }
  if (name.substr(0, kVisionLayers.size()) == kVisionLayers) {
    auto block = split_block(name, kVisionLayers);
    if (!block) return std::nullopt;
    const std::string layer = "v.blk." + std::to_string(block->first) + ".";
    if (auto g = lookup(kVisionBlockNorms, block->second, true)) return layer + std::string(*g);
    for (const auto& [gguf, hf] : kVisionLinears) {
      const std::string_view rest = block->second;
      if (rest.substr(0, hf.size()) != hf) continue;
      const std::string_view tail = rest.substr(hf.size());
      if (tail == ".linear.weight") return layer + std::string(gguf) + ".weight";
      for (std::string_view bound : kClipBounds) {
        if (tail == bound) return layer + std::string(gguf) + std::string(bound);
      }
    }
  }
  return std::nullopt;
}

std::shared_ptr<const Checkpoint> open_gemma4_gguf(const fs::path& model,
                                                   const std::optional<fs::path>& mmproj) {
  return std::make_shared<Gemma4GgufCheckpoint>(model, mmproj);
}

std::optional<GgufFolder> find_gguf_in_folder(const fs::path& dir) {
  std::vector<fs::path> models, projectors;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (!entry.is_regular_file() || entry.path().extension() != ".gguf") continue;
    if (is_mmproj(GgufFile(entry.path()))) {
      projectors.push_back(entry.path());
    } else {
      models.push_back(entry.path());
    }
  }
  if (models.empty()) return std::nullopt;
  std::sort(models.begin(), models.end());
  std::sort(projectors.begin(), projectors.end());
  // A split model's parts count as one model: its first part.
  static const std::regex kLaterPart(R"(.*-(\d{5})-of-\d{5}\.gguf)");
  std::erase_if(models, [](const fs::path& p) {
    std::smatch m;
    const std::string name = p.filename().string();
    return std::regex_match(name, m, kLaterPart) && m[1].str() != "00001";
  });
  if (models.size() != 1 || projectors.size() > 1) {
    throw InputError(dir.string() + ": holds " + std::to_string(models.size()) +
                     " GGUF models and " + std::to_string(projectors.size()) +
                     " mmproj files; name the model file (and --mmproj) instead of the folder");
  }
  GgufFolder out;
  out.model = models.front();
  if (!projectors.empty()) out.mmproj = projectors.front();
  return out;
}

}  // namespace gemmaserve
