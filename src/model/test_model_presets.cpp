#include "model/test_model_presets.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <numeric>
#include <optional>
#include <stdexcept>

#include "checkpoint/gemmaserve_quantization.h"
#include "core/error.h"

namespace gemmaserve {
namespace {

using nlohmann::json;

// The text-config numbers that differ between variants (HF convert_gemma4_weights.py values).
struct Variant {
  const char* name;
  int hidden_size;
  int intermediate_size;
  int num_hidden_layers;
  std::vector<const char*> layer_pattern;  // repeated to num_hidden_layers
  int num_attention_heads;
  int num_key_value_heads;
  std::optional<int> num_global_key_value_heads;
  int head_dim;
  int global_head_dim;
  bool attention_k_eq_v;
  int sliding_window;
  int num_kv_shared_layers;
  bool use_double_wide_mlp;
  int hidden_size_per_layer_input;
  bool enable_moe_block;
  std::optional<int> num_experts = std::nullopt;
  std::optional<int> top_k_experts = std::nullopt;
  std::optional<int> moe_intermediate_size = std::nullopt;
  bool bidirectional_vision;
  int max_position_embeddings;
  int vision_soft_tokens_per_image;
  const char* vision;    // vision tower shape: "tiny", "e-series" or "large"; "" for unified
  bool unified = false;  // the encoder-free unified family (Gemma 4 12B)
  bool audio = false;    // the E2B/E4B audio tower (AudioConfig's defaults are its shape)
};

// The vision towers (spec §1, §5; HF convert_gemma4_weights.py): E2B/E4B use clipped linears,
// 31B/26B-A4B standardize; the tiny one (spec §10) does both.
struct VisionVariant {
  const char* name;
  int hidden_size, intermediate_size, num_hidden_layers, num_heads, head_dim;
  int position_embedding_size;
  bool use_clipped_linears, standardize;
};

const VisionVariant& find_vision_variant(const char* name) {
  static const VisionVariant v[] = {
      {"tiny", 32, 64, 2, 2, 16, 1024, true, true},
      {"e-series", 768, 3072, 16, 12, 64, 10240, true, false},
      {"large", 1152, 4304, 27, 16, 72, 10240, false, true},
  };
  for (const VisionVariant& x : v) {
    if (std::strcmp(x.name, name) == 0) return x;
  }
  throw std::logic_error(std::string("unknown vision variant ") + name);
}

constexpr const char* kS = "sliding_attention";
constexpr const char* kF = "full_attention";

// One compact block per variant reads better than a field per line.
// clang-format off
const std::vector<Variant>& variants() {
  static const std::vector<Variant> v = {
      // Spec §10's tiny config (text part): every code path at vocab 262144.
      {.name = "tiny", .hidden_size = 64, .intermediate_size = 128, .num_hidden_layers = 6,
       .layer_pattern = {kS, kF, kS, kS, kS, kF}, .num_attention_heads = 4,
       .num_key_value_heads = 2, .num_global_key_value_heads = 1, .head_dim = 32,
       .global_head_dim = 64, .attention_k_eq_v = true, .sliding_window = 8,
       .num_kv_shared_layers = 3, .use_double_wide_mlp = true, .hidden_size_per_layer_input = 16,
       .enable_moe_block = true, .num_experts = 4, .top_k_experts = 2,
       .moe_intermediate_size = 32, .bidirectional_vision = true,
       .max_position_embeddings = 4096, .vision_soft_tokens_per_image = 70, .vision = "tiny"},
      {.name = "e2b", .hidden_size = 1536, .intermediate_size = 6144, .num_hidden_layers = 35,
       .layer_pattern = {kS, kS, kS, kS, kF}, .num_attention_heads = 8,
       .num_key_value_heads = 1, .num_global_key_value_heads = std::nullopt, .head_dim = 256,
       .global_head_dim = 512, .attention_k_eq_v = false, .sliding_window = 512,
       .num_kv_shared_layers = 20, .use_double_wide_mlp = true,
       .hidden_size_per_layer_input = 256, .enable_moe_block = false,
       .bidirectional_vision = false, .max_position_embeddings = 131072,
       .vision_soft_tokens_per_image = 280, .vision = "e-series", .audio = true},
      {.name = "e4b", .hidden_size = 2560, .intermediate_size = 10240, .num_hidden_layers = 42,
       .layer_pattern = {kS, kS, kS, kS, kS, kF}, .num_attention_heads = 8,
       .num_key_value_heads = 2, .num_global_key_value_heads = std::nullopt, .head_dim = 256,
       .global_head_dim = 512, .attention_k_eq_v = false, .sliding_window = 512,
       .num_kv_shared_layers = 18, .use_double_wide_mlp = false,
       .hidden_size_per_layer_input = 256, .enable_moe_block = false,
       .bidirectional_vision = false, .max_position_embeddings = 131072,
       .vision_soft_tokens_per_image = 280, .vision = "e-series", .audio = true},
      {.name = "31b", .hidden_size = 5376, .intermediate_size = 21504, .num_hidden_layers = 60,
       .layer_pattern = {kS, kS, kS, kS, kS, kF}, .num_attention_heads = 32,
       .num_key_value_heads = 16, .num_global_key_value_heads = 4, .head_dim = 256,
       .global_head_dim = 512, .attention_k_eq_v = true, .sliding_window = 1024,
       .num_kv_shared_layers = 0, .use_double_wide_mlp = false, .hidden_size_per_layer_input = 0,
       .enable_moe_block = false, .bidirectional_vision = true,
       .max_position_embeddings = 262144, .vision_soft_tokens_per_image = 280, .vision = "large"},
      {.name = "26b-a4b", .hidden_size = 2816, .intermediate_size = 2112,
       .num_hidden_layers = 30, .layer_pattern = {kS, kS, kS, kS, kS, kF},
       .num_attention_heads = 16, .num_key_value_heads = 8, .num_global_key_value_heads = 2,
       .head_dim = 256, .global_head_dim = 512, .attention_k_eq_v = true,
       .sliding_window = 1024, .num_kv_shared_layers = 0, .use_double_wide_mlp = false,
       .hidden_size_per_layer_input = 0, .enable_moe_block = true, .num_experts = 128,
       .top_k_experts = 8, .moe_intermediate_size = 704, .bidirectional_vision = true,
       .max_position_embeddings = 262144, .vision_soft_tokens_per_image = 280, .vision = "large"},
      // The unified family at spec §10's tiny widths: every unified code path, fast.
      {.name = "tiny-unified", .hidden_size = 64, .intermediate_size = 128,
       .num_hidden_layers = 6, .layer_pattern = {kS, kF, kS, kS, kS, kF},
       .num_attention_heads = 4, .num_key_value_heads = 2, .num_global_key_value_heads = 1,
       .head_dim = 32, .global_head_dim = 64, .attention_k_eq_v = true, .sliding_window = 8,
       .num_kv_shared_layers = 0, .use_double_wide_mlp = false, .hidden_size_per_layer_input = 0,
       .enable_moe_block = false, .bidirectional_vision = true,
       .max_position_embeddings = 4096, .vision_soft_tokens_per_image = 70, .vision = "",
       .unified = true},
      // Gemma 4 12B (issue 38): Gemma 3 12B's widths, Gemma 4's attention, no PLE or MoE.
      {.name = "12b", .hidden_size = 3840, .intermediate_size = 15360, .num_hidden_layers = 48,
       .layer_pattern = {kS, kS, kS, kS, kS, kF}, .num_attention_heads = 16,
       .num_key_value_heads = 8, .num_global_key_value_heads = 1, .head_dim = 256,
       .global_head_dim = 512, .attention_k_eq_v = true, .sliding_window = 1024,
       .num_kv_shared_layers = 0, .use_double_wide_mlp = false, .hidden_size_per_layer_input = 0,
       .enable_moe_block = false, .bidirectional_vision = true,
       .max_position_embeddings = 262144, .vision_soft_tokens_per_image = 280, .vision = "",
       .unified = true},
  };
  return v;
}
// clang-format on

const Variant& find_variant(const std::string& preset) {
  for (const auto& v : variants()) {
    if (preset == v.name) return v;
  }
  std::string names;
  for (const auto& n : test_model_preset_names()) names += (names.empty() ? "" : ", ") + n;
  throw InputError("unknown preset '" + preset + "' (expected one of " + names + ")");
}

const char* torch_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "float32";
    case DType::kF16:
      return "float16";
    case DType::kBF16:
      return "bfloat16";
    default:
      throw InputError(std::string("unsupported test-model dtype ") + dtype_name(dtype));
  }
}

