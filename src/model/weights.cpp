#include "model/weights.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <set>

#include "checkpoint/gemmaserve_quantization.h"
#include "core/error.h"
#include "core/logging.h"
#include "io/gguf.h"
#include "kernels/cpu/quant.h"
#include "model/expert_fusion.h"
#include "model/gemma4_gguf.h"
#include "model/quantize.h"
#include "model/tensor_binder.h"
#include "model/tensor_parallel.h"

namespace gemmaserve {
namespace {

bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }

ClippedLinear clipped_linear(TensorBinder& b, const std::string& name, bool clipped,
                             std::vector<int64_t> shape) {
  ClippedLinear c;
  c.w = b.matrix(name + ".linear.weight", std::move(shape));
  for (auto [key, value] : {std::pair{".input_min", &c.input_min},
                            {".input_max", &c.input_max},
                            {".output_min", &c.output_min},
                            {".output_max", &c.output_max}}) {
    // HF registers the bounds only with use_clipped_linears (±inf until loaded).
    if (!clipped) {
      b.mark_used(name + key);
    } else if (auto x = b.scalar(name + key)) {
      *value = *x;
    }
  }
  return c;
}

// The vision tower (model.vision_tower.*) and its projection (model.embed_vision.*).
VisionWeights bind_vision(TensorBinder& tower, TensorBinder& embed, const VisionConfig& v,
                          int64_t text_hidden) {
  VisionWeights w;
  const int64_t Hv = v.hidden_size, Iv = v.intermediate_size, hd = v.head_dim;
  const int64_t qw = v.num_attention_heads * hd, kvw = v.num_key_value_heads * hd;
  const int64_t patch = 3 * static_cast<int64_t>(v.patch_size) * v.patch_size;
  const bool clip = v.use_clipped_linears;
  w.input_proj = tower.matrix("patch_embedder.input_proj.weight", {Hv, patch});
  w.position_table =
      tower.matrix("patch_embedder.position_embedding_table", {2, v.position_embedding_size, Hv});
  if (dtype_is_quantized(w.position_table.dtype)) {
    throw InputError(w.position_table.name + ": a position table must be stored as float");
  }
  w.layers.resize(static_cast<size_t>(v.num_hidden_layers));
  for (int i = 0; i < v.num_hidden_layers; ++i) {
    VisionLayerWeights& l = w.layers[static_cast<size_t>(i)];
    const std::string p = "encoder.layers." + std::to_string(i) + ".";
    l.input_layernorm = tower.vector(p + "input_layernorm.weight", Hv);
    l.post_attention_layernorm = tower.vector(p + "post_attention_layernorm.weight", Hv);
    l.pre_feedforward_layernorm = tower.vector(p + "pre_feedforward_layernorm.weight", Hv);
    l.post_feedforward_layernorm = tower.vector(p + "post_feedforward_layernorm.weight", Hv);
    l.q_proj = clipped_linear(tower, p + "self_attn.q_proj", clip, {qw, Hv});
    l.k_proj = clipped_linear(tower, p + "self_attn.k_proj", clip, {kvw, Hv});
    l.v_proj = clipped_linear(tower, p + "self_attn.v_proj", clip, {kvw, Hv});
    l.o_proj = clipped_linear(tower, p + "self_attn.o_proj", clip, {Hv, qw});
    l.q_norm = tower.vector(p + "self_attn.q_norm.weight", hd);
    l.k_norm = tower.vector(p + "self_attn.k_norm.weight", hd);
    l.gate_proj = clipped_linear(tower, p + "mlp.gate_proj", clip, {Iv, Hv});
    l.up_proj = clipped_linear(tower, p + "mlp.up_proj", clip, {Iv, Hv});
    l.down_proj = clipped_linear(tower, p + "mlp.down_proj", clip, {Hv, Iv});
  }
  if (v.standardize) {
    w.std_bias = tower.vector("std_bias", Hv);
    w.std_scale = tower.vector("std_scale", Hv);
  }
  tower.mark_used("pooler.scale");  // named by the converter; HF's pooler has no parameter
  w.embedding_projection = embed.matrix("embedding_projection.weight", {text_hidden, Hv});
  return w;
}

// The audio tower (model.audio_tower.*) and its projection (model.embed_audio.*).
AudioTowerWeights bind_audio(TensorBinder& tower, TensorBinder& embed, const AudioConfig& a,
                             int64_t text_hidden) {
  AudioTowerWeights w;
  const int64_t H = a.hidden_size, c0 = a.subsampling_conv_channels[0];
  const int64_t c1 = a.subsampling_conv_channels[1], hd = a.head_dim();
  const bool clip = a.use_clipped_linears;
  const std::string sub = "subsample_conv_projection.";
  w.conv0 = tower.float_tensor(sub + "layer0.conv.weight", {c0, 1, 3, 3});
  w.conv0_norm = tower.vector(sub + "layer0.norm.weight", c0);
  w.conv1 = tower.float_tensor(sub + "layer1.conv.weight", {c1, c0, 3, 3});
  w.conv1_norm = tower.vector(sub + "layer1.norm.weight", c1);
  // HF sizes it from the first channel count: right when that is the mel bin count (128).
  w.input_proj_linear = tower.matrix(sub + "input_proj_linear.weight", {H, (c0 / 4) * c1});
  w.layers.resize(static_cast<size_t>(a.num_hidden_layers));
  for (int i = 0; i < a.num_hidden_layers; ++i) {
    AudioLayerWeights& l = w.layers[static_cast<size_t>(i)];
    const std::string p = "layers." + std::to_string(i) + ".";
    for (auto [name, f] : {std::pair{"feed_forward1.", &l.feed_forward1},
                           std::pair{"feed_forward2.", &l.feed_forward2}}) {
      const std::string q = p + name;
      f->pre_layer_norm = tower.vector(q + "pre_layer_norm.weight", H);
      f->post_layer_norm = tower.vector(q + "post_layer_norm.weight", H);
      f->ffw_layer_1 = clipped_linear(tower, q + "ffw_layer_1", clip, {4 * H, H});
      f->ffw_layer_2 = clipped_linear(tower, q + "ffw_layer_2", clip, {H, 4 * H});
    }
    l.q_proj = clipped_linear(tower, p + "self_attn.q_proj", clip, {H, H});
    l.k_proj = clipped_linear(tower, p + "self_attn.k_proj", clip, {H, H});
    l.v_proj = clipped_linear(tower, p + "self_attn.v_proj", clip, {H, H});
    l.post = clipped_linear(tower, p + "self_attn.post", clip, {H, H});
    l.relative_k_proj = tower.matrix(p + "self_attn.relative_k_proj.weight", {H, H});
    l.per_dim_scale = tower.vector(p + "self_attn.per_dim_scale", hd);
    l.norm_pre_attn = tower.vector(p + "norm_pre_attn.weight", H);
    l.norm_post_attn = tower.vector(p + "norm_post_attn.weight", H);
    l.norm_out = tower.vector(p + "norm_out.weight", H);
    l.lconv_pre_layer_norm = tower.vector(p + "lconv1d.pre_layer_norm.weight", H);
    l.lconv_conv_norm = tower.vector(p + "lconv1d.conv_norm.weight", H);
    l.lconv_linear_start = clipped_linear(tower, p + "lconv1d.linear_start", clip, {2 * H, H});
    l.lconv_linear_end = clipped_linear(tower, p + "lconv1d.linear_end", clip, {H, H});
    l.lconv_depthwise =
        tower.float_tensor(p + "lconv1d.depthwise_conv1d.weight", {H, 1, a.conv_kernel_size});
  }
  w.output_proj = tower.matrix("output_proj.weight", {a.output_proj_dims, H});
  w.output_proj_bias = tower.vector("output_proj.bias", a.output_proj_dims);
  w.embedding_projection =
      embed.matrix("embedding_projection.weight", {text_hidden, a.output_proj_dims});
  return w;
}

// Gemma 4 12B's embedders: model.vision_embedder.*, model.embed_vision.embedding_projection and
// model.embed_audio.embedding_projection (HF's Gemma4UnifiedModel names).
UnifiedEmbedderWeights bind_unified(TensorBinder& vision, TensorBinder& embed_vision,
                                    TensorBinder& embed_audio, const ModelConfig& c,
                                    int64_t text_hidden) {
  UnifiedEmbedderWeights w;
  if (const std::optional<UnifiedVisionConfig>& v = c.unified_vision) {
    const int64_t patch = v->patch_dim(), mm = v->mm_embed_dim;
    w.patch_ln1_weight = vision.vector("patch_ln1.weight", patch);
    w.patch_ln1_bias = vision.vector("patch_ln1.bias", patch);
    w.patch_dense = vision.matrix("patch_dense.weight", {mm, patch});
    w.patch_dense_bias = vision.vector("patch_dense.bias", mm);
    w.patch_ln2_weight = vision.vector("patch_ln2.weight", mm);
    w.patch_ln2_bias = vision.vector("patch_ln2.bias", mm);
    w.pos_embedding = vision.float_tensor("pos_embedding", {v->mm_posemb_size, 2, mm});
    w.pos_norm_weight = vision.vector("pos_norm.weight", mm);
    w.pos_norm_bias = vision.vector("pos_norm.bias", mm);
    w.vision_projection =
        embed_vision.matrix("embedding_projection.weight", {text_hidden, v->output_proj_dims});
  }
  if (const std::optional<UnifiedAudioConfig>& a = c.unified_audio) {
    w.audio_projection =
        embed_audio.matrix("embedding_projection.weight", {text_hidden, a->audio_embed_dim});
  }
  return w;
}

// Touches every page of every given range so loading shows real progress and later steps do
// not stall on page faults.
void prefault(const std::vector<std::pair<const void*, size_t>>& ranges,
              const LoadProgress& progress) {
  size_t total = 0;
  for (const auto& r : ranges) total += r.second;
  size_t done = 0, last_report = 0;
  volatile unsigned char sink = 0;
  for (const auto& [data, nbytes] : ranges) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t off = 0; off < nbytes; off += 4096) sink = sink + p[off];
    done += nbytes;
    if (progress && (done - last_report > (64u << 20) || done == total)) {
      progress(done, total);
      last_report = done;
    }
  }
  if (progress) progress(total, total);
}

