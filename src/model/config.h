// Gemma 4 checkpoint configuration: the text decoder's geometry, per-layer attention specs,
// special token ids and generation defaults, parsed from a Hugging Face folder.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace gemmaserve {

enum class AttentionType : int { kSliding = 0, kFull = 1 };
constexpr int kNumAttentionTypes = 2;

struct RopeSpec {
  std::string rope_type = "default";  // "default" or "proportional"
  double theta = 10000.0;
  double partial_rotary_factor = 1.0;  // proportional only
  double factor = 1.0;                 // divides every inverse frequency
};

// Everything the forward pass needs to know about one decoder layer.
struct LayerSpec {
  AttentionType type = AttentionType::kSliding;
  int head_dim = 0;
  int num_kv_heads = 0;
  bool k_eq_v = false;        // full layer without v_proj: V is derived from raw K
  int kv_source_layer = 0;    // == own index unless KV-shared
  int intermediate_size = 0;  // dense MLP width (doubled on KV-shared layers if double-wide)
  bool kv_shared() const;     // defined inline below
  int layer_index = 0;
};
inline bool LayerSpec::kv_shared() const { return kv_source_layer != layer_index; }

struct TextConfig {
  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_hidden_layers = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;
  int head_dim = 0;
  int global_head_dim = 0;
  std::optional<int> num_global_key_value_heads;
  bool attention_k_eq_v = false;
  std::vector<AttentionType> layer_types;
  int sliding_window = 0;
  RopeSpec rope[kNumAttentionTypes];  // indexed by AttentionType
  double rms_norm_eps = 1e-6;
  std::optional<double> final_logit_softcapping;
  int hidden_size_per_layer_input = 0;  // 0 = no per-layer embeddings
  int vocab_size_per_layer_input = 0;
  int num_kv_shared_layers = 0;
  bool use_double_wide_mlp = false;
  bool enable_moe_block = false;
  int num_experts = 0;
  int top_k_experts = 0;
  int moe_intermediate_size = 0;
  std::string hidden_activation = "gelu_pytorch_tanh";
  std::string use_bidirectional_attention;  // "", "vision" or "all"
  int max_position_embeddings = 0;
  bool tie_word_embeddings = true;
  int pad_token_id = 0;
  int bos_token_id = 2;

  std::vector<LayerSpec> layers;  // derived: one per layer, heterogeneity resolved

  int first_kv_shared_layer() const { return num_hidden_layers - num_kv_shared_layers; }
};

// The vision tower (`vision_config`, model_type gemma4_vision), HF's Gemma4VisionConfig defaults.
struct VisionConfig {
  int hidden_size = 768;
  int intermediate_size = 3072;
  int num_hidden_layers = 16;
  int num_attention_heads = 12;
  int num_key_value_heads = 12;
  int head_dim = 64;
  std::string hidden_activation = "gelu_pytorch_tanh";
  double rms_norm_eps = 1e-6;
  int max_position_embeddings = 131072;  // no effect on the math
  double rope_theta = 100.0;             // rope_parameters (rope_type "default" only)
  int pooling_kernel_size = 3;
  int patch_size = 16;
  int position_embedding_size = 10240;
  bool use_clipped_linears = false;
  bool standardize = false;
  std::optional<int> default_output_length;  // informational (soft tokens of the default budget)
};

// Gemma 4 12B's encoder-free image input (`vision_config` of gemma4_unified, HF's
// Gemma4UnifiedVisionConfig defaults): k x k merged patches -> LayerNorm, Dense, LayerNorm, a
// factorized 2-D position table, LayerNorm, then the multimodal embedder (RMSNorm, Linear).
struct UnifiedVisionConfig {
  int patch_size = 16;
  int pooling_kernel_size = 3;  // teacher patches merged k x k into one soft token
  int mm_embed_dim = 3840;
  int mm_posemb_size = 1120;  // rows of the position table: merged patches per side at most
  double rms_norm_eps = 1e-6;
  int output_proj_dims = 3840;  // the embedder's input width (== mm_embed_dim in HF's model)
  int model_patch_size() const { return patch_size * pooling_kernel_size; }
  int patch_dim() const { return 3 * model_patch_size() * model_patch_size(); }
};