json optional_int(const std::optional<int>& v) { return v ? json(*v) : json(nullptr); }

json vision_config(const VisionVariant& v, const char* dtype, int soft_tokens) {
  return {
      {"attention_bias", false},
      {"attention_dropout", 0.0},
      {"default_output_length", soft_tokens},
      {"dtype", dtype},
      {"global_head_dim", v.head_dim},
      {"head_dim", v.head_dim},
      {"hidden_activation", "gelu_pytorch_tanh"},
      {"hidden_size", v.hidden_size},
      {"initializer_range", 0.02},
      {"intermediate_size", v.intermediate_size},
      {"max_position_embeddings", 131072},
      {"model_type", "gemma4_vision"},
      {"num_attention_heads", v.num_heads},
      {"num_hidden_layers", v.num_hidden_layers},
      {"num_key_value_heads", v.num_heads},
      {"patch_size", 16},
      {"pooling_kernel_size", 3},
      {"position_embedding_size", v.position_embedding_size},
      {"rms_norm_eps", 1e-06},
      {"rope_parameters", {{"rope_theta", 100.0}, {"rope_type", "default"}}},
      {"standardize", v.standardize},
      {"use_clipped_linears", v.use_clipped_linears},
  };
}

// The E2B/E4B audio_config as the released checkpoints write it: AudioConfig's defaults are
// HF's Gemma4AudioConfig defaults, which are that tower (spec §2).
json audio_config(const char* dtype) {
  const AudioConfig a;
  return {
      {"attention_chunk_size", a.attention_chunk_size},
      {"attention_context_left", a.attention_context_left},
      {"attention_context_right", a.attention_context_right},
      {"attention_invalid_logits_value", a.attention_invalid_logits_value},
      {"attention_logit_cap", a.attention_logit_cap},
      {"conv_kernel_size", a.conv_kernel_size},
      {"dtype", dtype},
      {"gradient_clipping", a.gradient_clipping},
      {"hidden_act", a.hidden_act},
      {"hidden_size", a.hidden_size},
      {"initializer_range", 0.02},
      {"model_type", "gemma4_audio"},
      {"num_attention_heads", a.num_attention_heads},
      {"num_hidden_layers", a.num_hidden_layers},
      {"output_proj_dims", a.output_proj_dims},
      {"residual_weight", a.residual_weight},
      {"rms_norm_eps", a.rms_norm_eps},
      {"subsampling_conv_channels", a.subsampling_conv_channels},
      {"use_clipped_linears", a.use_clipped_linears},
  };
}

