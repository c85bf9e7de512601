// Gemma 4 text-decoder weights, bound to checkpoint tensors by name and validated by shape.
// Large matrices stay memory-mapped in their checkpoint dtype; small vectors are held as f32.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "core/dtype.h"
#include "core/thread_pool.h"
#include "model/config.h"
#include "model/tensor_parallel.h"

namespace gemmaserve {

// A 2-D (or 3-D for experts) weight in checkpoint layout: rows of `cols` elements, row-major.
// Linear weights are [out, in]; experts are [E, rows_per_expert, cols].
struct WeightMatrix {
  std::string name;
  DType dtype = DType::kBF16;
  WeightLayout layout = WeightLayout::kRows;  // kInterleaved16 once the model regroups it
  const void* data = nullptr;                 // nullptr = absent
  int64_t rows = 0;                           // total rows (E * per-expert rows for 3-D)
  int64_t cols = 0;
  // Act-order GPTQ modules stored with their columns sorted by group: column j multiplies input
  // element input_perm[j] (cpu::MatmulArgs::x_perm); null for every other matrix.
  std::shared_ptr<const std::vector<int32_t>> input_perm;
  explicit operator bool() const { return data != nullptr; }
  const int32_t* x_perm() const { return input_perm ? input_perm->data() : nullptr; }
};

struct LayerWeights {
  std::vector<float> input_layernorm, post_attention_layernorm;
  std::vector<float> pre_feedforward_layernorm, post_feedforward_layernorm;
  WeightMatrix q_proj, k_proj, v_proj, o_proj;  // k/v absent on KV-shared layers; v on k_eq_v
  std::vector<float> q_norm, k_norm;            // k_norm empty on KV-shared layers
  WeightMatrix gate_proj, up_proj, down_proj;
  float layer_scalar = 1.0f;
  // Per-layer embeddings (hidden_size_per_layer_input > 0).
  WeightMatrix per_layer_input_gate, per_layer_projection;
  std::vector<float> post_per_layer_input_norm;
  // MoE (enable_moe_block).
  WeightMatrix router_proj;
  std::vector<float> router_scale, router_per_expert_scale;
  WeightMatrix experts_gate_up;  // [E, 2*I_e, H]
  WeightMatrix experts_down;     // [E, H, I_e]
  std::vector<float> pre_feedforward_layernorm_2, post_feedforward_layernorm_1,
      post_feedforward_layernorm_2;
};

// A vision-tower linear (HF's Gemma4ClippableLinear): with use_clipped_linears its input and
// output are clamped to the stored bounds (±inf when a bound is absent).
struct ClippedLinear {
  WeightMatrix w;
  static constexpr float kInf = std::numeric_limits<float>::infinity();
  float input_min = -kInf, input_max = kInf;
  float output_min = -kInf, output_max = kInf;
};

struct VisionLayerWeights {
  std::vector<float> input_layernorm, post_attention_layernorm;
  std::vector<float> pre_feedforward_layernorm, post_feedforward_layernorm;
  ClippedLinear q_proj, k_proj, v_proj, o_proj;
  std::vector<float> q_norm, k_norm;
  ClippedLinear gate_proj, up_proj, down_proj;
};

// The vision tower and its projection into the text model (empty when config.vision is unset).
struct VisionWeights {
  WeightMatrix input_proj;      // [Hv, 3 * patch²]
  WeightMatrix position_table;  // [2 * position_embedding_size, Hv]: x rows, then y rows
  std::vector<VisionLayerWeights> layers;
  std::vector<float> std_bias, std_scale;  // standardize only
  WeightMatrix embedding_projection;       // [H, Hv] (embed_vision)
  // The linear weights (what quantization and regrouping apply to); not the position table.
  std::vector<WeightMatrix*> linear_matrices();
};

// One conformer block of the audio tower (HF's Gemma4AudioLayer); norms are f32 weights.
struct AudioFeedForwardWeights {
  std::vector<float> pre_layer_norm, post_layer_norm;
  ClippedLinear ffw_layer_1, ffw_layer_2;  // [4H, H], [H, 4H]
};
struct AudioLayerWeights {
  AudioFeedForwardWeights feed_forward1, feed_forward2;
  ClippedLinear q_proj, k_proj, v_proj, post;
  WeightMatrix relative_k_proj;      // [H, H] (plain linear)
  std::vector<float> per_dim_scale;  // [head_dim]
  std::vector<float> norm_pre_attn, norm_post_attn, norm_out;
  std::vector<float> lconv_pre_layer_norm, lconv_conv_norm;
  ClippedLinear lconv_linear_start, lconv_linear_end;  // [2H, H], [H, H]
  std::vector<float> lconv_depthwise;                  // [H, kernel]
};

// The audio tower (model.audio_tower.*) and embed_audio (empty when config.audio is unset).
struct AudioTowerWeights {
  std::vector<float> conv0, conv1;            // [C0, 1, 3, 3], [C1, C0, 3, 3]
  std::vector<float> conv0_norm, conv1_norm;  // LayerNorm weights [C0], [C1]
  WeightMatrix input_proj_linear;             // [H, (C0 / 4) * C1]
  std::vector<AudioLayerWeights> layers;
  WeightMatrix output_proj;             // [output_proj_dims, H]
  std::vector<float> output_proj_bias;  // [output_proj_dims]
  WeightMatrix embedding_projection;    // [text hidden, output_proj_dims] (embed_audio)
  explicit operator bool() const { return !layers.empty(); }
  // The matrices --quantization and the kernels' row regrouping apply to.
  std::vector<WeightMatrix*> linear_matrices();
};

// Gemma 4 12B's encoder-free embedders (family kGemma4Unified; empty otherwise). Image:
// LayerNorm -> Dense -> LayerNorm -> + position rows -> LayerNorm -> RMSNorm -> Linear; audio:
// RMSNorm -> Linear.
struct UnifiedEmbedderWeights {
  std::vector<float> patch_ln1_weight, patch_ln1_bias;  // [patch_dim]
  WeightMatrix patch_dense;                             // [mm_embed_dim, patch_dim]
  std::vector<float> patch_dense_bias;                  // [mm_embed_dim]
  std::vector<float> patch_ln2_weight, patch_ln2_bias;
  std::vector<float> pos_embedding;  // [mm_posemb_size, 2, mm_embed_dim]: x row, y row
  std::vector<float> pos_norm_weight, pos_norm_bias;
  WeightMatrix vision_projection;  // [H, mm_embed_dim] (embed_vision)
  WeightMatrix audio_projection;   // [H, audio_embed_dim] (embed_audio)
  std::vector<WeightMatrix*> linear_matrices();
};

struct ModelWeights {
  ModelConfig config;
  WeightMatrix embed_tokens;  // [V, H]
  WeightMatrix lm_head;       // == embed_tokens when tied
  std::vector<float> final_norm;
  WeightMatrix embed_tokens_per_layer;      // [V_ple, L*P]
  WeightMatrix per_layer_model_projection;  // [L*P, H]
  std::vector<float> per_layer_projection_norm;
  std::vector<LayerWeights> layers;
  VisionWeights vision;
  AudioTowerWeights audio;
  UnifiedEmbedderWeights unified;
  // Which slice of the model these weights are (tensor parallelism; size 1 = all of it).
  TensorParallelShard tensor_parallel;
  // The quantized weight type in use (stored in the checkpoint or applied at load), if any.
  std::optional<DType> quantization;