// --quantization against what the checkpoint is.
void check_quantization_flag(const std::filesystem::path& dir, const Checkpoint& ckpt,
                             const std::optional<StoredQuantization>& stored,
                             const WeightLoadOptions& o) {
  const std::string have(ckpt.quant_method());
  if (!o.checkpoint_quantization.empty() && o.checkpoint_quantization != have) {
    const std::string what =
        !have.empty() ? "quantized with " + have
        : stored      ? std::string("gemmaserve-quantized to ") +
                       cpu::quantization_type_name(stored->type) + " (drop the flag)"
                 : "not quantized (drop the flag, or pass q8_0, q4_0 or q4_k to quantize it "
                   "at load)";
    throw InputError(dir.string() + ": --quantization " + o.checkpoint_quantization +
                     " names the checkpoint's quantization method, but the checkpoint is " + what);
  }
  // A GGUF's float tensors may still be quantized at load (its block tensors stay as stored).
  if (o.quantization && !have.empty() && have != "gguf") {
    throw InputError(dir.string() + ": checkpoint is already quantized with " + have +
                     "; --quantization " + cpu::quantization_type_name(*o.quantization) +
                     " would quantize it twice (drop the flag or pass " + have + ")");
  }
}

// Keeps alive the built buffers (packed checkpoints' converted modules) the weights point
// into; the others (per-expert tensors copied into fused experts) go with `built`.
void keep_built_buffers(ModelWeights& w,
                        const std::map<std::string, std::shared_ptr<const void>>& built) {
  std::map<const void*, std::shared_ptr<const void>> by_data;
  for (const auto& entry : built) by_data[entry.second.get()] = entry.second;
  std::vector<const WeightMatrix*> held = held_matrices(w);
  for (WeightMatrix* m : w.vision.linear_matrices()) held.push_back(m);
  for (WeightMatrix* m : w.unified.linear_matrices()) held.push_back(m);
  for (WeightMatrix* m : w.audio.linear_matrices()) held.push_back(m);
  for (const WeightMatrix* m : held) {
    if (auto it = by_data.find(m->data); it != by_data.end()) w.owned_buffers.push_back(it->second);
  }
}

}  // namespace