// 64-bit finaliser of splitmix64: a good bijective mixer, so mix(counter) is a counter RNG.
inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ull;

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

template <typename Store>
void fill_values(const TensorInit& init, uint64_t stream, int64_t first, int64_t count,
                 Store store) {
  if (init.kind == TensorInit::Kind::kNormal) {
    // Irwin-Hall sum of four 16-bit uniforms: mean 0, unit variance, tails cut at ±3.46σ.
    const float scale = init.b * 1.7320508f / 65536.0f;
    for (int64_t i = 0; i < count; ++i) {
      const uint64_t r = mix64(stream + static_cast<uint64_t>(first + i + 1) * kGolden);
      const int64_t s = static_cast<int64_t>((r & 0xffff) + ((r >> 16) & 0xffff) +
                                             ((r >> 32) & 0xffff) + (r >> 48)) -
                        131070;
      store(i, init.a + static_cast<float>(s) * scale);
    }
  } else {
    const float span = init.b - init.a;
    for (int64_t i = 0; i < count; ++i) {
      const uint64_t r = mix64(stream + static_cast<uint64_t>(first + i + 1) * kGolden);
      store(i, init.a + span * static_cast<float>(r >> 40) * (1.0f / 16777216.0f));
    }
  }
}

}  // namespace

int64_t TestModelSpec::num_parameters() const {
  int64_t n = 0;
  for (const auto& t : tensors) {
    n += t.quantized ? t.spec.numel() / t.spec.shape.back() * t.cols : t.spec.numel();
  }
  return n;
}

uint64_t TestModelSpec::total_bytes() const {
  uint64_t n = 0;
  for (const auto& t : tensors) n += t.spec.nbytes();
  return n;
}

std::vector<TensorSpec> TestModelSpec::specs() const {
  std::vector<TensorSpec> out;
  out.reserve(tensors.size());
  for (const auto& t : tensors) out.push_back(t.spec);
  return out;
}

const std::vector<std::string>& test_model_preset_names() {
  static const std::vector<std::string> names = {"tiny",    "e2b", "e4b",         "31b",
                                                 "26b-a4b", "12b", "tiny-unified"};
  return names;
}