// Gemma 4 12B's encoder-free audio input (`audio_config` of gemma4_unified): raw frames of
// audio_embed_dim samples -> RMSNorm -> Linear, one soft token per frame.
struct UnifiedAudioConfig {
  int audio_embed_dim = 640;  // == samples per soft token (HF's audio_samples_per_token)
  double rms_norm_eps = 1e-6;
};

// The audio tower (`audio_config`, model_type gemma4_audio), HF's Gemma4AudioConfig defaults: a
// USM conformer over log-mel frames, two stride-2 convolutions then chunked local attention.
struct AudioConfig {
  int hidden_size = 1024;
  int num_hidden_layers = 12;
  int num_attention_heads = 8;
  std::string hidden_act = "silu";
  std::vector<int> subsampling_conv_channels = {128, 32};
  int conv_kernel_size = 5;
  double residual_weight = 0.5;
  int attention_chunk_size = 12;
  int attention_context_left = 13;
  int attention_context_right = 0;
  double attention_logit_cap = 50.0;
  double attention_invalid_logits_value = -1.0e9;
  bool use_clipped_linears = true;
  double rms_norm_eps = 1e-6;
  double gradient_clipping = 1e10;
  int output_proj_dims = 1536;
  int head_dim() const { return hidden_size / num_attention_heads; }
};

// The model families this engine runs: Gemma 4 with encoder towers (E2B, E4B, 31B, 26B-A4B)
// and the encoder-free unified Gemma 4 (12B).
enum class ModelFamily { kGemma4, kGemma4Unified };

struct ModelConfig {
  // Gemma4ForConditionalGeneration, Gemma4ForCausalLM, Gemma4UnifiedForConditionalGeneration...
  std::string architecture;
  std::string model_type;  // gemma4, gemma4_text, gemma4_unified or gemma4_unified_text
  ModelFamily family = ModelFamily::kGemma4;
  TextConfig text;
  bool has_vision = false;             // takes images: a vision tower or the unified embedder
  std::optional<VisionConfig> vision;  // the vision tower (family kGemma4 only)
  std::optional<UnifiedVisionConfig> unified_vision;  // family kGemma4Unified only
  bool has_audio = false;
  std::optional<AudioConfig> audio;                 // the audio tower (family kGemma4 only)
  std::optional<UnifiedAudioConfig> unified_audio;  // family kGemma4Unified only
  std::string tensor_prefix;                        // "model.language_model." or "model."
  std::vector<int> eos_token_ids;                   // from config.json (may be empty)
  // Multimodal ids: HF's defaults for the multimodal wrapper when absent (image 258880, ...);
  // unset for text-only layouts (Gemma4ForCausalLM).
  std::optional<int> image_token_id, boi_token_id, eoi_token_id, audio_token_id, video_token_id;
  std::optional<int> boa_token_id, eoa_token_id;    // <|audio>, <audio|> (HF: eoa_token_index)
  std::optional<int> vision_soft_tokens_per_image;  // informational
  nlohmann::json raw;                               // the whole config.json
};

// Sampling defaults and stop ids from generation_config.json (all optional).
struct GenerationConfig {
  std::vector<int> eos_token_ids;
  std::optional<int> bos_token_id, pad_token_id;
  std::optional<double> temperature, top_p, min_p, repetition_penalty;
  std::optional<int> top_k, max_new_tokens;
  std::optional<bool> do_sample;
  nlohmann::json raw;  // the whole file, or null when absent
};

// Parses config.json of a checkpoint folder. Throws InputError naming the file and field for
// missing/malformed JSON, unknown architectures, missing or inconsistent fields.
ModelConfig load_model_config(const std::filesystem::path& dir);
// Same, from an already parsed config object (`source` names it in errors).
ModelConfig parse_model_config(const nlohmann::json& config, const std::string& source);

// Parses generation_config.json when present; an absent file gives an empty config.
GenerationConfig load_generation_config(const std::filesystem::path& dir);

}  // namespace gemmaserve