std::string canonical_quantization_flag(const std::string& text, const std::string& flag) {
  if (const std::string method = checkpoint_method_of_flag(text); !method.empty()) return method;
  try {
    return cpu::quantization_type_name(cpu::parse_quantization_type(text, flag));
  } catch (const InputError&) {
    throw InputError(flag + ": unknown quantization type '" + text +
                     "' (expected q8_0, q4_0 or q4_k to quantize at load, or the checkpoint's "
                     "own method: gptq, gptq_marlin, awq, awq_marlin, compressed-tensors, gguf)");
  }
}

void apply_quantization_flag(const std::string& text, const std::string& flag,
                             WeightLoadOptions* o) {
  const std::string value = canonical_quantization_flag(text, flag);
  if (checkpoint_method_of_flag(value).empty()) {
    o->quantization = cpu::parse_quantization_type(value, flag);
  } else {
    o->checkpoint_quantization = value;
  }
}

std::vector<WeightMatrix*> VisionWeights::linear_matrices() {
  std::vector<WeightMatrix*> out;
  if (input_proj) out.push_back(&input_proj);
  for (VisionLayerWeights& l : layers) {
    for (ClippedLinear* c :
         {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.gate_proj, &l.up_proj, &l.down_proj}) {
      out.push_back(&c->w);
    }
  }
  if (embedding_projection) out.push_back(&embedding_projection);
  return out;
}