json test_model_config(const std::string& preset, DType dtype) {
  const Variant& v = find_variant(preset);
  const char* dt = torch_dtype_name(dtype);
  json layer_types = json::array();
  for (int i = 0; i < v.num_hidden_layers; ++i) {
    layer_types.push_back(v.layer_pattern[static_cast<size_t>(i) % v.layer_pattern.size()]);
  }
  json text = {
      {"attention_bias", false},
      {"attention_dropout", 0.0},
      {"attention_k_eq_v", v.attention_k_eq_v},
      {"bos_token_id", 2},
      {"dtype", dt},
      {"enable_moe_block", v.enable_moe_block},
      {"eos_token_id", 1},
      {"final_logit_softcapping", 30.0},
      {"global_head_dim", v.global_head_dim},
      {"head_dim", v.head_dim},
      {"hidden_activation", "gelu_pytorch_tanh"},
      {"hidden_size", v.hidden_size},
      {"hidden_size_per_layer_input", v.hidden_size_per_layer_input},
      {"initializer_range", 0.02},
      {"intermediate_size", v.intermediate_size},
      {"layer_types", layer_types},
      {"max_position_embeddings", v.max_position_embeddings},
      {"model_type", "gemma4_text"},
      {"moe_intermediate_size", optional_int(v.moe_intermediate_size)},
      {"num_attention_heads", v.num_attention_heads},
      {"num_experts", optional_int(v.num_experts)},
      {"num_global_key_value_heads", optional_int(v.num_global_key_value_heads)},
      {"num_hidden_layers", v.num_hidden_layers},
      {"num_key_value_heads", v.num_key_value_heads},
      {"num_kv_shared_layers", v.num_kv_shared_layers},
      {"pad_token_id", 0},
      {"rms_norm_eps", 1e-06},
      {"rope_parameters",
       {{"full_attention",
         {{"partial_rotary_factor", 0.25},
          {"rope_theta", 1000000.0},
          {"rope_type", "proportional"}}},
        {"sliding_attention", {{"rope_theta", 10000.0}, {"rope_type", "default"}}}}},
      {"sliding_window", v.sliding_window},
      {"tie_word_embeddings", true},
      {"top_k_experts", optional_int(v.top_k_experts)},
      {"use_bidirectional_attention", v.bidirectional_vision ? json("vision") : json(nullptr)},
      {"use_cache", true},
      {"use_double_wide_mlp", v.use_double_wide_mlp},
      {"vocab_size", 262144},
      {"vocab_size_per_layer_input", 262144},
  };
  if (v.unified) {
    // Gemma4UnifiedTextConfig has no per-layer-input or MoE fields.
    for (const char* key :
         {"hidden_size_per_layer_input", "vocab_size_per_layer_input", "enable_moe_block",
          "num_experts", "top_k_experts", "moe_intermediate_size"}) {
      text.erase(key);
    }
    text["model_type"] = "gemma4_unified_text";
    return {
        {"architectures", {"Gemma4UnifiedForConditionalGeneration"}},
        {"audio_config",
         {{"audio_embed_dim", 640},
          {"model_type", "gemma4_unified_audio"},
          {"rms_norm_eps", 1e-06}}},
        {"audio_token_id", 258881},
        {"boa_token_id", 256000},
        {"boi_token_id", 255999},
        {"dtype", dt},
        {"eoa_token_index", 258883},
        {"eoi_token_id", 258882},
        {"eos_token_id", {1, 106, 50}},
        {"image_token_id", 258880},
        {"initializer_range", 0.02},
        {"model_type", "gemma4_unified"},
        {"text_config", text},
        {"tie_word_embeddings", true},
        {"video_token_id", 258884},
        {"vision_config",
         {{"mm_embed_dim", v.hidden_size},
          {"mm_posemb_size", 1120},
          {"model_type", "gemma4_unified_vision"},
          {"output_proj_dims", v.hidden_size},
          {"patch_size", 16},
          {"pooling_kernel_size", 3},
          {"rms_norm_eps", 1e-06}}},
    };
  }
  return {
      {"architectures", {"Gemma4ForConditionalGeneration"}},
      {"audio_config", v.audio ? audio_config(dt) : json(nullptr)},
      {"audio_token_id", 258881},
      {"boa_token_id", 256000},
      {"boi_token_id", 255999},
      {"dtype", dt},
      {"eoa_token_id", 258883},
      {"eoa_token_index", 258883},
      {"eoi_token_id", 258882},
      {"eos_token_id", {1, 106, 50}},
      {"image_token_id", 258880},
      {"initializer_range", 0.02},
      {"model_type", "gemma4"},
      {"text_config", text},
      {"tie_word_embeddings", true},
      {"video_token_id", 258884},
      {"vision_config",
       vision_config(find_vision_variant(v.vision), dt, v.vision_soft_tokens_per_image)},
      {"vision_soft_tokens_per_image", v.vision_soft_tokens_per_image},
  };
}

json test_generation_config() {
  return {{"bos_token_id", 2}, {"do_sample", true},  {"eos_token_id", {1, 106, 50}},
          {"pad_token_id", 0}, {"temperature", 1.0}, {"top_k", 64},
          {"top_p", 0.95}};
}