  // Keeps the mapped files (and any converted buffers) alive.
  std::shared_ptr<const Checkpoint> checkpoint;
  std::vector<std::shared_ptr<const void>> owned_buffers;
};

// Progress callback: (bytes done, bytes total).
using LoadProgress = std::function<void(size_t, size_t)>;

// The checkpoint at `path` through checkpoint/'s interface: a Hugging Face folder, a Gemma 4
// GGUF file (split parts found beside it; `mmproj` adds its vision tower), or a folder of GGUF
// files without config.json (model/gemma4_gguf.h). Anything else is the InputError of a folder
// without config.json.
std::shared_ptr<const Checkpoint> open_model_checkpoint(
    const std::filesystem::path& path,
    const std::optional<std::filesystem::path>& mmproj = std::nullopt);

// The prefix of the text decoder's tensor names in `ckpt`: the configured one, else the first of
// the known layouts holding embed_tokens.weight; nullopt when none does.
std::optional<std::string> find_text_prefix(const Checkpoint& ckpt, const std::string& configured);

// The file holding the tokenizer and chat template of a GGUF model at `path` (the file itself,
// or the model file of a folder of GGUFs); nullopt for Hugging Face folders.
std::optional<std::filesystem::path> gguf_model_file(const std::filesystem::path& path);

// Loads config.json and the safetensors of a folder and binds every tensor the text decoder
// needs, checking names and shapes (InputError naming file and tensor: "missing tensor",
// "shape [a, b] expected, found [c, d]", unsupported dtype), and the vision tower's when the
// config has one, and the audio tower's likewise. Unused k/v tensors of KV-shared layers are
// skipped (logged).
ModelWeights load_model_weights(const std::filesystem::path& dir,
                                const LoadProgress& progress = nullptr);

struct WeightLoadOptions {
  // Quantize float weight matrices at load (see model/quantize.h). A checkpoint stored
  // quantized loads as is; asking for another type than the stored one is an InputError.
  std::optional<DType> quantization;
  ThreadPool* pool = nullptr;      // quantizes in parallel when set
  LoadProgress quantize_progress;  // (source bytes quantized, total)
  // Keep only this rank's slice of the text decoder (model/tensor_parallel.h); the slices are
  // what is quantized and read from the file.
  int tensor_parallel_rank = 0;
  int tensor_parallel_size = 1;
  bool expert_parallel = false;  // whole MoE experts per rank instead of slices of each
  // The vision projector GGUF of a GGUF model (llama-server's --mmproj).
  std::optional<std::filesystem::path> mmproj;
  // The method the checkpoint must be quantized with ("gptq", "awq", "compressed-tensors",
  // "gguf": vLLM's --quantization naming the checkpoint's own method; "" = any). InputError
  // saying what the checkpoint is otherwise.
  std::string checkpoint_quantization;
};

// --quantization's value as EngineArgs keeps it: a load-time type (q8_0, q4_0, q4_k) or the
// method vLLM's name stands for (checkpoint_method_of_flag); InputError naming `flag` otherwise.
std::string canonical_quantization_flag(const std::string& text, const std::string& flag);
// Sets o->quantization (a load-time type) or o->checkpoint_quantization (a method) from it.
void apply_quantization_flag(const std::string& text, const std::string& flag,
                             WeightLoadOptions* o);
// Also reads gemmaserve-quantized checkpoints (config.json quantization_config: U8 tensors of
// shape [rows..., row_bytes]).
ModelWeights load_model_weights(const std::filesystem::path& dir, const LoadProgress& progress,
                                const WeightLoadOptions& options);

}  // namespace gemmaserve