std::vector<WeightMatrix*> AudioTowerWeights::linear_matrices() {
  std::vector<WeightMatrix*> out;
  if (input_proj_linear) out.push_back(&input_proj_linear);
  for (AudioLayerWeights& l : layers) {
    for (ClippedLinear* c :
         {&l.feed_forward1.ffw_layer_1, &l.feed_forward1.ffw_layer_2, &l.feed_forward2.ffw_layer_1,
          &l.feed_forward2.ffw_layer_2, &l.q_proj, &l.k_proj, &l.v_proj, &l.post,
          &l.lconv_linear_start, &l.lconv_linear_end}) {
      if (c->w) out.push_back(&c->w);
    }
    if (l.relative_k_proj) out.push_back(&l.relative_k_proj);
  }
  for (WeightMatrix* m : {&output_proj, &embedding_projection}) {
    if (*m) out.push_back(m);
  }
  return out;
}

std::vector<WeightMatrix*> UnifiedEmbedderWeights::linear_matrices() {
  std::vector<WeightMatrix*> out;
  for (WeightMatrix* m : {&patch_dense, &vision_projection, &audio_projection}) {
    if (*m) out.push_back(m);
  }
  return out;
}

std::optional<std::string> find_text_prefix(const Checkpoint& ckpt, const std::string& configured) {
  // The configured prefix first, then the other known layouts.
  for (const std::string& p :
       {configured, std::string("model.language_model."), std::string("model."),
        std::string("language_model.model."), std::string("")}) {
    if (ckpt.find(p + "embed_tokens.weight")) return p;
  }
  return std::nullopt;
}

std::optional<std::filesystem::path> gguf_model_file(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(path)) {
    if (GgufFile::has_gguf_magic(path)) return path;
    return std::nullopt;
  }
  if (fs::exists(path / "config.json")) return std::nullopt;
  if (auto folder = find_gguf_in_folder(path)) return folder->model;
  return std::nullopt;
}