std::vector<TestTensor> text_decoder_tensors(const ModelConfig& config, DType dtype) {
  torch_dtype_name(dtype);  // rejects non-float dtypes
  const TextConfig& c = config.text;
  const std::string& prefix = config.tensor_prefix;
  const int64_t H = c.hidden_size, V = c.vocab_size, L = c.num_hidden_layers;
  const int64_t P = c.hidden_size_per_layer_input, nH = c.num_attention_heads;
  std::vector<TestTensor> out;
  auto add = [&](const std::string& key, std::vector<int64_t> shape, TensorInit init) {
    out.push_back({TensorSpec{prefix + key, dtype, std::move(shape)}, key, init, std::nullopt, 0});
  };
  // N(0, 1/fan_in) keeps a matrix's output at its input's scale.
  auto linear = [&](const std::string& key, int64_t rows, int64_t fan_in) {
    add(key, {rows, fan_in}, {TensorInit::Kind::kNormal, 0.0f, 1.0f / std::sqrt(float(fan_in))});
  };
  auto norm = [&](const std::string& key, int64_t n) {
    add(key, {n}, {TensorInit::Kind::kNormal, 1.0f, 0.1f});
  };
  const TensorInit around_one{TensorInit::Kind::kUniform, 0.5f, 1.5f};

  // Scaled by sqrt(H) on lookup and used unscaled as the tied lm_head: unit rows, unit logits.
  add("embed_tokens.weight", {V, H}, {TensorInit::Kind::kNormal, 0.0f, 1.0f / std::sqrt(float(H))});
  if (P > 0) {
    add("embed_tokens_per_layer.weight", {c.vocab_size_per_layer_input, L * P},
        {TensorInit::Kind::kNormal, 0.0f, 1.0f / std::sqrt(float(P))});
    linear("per_layer_model_projection.weight", L * P, H);
    norm("per_layer_projection_norm.weight", P);
  }
  for (int64_t i = 0; i < L; ++i) {
    const LayerSpec& s = c.layers[static_cast<size_t>(i)];
    const std::string p = "layers." + std::to_string(i) + ".";
    const int64_t hd = s.head_dim, kv = s.num_kv_heads, I = s.intermediate_size;
    norm(p + "input_layernorm.weight", H);
    linear(p + "self_attn.q_proj.weight", nH * hd, H);
    if (!s.kv_shared()) {
      linear(p + "self_attn.k_proj.weight", kv * hd, H);
      if (!s.k_eq_v) linear(p + "self_attn.v_proj.weight", kv * hd, H);
    }
    linear(p + "self_attn.o_proj.weight", H, nH * hd);
    norm(p + "self_attn.q_norm.weight", hd);
    if (!s.kv_shared()) norm(p + "self_attn.k_norm.weight", hd);
    norm(p + "post_attention_layernorm.weight", H);
    norm(p + "pre_feedforward_layernorm.weight", H);
    linear(p + "mlp.gate_proj.weight", I, H);
    linear(p + "mlp.up_proj.weight", I, H);
    linear(p + "mlp.down_proj.weight", H, I);
    if (c.enable_moe_block) {
      const int64_t E = c.num_experts, Ie = c.moe_intermediate_size;
      // The router input is scaled by H^-0.5 in the forward pass; unit-scale weights give
      // unit-scale logits, so routing is decisive rather than a near-uniform tie.
      add(p + "router.proj.weight", {E, H}, {TensorInit::Kind::kNormal, 0.0f, 1.0f});
      add(p + "router.scale", {H}, around_one);
      add(p + "router.per_expert_scale", {E}, around_one);
      add(p + "experts.gate_up_proj", {E, 2 * Ie, H},
          {TensorInit::Kind::kNormal, 0.0f, 1.0f / std::sqrt(float(H))});
      add(p + "experts.down_proj", {E, H, Ie},
          {TensorInit::Kind::kNormal, 0.0f, 1.0f / std::sqrt(float(Ie))});
      norm(p + "pre_feedforward_layernorm_2.weight", H);
      norm(p + "post_feedforward_layernorm_1.weight", H);
      norm(p + "post_feedforward_layernorm_2.weight", H);
    }
    norm(p + "post_feedforward_layernorm.weight", H);
    if (P > 0) {
      linear(p + "per_layer_input_gate.weight", P, H);
      linear(p + "per_layer_projection.weight", H, P);
      norm(p + "post_per_layer_input_norm.weight", H);
    }
    add(p + "layer_scalar", {1}, around_one);
  }
  norm("norm.weight", H);
  return out;
}

// The unified family's embedders (HF's Gemma4UnifiedVisionEmbedder and the audio projection).
std::vector<TestTensor> unified_embedder_tensors(const ModelConfig& config, DType dtype) {
  std::vector<TestTensor> out;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, TensorInit init) {
    out.push_back({TensorSpec{name, dtype, std::move(shape)}, name, init, std::nullopt, 0});
  };
  auto linear = [&](const std::string& name, int64_t rows, int64_t fan_in) {
    add(name, {rows, fan_in}, {TensorInit::Kind::kNormal, 0.0f, 1.0f / std::sqrt(float(fan_in))});
  };
  const int64_t H = config.text.hidden_size;
  if (const std::optional<UnifiedVisionConfig>& v = config.unified_vision) {
    const int64_t patch = v->patch_dim(), mm = v->mm_embed_dim;
    const std::string e = "model.vision_embedder.";
    for (const auto& [name, n] :
         {std::pair{"patch_ln1", patch}, {"patch_ln2", mm}, {"pos_norm", mm}}) {
      add(e + name + ".weight", {n}, {TensorInit::Kind::kNormal, 1.0f, 0.1f});
      add(e + name + ".bias", {n}, {TensorInit::Kind::kNormal, 0.0f, 0.1f});
    }
    linear(e + "patch_dense.weight", mm, patch);
    add(e + "patch_dense.bias", {mm}, {TensorInit::Kind::kNormal, 0.0f, 0.1f});
    add(e + "pos_embedding", {v->mm_posemb_size, 2, mm}, {TensorInit::Kind::kNormal, 0.0f, 0.5f});
    linear("model.embed_vision.embedding_projection.weight", H, v->output_proj_dims);
  }
  if (const std::optional<UnifiedAudioConfig>& a = config.unified_audio) {
    linear("model.embed_audio.embedding_projection.weight", H, a->audio_embed_dim);
  }
  return out;
}

// Appends an encoder tower's tensors, named in full (the name seeds the values), with the init
// rules of text_decoder_tensors.
class TowerTensors {
 public:
  TowerTensors(std::vector<TestTensor>* out, DType dtype, std::string prefix, bool clipped)
      : out_(out), dtype_(dtype), prefix_(std::move(prefix)), clipped_(clipped) {}

  void add(const std::string& name, std::vector<int64_t> shape, TensorInit init) const {
    const std::string full = prefix_ + name;
    out_->push_back({TensorSpec{full, dtype_, std::move(shape)}, full, init, std::nullopt, 0});
  }
  // N(0, 1/fan_in) over `shape`, whose product of dims after the first is fan_in.
  void weight(const std::string& name, std::vector<int64_t> shape, int64_t fan_in) const {
    add(name, std::move(shape), {TensorInit::Kind::kNormal, 0.0f, 1.0f / std::sqrt(float(fan_in))});
  }
  void linear(const std::string& name, int64_t rows, int64_t fan_in) const {
    weight(name, {rows, fan_in}, fan_in);
  }
  // HF's Gemma4ClippableLinear: NAME.linear.weight, and 0-dim clip bounds when clipped.
  void clippable(const std::string& name, int64_t rows, int64_t fan_in) const {
    linear(name + ".linear.weight", rows, fan_in);
    if (!clipped_) return;
    // Finite bounds that clip the tails of unit-scale activations (HF's initial ±inf would not).
    for (const char* lo : {".input_min", ".output_min"}) {
      add(name + lo, {}, {TensorInit::Kind::kUniform, -3.0f, -2.0f});
    }
    for (const char* hi : {".input_max", ".output_max"}) {
      add(name + hi, {}, {TensorInit::Kind::kUniform, 2.0f, 3.0f});
    }
  }
  void norm(const std::string& name, int64_t n) const {
    add(name, {n}, {TensorInit::Kind::kNormal, 1.0f, 0.1f});
  }

 private:
  std::vector<TestTensor>* out_;
  DType dtype_;
  std::string prefix_;
  bool clipped_;
};