std::shared_ptr<const Checkpoint> open_model_checkpoint(
    const std::filesystem::path& path, const std::optional<std::filesystem::path>& mmproj) {
  namespace fs = std::filesystem;
  std::optional<fs::path> projector = mmproj;
  std::optional<fs::path> model = gguf_model_file(path);
  if (model && fs::is_directory(path) && !projector) projector = find_gguf_in_folder(path)->mmproj;
  if (model) return open_gemma4_gguf(*model, projector);
  if (mmproj) {
    throw InputError("--mmproj: " + mmproj->string() +
                     " is a GGUF vision projector, but the model " + path.string() +
                     " is not a GGUF file (its vision tower comes from the folder)");
  }
  std::shared_ptr<const Checkpoint> ckpt = open_checkpoint(path);
  if (ckpt->format() != "safetensors") {
    throw InputError((path / "config.json").string() +
                     ": missing (not a Hugging Face checkpoint folder?)");
  }
  return ckpt;
}

ModelWeights load_model_weights(const std::filesystem::path& dir, const LoadProgress& progress) {
  return load_model_weights(dir, progress, WeightLoadOptions{});
}

ModelWeights load_model_weights(const std::filesystem::path& dir, const LoadProgress& progress,
                                const WeightLoadOptions& options) {
  ModelWeights w;
  const std::shared_ptr<const Checkpoint> ckpt = open_model_checkpoint(dir, options.mmproj);
  w.checkpoint = ckpt;
  w.config = parse_model_config(ckpt->config(), ckpt->config_source());
  const std::optional<StoredQuantization> stored =
      stored_quantization(w.config.raw, ckpt->config_source());
  if (stored && options.quantization && *options.quantization != stored->type) {
    throw InputError(dir.string() + ": checkpoint is already quantized to " +
                     cpu::quantization_type_name(stored->type) + "; --quantization " +
                     cpu::quantization_type_name(*options.quantization) +
                     " would quantize it twice (drop the flag, pass " +
                     cpu::quantization_type_name(stored->type) +
                     ", or quantize the original checkpoint)");
  }
  check_quantization_flag(dir, *ckpt, stored, options);
  // Converted modules of packed checkpoints: owned here, kept by the weights that use them.
  std::map<std::string, std::shared_ptr<const void>> built = ckpt->take_built_tensors();
  std::set<std::string> built_names;
  for (const auto& entry : built) built_names.insert(entry.first);
  TextConfig& c = w.config.text;

  const std::optional<std::string> found = find_text_prefix(*ckpt, w.config.tensor_prefix);
  if (!found) {
    throw InputError(dir.string() + ": missing tensor '" + w.config.tensor_prefix +
                     "embed_tokens.weight'");
  }
  const std::string prefix = *found;
  w.config.tensor_prefix = prefix;
  TensorBinder b(*ckpt, prefix, &w.owned_buffers, stored ? &stored->tensors : nullptr);
  WeightConversionTally conversions;
  b.convert_storage_types(options.pool, &conversions);
  const int64_t H = c.hidden_size, V = c.vocab_size, L = c.num_hidden_layers;
  const int64_t P = c.hidden_size_per_layer_input;
  const int64_t nH = c.num_attention_heads;

  w.embed_tokens = b.matrix("embed_tokens.weight", {V, H});
  w.final_norm = b.vector("norm.weight", H);
  if (c.tie_word_embeddings) {
    w.lm_head = w.embed_tokens;
    if (const TensorView* lm = ckpt->find("lm_head.weight")) {
      TensorBinder::check_shape(*lm, {V, H});
      GS_LOG_DEBUG << "tied embeddings: ignoring stored lm_head.weight";
    }
  } else {
    TensorBinder top(*ckpt, "", &w.owned_buffers, stored ? &stored->tensors : nullptr);
    top.convert_storage_types(options.pool, &conversions);
    w.lm_head = top.matrix("lm_head.weight", {V, H});
  }
  if (P > 0) {
    w.embed_tokens_per_layer =
        b.matrix("embed_tokens_per_layer.weight", {c.vocab_size_per_layer_input, L * P});
    w.per_layer_model_projection = b.matrix("per_layer_model_projection.weight", {L * P, H});
    w.per_layer_projection_norm = b.vector("per_layer_projection_norm.weight", P);
  }

  int missing_scalars = 0;
  w.layers.resize(static_cast<size_t>(L));
  for (int i = 0; i < L; ++i) {
    const LayerSpec& s = c.layers[i];
    LayerWeights& lw = w.layers[i];
    const std::string p = "layers." + std::to_string(i) + ".";
    const int64_t hd = s.head_dim, kv = s.num_kv_heads, I = s.intermediate_size;
    lw.input_layernorm = b.vector(p + "input_layernorm.weight", H);
    lw.post_attention_layernorm = b.vector(p + "post_attention_layernorm.weight", H);
    lw.pre_feedforward_layernorm = b.vector(p + "pre_feedforward_layernorm.weight", H);
    lw.post_feedforward_layernorm = b.vector(p + "post_feedforward_layernorm.weight", H);
    lw.q_proj = b.matrix(p + "self_attn.q_proj.weight", {nH * hd, H});
    lw.o_proj = b.matrix(p + "self_attn.o_proj.weight", {H, nH * hd});
    lw.q_norm = b.vector(p + "self_attn.q_norm.weight", hd);
    if (s.kv_shared()) {
      // KV-shared layers attend over their source layer's cache: stored k/v are unused.
      b.mark_used(p + "self_attn.k_proj.weight");
      b.mark_used(p + "self_attn.v_proj.weight");
      b.mark_used(p + "self_attn.k_norm.weight");
    } else {
      lw.k_proj = b.matrix(p + "self_attn.k_proj.weight", {kv * hd, H});
      lw.k_norm = b.vector(p + "self_attn.k_norm.weight", hd);
      if (s.k_eq_v) {
        b.mark_used(p + "self_attn.v_proj.weight");
      } else {
        lw.v_proj = b.matrix(p + "self_attn.v_proj.weight", {kv * hd, H});
      }
    }
    lw.gate_proj = b.matrix(p + "mlp.gate_proj.weight", {I, H});
    lw.up_proj = b.matrix(p + "mlp.up_proj.weight", {I, H});
    lw.down_proj = b.matrix(p + "mlp.down_proj.weight", {H, I});
    if (auto x = b.scalar(p + "layer_scalar")) {
      lw.layer_scalar = *x;
    } else {
      ++missing_scalars;
    }
    if (P > 0) {
      lw.per_layer_input_gate = b.matrix(p + "per_layer_input_gate.weight", {P, H});
      lw.per_layer_projection = b.matrix(p + "per_layer_projection.weight", {H, P});
      lw.post_per_layer_input_norm = b.vector(p + "post_per_layer_input_norm.weight", H);
    }
    if (c.enable_moe_block) {
      const int64_t E = c.num_experts, Ie = c.moe_intermediate_size;
      lw.router_proj = b.matrix(p + "router.proj.weight", {E, H});
      lw.router_scale = b.vector(p + "router.scale", H);
      lw.router_per_expert_scale = b.vector(p + "router.per_expert_scale", E);
      if (!b.find(p + "experts.gate_up_proj") && b.find(p + "experts.0.gate_proj.weight")) {
        // Quantized checkpoints store experts one module each (model/expert_fusion.h).
        FusedExperts f = fuse_experts(b, p, E, Ie, H, &w.owned_buffers, &built);
        lw.experts_gate_up = f.gate_up;
        lw.experts_down = f.down;
      } else {
        lw.experts_gate_up = b.matrix(p + "experts.gate_up_proj", {E, 2 * Ie, H});
        lw.experts_down = b.matrix(p + "experts.down_proj", {E, H, Ie});
      }
      lw.pre_feedforward_layernorm_2 = b.vector(p + "pre_feedforward_layernorm_2.weight", H);
      lw.post_feedforward_layernorm_1 = b.vector(p + "post_feedforward_layernorm_1.weight", H);
      lw.post_feedforward_layernorm_2 = b.vector(p + "post_feedforward_layernorm_2.weight", H);
    }
  }
  if (missing_scalars) {
    GS_LOG_WARNING << dir.string() << ": " << missing_scalars
                   << " layers have no layer_scalar tensor; using 1.0 (HF's initial value)";
  }

  const auto* stored_names = stored ? &stored->tensors : nullptr;
  TensorBinder tower(*ckpt, "model.vision_tower.", &w.owned_buffers, stored_names);
  TensorBinder embed(*ckpt, "model.embed_vision.", &w.owned_buffers, stored_names);
  tower.convert_storage_types(options.pool, &conversions);
  embed.convert_storage_types(options.pool, &conversions);
  // Under tensor parallelism rank 0 alone runs the vision tower (the step plan carries its rows).
  const bool runs_vision = options.tensor_parallel_rank == 0;
  if (w.config.vision && runs_vision) w.vision = bind_vision(tower, embed, *w.config.vision, H);
  TensorBinder unified_vision(*ckpt, "model.vision_embedder.", &w.owned_buffers, stored_names);
  TensorBinder embed_audio(*ckpt, "model.embed_audio.", &w.owned_buffers, stored_names);
  unified_vision.convert_storage_types(options.pool, &conversions);
  embed_audio.convert_storage_types(options.pool, &conversions);
  if (w.config.family == ModelFamily::kGemma4Unified && runs_vision) {
    w.unified = bind_unified(unified_vision, embed, embed_audio, w.config, H);
  }
  TensorBinder audio_tower(*ckpt, "model.audio_tower.", &w.owned_buffers, stored_names);
  audio_tower.convert_storage_types(options.pool, &conversions);
  // Rank 0 alone runs the audio tower, as the vision tower.
  if (w.config.audio && runs_vision) {
    w.audio = bind_audio(audio_tower, embed_audio, *w.config.audio, H);
  }

  // Report what was not used.
  size_t vision = 0, audio = 0;
  std::vector<std::string> unknown;
  for (const auto& [name, v] : ckpt->tensors()) {
    if (b.used().count(name) || tower.used().count(name) || embed.used().count(name) ||
        unified_vision.used().count(name) || embed_audio.used().count(name) ||
        audio_tower.used().count(name) || name == "lm_head.weight") {
      continue;
    }
    if (starts_with(name, "model.vision_tower.") || starts_with(name, "model.embed_vision.") ||
        starts_with(name, "model.vision_embedder.")) {
      if (runs_vision) ++vision;
    } else if (starts_with(name, "model.audio_tower.") || starts_with(name, "model.embed_audio.")) {
      if (runs_vision) ++audio;
    } else {
      unknown.push_back(name);
    }
  }
  if (vision) {
    GS_LOG_WARNING << "ignoring " << vision << " vision-tower tensors"
                   << (w.config.vision ? " the tower does not use"
                                       : " (config has no vision_config)");
  }
  if (audio) {
    GS_LOG_WARNING << "ignoring " << audio << " audio-tower tensors"
                   << (w.config.audio || w.config.unified_audio ? " the tower does not use"
                                                                : " (config has no audio_config)");
  }
  if (!unknown.empty()) {
    GS_LOG_WARNING << "ignoring " << unknown.size() << " unexpected tensors, e.g. '"
                   << unknown.front() << "'";
  }
  log_weight_conversions(conversions);
  if (stored) w.quantization = stored->type;
  keep_built_buffers(w, built);
  if (options.tensor_parallel_size > 1) {
    shard_for_tensor_parallel(w, options.tensor_parallel_rank, options.tensor_parallel_size,
                              options.expert_parallel);
  }
  if (options.quantization && !stored) {
    // Quantizing reads every float matrix; the rest is small, so no separate prefault.
    quantize_model_weights(w, *options.quantization, options.pool, options.quantize_progress);
    w.quantization = options.quantization;
    if (progress) progress(ckpt->total_bytes(), ckpt->total_bytes());
  } else {
    // A tensor-parallel rank reads only its slices of the file.
    std::vector<std::pair<const void*, size_t>> ranges;
    if (options.tensor_parallel_size > 1) {
      for (const WeightMatrix* m : held_matrices(w)) {
        ranges.emplace_back(m->data,
                            static_cast<size_t>(m->rows) * dtype_row_bytes(m->dtype, m->cols));
      }
    } else {
      for (const auto& [name, v] : ckpt->tensors()) {
        if (!built_names.count(name)) ranges.emplace_back(v->data, v->nbytes);  // built: in RAM
      }
    }
    prefault(ranges, progress);
  }
  return w;
}

}  // namespace gemmaserve