std::vector<TestTensor> vision_tower_tensors(const ModelConfig& config, DType dtype) {
  if (config.family == ModelFamily::kGemma4Unified) return unified_embedder_tensors(config, dtype);
  std::vector<TestTensor> out;
  if (!config.vision) return out;
  const VisionConfig& v = *config.vision;
  const int64_t Hv = v.hidden_size, Iv = v.intermediate_size, hd = v.head_dim;
  const int64_t qw = static_cast<int64_t>(v.num_attention_heads) * hd;
  const int64_t kvw = static_cast<int64_t>(v.num_key_value_heads) * hd;
  const TowerTensors tower(&out, dtype, "model.vision_tower.", v.use_clipped_linears);
  tower.linear("patch_embedder.input_proj.weight", Hv, 3 * int64_t{v.patch_size} * v.patch_size);
  tower.add("patch_embedder.position_embedding_table", {2, v.position_embedding_size, Hv},
            {TensorInit::Kind::kNormal, 0.0f, 0.5f});
  for (int i = 0; i < v.num_hidden_layers; ++i) {
    const std::string p = "encoder.layers." + std::to_string(i) + ".";
    tower.norm(p + "input_layernorm.weight", Hv);
    tower.clippable(p + "self_attn.q_proj", qw, Hv);
    tower.clippable(p + "self_attn.k_proj", kvw, Hv);
    tower.clippable(p + "self_attn.v_proj", kvw, Hv);
    tower.clippable(p + "self_attn.o_proj", Hv, qw);
    tower.norm(p + "self_attn.q_norm.weight", hd);
    tower.norm(p + "self_attn.k_norm.weight", hd);
    tower.norm(p + "post_attention_layernorm.weight", Hv);
    tower.norm(p + "pre_feedforward_layernorm.weight", Hv);
    tower.clippable(p + "mlp.gate_proj", Iv, Hv);
    tower.clippable(p + "mlp.up_proj", Iv, Hv);
    tower.clippable(p + "mlp.down_proj", Hv, Iv);
    tower.norm(p + "post_feedforward_layernorm.weight", Hv);
  }
  if (v.standardize) {
    tower.add("std_bias", {Hv}, {TensorInit::Kind::kNormal, 0.0f, 0.5f});
    tower.add("std_scale", {Hv}, {TensorInit::Kind::kUniform, 0.5f, 1.5f});
  }
  TowerTensors(&out, dtype, "model.embed_vision.", false)
      .linear("embedding_projection.weight", config.text.hidden_size, Hv);
  return out;
}

std::vector<TestTensor> audio_tower_tensors(const ModelConfig& config, DType dtype) {
  std::vector<TestTensor> out;
  if (!config.audio) return out;
  const AudioConfig& a = *config.audio;
  const int64_t H = a.hidden_size, c0 = a.subsampling_conv_channels[0];
  const int64_t c1 = a.subsampling_conv_channels[1], K = a.conv_kernel_size;
  const TowerTensors tower(&out, dtype, "model.audio_tower.", a.use_clipped_linears);
  const std::string sub = "subsample_conv_projection.";
  tower.weight(sub + "layer0.conv.weight", {c0, 1, 3, 3}, 9);
  tower.norm(sub + "layer0.norm.weight", c0);
  tower.weight(sub + "layer1.conv.weight", {c1, c0, 3, 3}, c0 * 9);
  tower.norm(sub + "layer1.norm.weight", c1);
  tower.linear(sub + "input_proj_linear.weight", H, (c0 / 4) * c1);
  for (int i = 0; i < a.num_hidden_layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    for (const char* ff : {"feed_forward1.", "feed_forward2."}) {
      tower.norm(p + ff + "pre_layer_norm.weight", H);
      tower.clippable(p + ff + "ffw_layer_1", 4 * H, H);
      tower.clippable(p + ff + "ffw_layer_2", H, 4 * H);
      tower.norm(p + ff + "post_layer_norm.weight", H);
    }
    tower.norm(p + "norm_pre_attn.weight", H);
    for (const char* proj : {"q_proj", "k_proj", "v_proj", "post"}) {
      tower.clippable(p + "self_attn." + proj, H, H);
    }
    tower.linear(p + "self_attn.relative_k_proj.weight", H, H);
    // softplus(per_dim_scale) scales the queries: around HF's initial softplus(0).
    tower.add(p + "self_attn.per_dim_scale", {a.head_dim()},
              {TensorInit::Kind::kNormal, 0.0f, 0.1f});
    tower.norm(p + "norm_post_attn.weight", H);
    tower.norm(p + "lconv1d.pre_layer_norm.weight", H);
    tower.clippable(p + "lconv1d.linear_start", 2 * H, H);
    tower.weight(p + "lconv1d.depthwise_conv1d.weight", {H, 1, K}, K);
    tower.norm(p + "lconv1d.conv_norm.weight", H);
    tower.clippable(p + "lconv1d.linear_end", H, H);
    tower.norm(p + "norm_out.weight", H);
  }
  tower.linear("output_proj.weight", a.output_proj_dims, H);
  tower.add("output_proj.bias", {a.output_proj_dims}, {TensorInit::Kind::kNormal, 0.0f, 0.1f});
  TowerTensors(&out, dtype, "model.embed_audio.", false)
      .linear("embedding_projection.weight", config.text.hidden_size, a.output_proj_dims);
  return out;
}

TestModelSpec make_test_model_spec(const std::string& preset, DType dtype) {
  TestModelSpec spec;
  spec.preset = preset;
  const DType float_dtype = dtype_is_quantized(dtype) ? DType::kBF16 : dtype;
  spec.config = test_model_config(preset, float_dtype);
  spec.generation_config = test_generation_config();
  const ModelConfig mc = parse_model_config(spec.config, "preset '" + preset + "'");
  spec.tensors = text_decoder_tensors(mc, float_dtype);
  for (TestTensor& t : vision_tower_tensors(mc, float_dtype)) spec.tensors.push_back(std::move(t));
  for (TestTensor& t : audio_tower_tensors(mc, float_dtype)) spec.tensors.push_back(std::move(t));
  if (dtype_is_quantized(dtype)) {
    std::map<std::string, DType> stored;
    for (TestTensor& t : spec.tensors) {
      // Scalars (the vision tower's clip bounds) and vectors stay in float.
      if (t.spec.shape.size() < 2 || !is_quantizable_tensor(t.key)) continue;
      const int64_t cols = t.spec.shape.back();
      const std::optional<DType> fit = block_fit_type(tensor_quant_type(dtype, t.key), cols);
      if (!fit) continue;
      const DType type = *fit;
      t.quantized = type;
      t.cols = cols;
      t.spec.dtype = DType::kU8;
      t.spec.shape.back() = static_cast<int64_t>(dtype_row_bytes(type, cols));
      stored[t.spec.name] = type;
    }
    spec.config["quantization_config"] = quantization_config_json(dtype, stored);
  }
  return spec;
}

void write_test_model_of_config(const std::filesystem::path& dir, const nlohmann::json& config,
                                DType dtype, uint64_t seed) {
  const ModelConfig mc = parse_model_config(config, dir.string() + "/config.json");
  std::vector<TestTensor> tensors = text_decoder_tensors(mc, dtype);
  for (TestTensor& t : vision_tower_tensors(mc, dtype)) tensors.push_back(std::move(t));
  for (TestTensor& t : audio_tower_tensors(mc, dtype)) tensors.push_back(std::move(t));
  std::vector<TensorSpec> specs;
  for (const auto& x : tensors) specs.push_back(x.spec);
  write_safetensors(dir, specs, plan_single_file(specs, {{"format", "pt"}}),
                    [&](size_t i, int64_t first, int64_t count, std::byte* dst) {
                      fill_test_tensor(tensors[i], seed, first, count, dst);
                    });
  std::ofstream(dir / "config.json") << config.dump(2);
}

void fill_test_tensor(const TestTensor& t, uint64_t seed, int64_t first, int64_t count,
                      std::byte* dst) {
  if (t.quantized) {
    TestTensor values = t;
    values.spec.dtype = DType::kF32;
    values.quantized.reset();
    fill_quantized_bytes(*t.quantized, t.cols, first, count, dst, [&](int64_t row, float* out) {
      fill_test_tensor(values, seed, row * t.cols, t.cols, reinterpret_cast<std::byte*>(out));
    });
    return;
  }
  const uint64_t stream = mix64(seed * kGolden ^ fnv1a(t.key));
  switch (t.spec.dtype) {
    case DType::kF32:
      fill_values(t.init, stream, first, count,
                  [dst](int64_t i, float x) { std::memcpy(dst + i * 4, &x, 4); });
      return;
    case DType::kBF16:
      fill_values(t.init, stream, first, count, [dst](int64_t i, float x) {
        const uint16_t h = f32_to_bf16(x);
        std::memcpy(dst + i * 2, &h, 2);
      });
      return;
    case DType::kF16:
      fill_values(t.init, stream, first, count, [dst](int64_t i, float x) {
        const uint16_t h = f32_to_f16(x);
        std::memcpy(dst + i * 2, &h, 2);
      });
      return;
    case DType::kI64: {
      if (t.init.kind != TensorInit::Kind::kPermutation) break;
      // i -> (a·i + b) mod n with gcd(a, n) = 1 is a bijection computable per element.
      const auto n = static_cast<uint64_t>(t.spec.numel());
      uint64_t a = (stream % n) | 1;
      while (std::gcd(a, n) != 1) a += 2;
      const uint64_t b = mix64(stream) % n;
      for (int64_t i = 0; i < count; ++i) {
        const auto x = static_cast<int64_t>(
            (static_cast<unsigned __int128>(a) * static_cast<uint64_t>(first + i) + b) % n);
        std::memcpy(dst + i * 8, &x, 8);
      }
      return;
    }
    default:
      break;
  }
  throw InputError(std::string("unsupported test-model dtype ") + dtype_name(t.spec.dtype));
}

}  // namespace gemmaserve
