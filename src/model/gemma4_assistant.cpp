#include "model/gemma4_assistant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>

#include "core/aligned.h"
#include "core/error.h"
#include "core/logging.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/interleave.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "model/quantize.h"
#include "model/tensor_binder.h"

namespace gemmaserve {
namespace {

const char* type_name(int t) {
  return t == static_cast<int>(AttentionType::kSliding) ? "sliding_attention" : "full_attention";
}

// Row `row` of a weight matrix as floats, whatever its dtype and layout.
void matrix_row_f32(const WeightMatrix& m, int64_t row, float* out) {
  if (m.layout == WeightLayout::kInterleaved16) {
    cpu::interleaved_row_to_f32(m.dtype, m.data, row, m.cols, out);
    return;
  }
  const auto* src = static_cast<const std::byte*>(m.data) +
                    static_cast<size_t>(row) * dtype_row_bytes(m.dtype, m.cols);
  cpu::to_f32(m.dtype, src, out, static_cast<size_t>(m.cols));
}

int32_t first_argmax(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if (x[i] > x[best]) best = i;
  }
  return static_cast<int32_t>(best);
}

}  // namespace

AssistantWeights load_assistant_weights(const std::filesystem::path& dir) {
  AssistantWeights w;
  w.config = load_assistant_config(dir);
  const AssistantConfig& ac = w.config;
  const TextConfig& c = ac.text;
  const std::shared_ptr<const Checkpoint> ckpt = open_model_checkpoint(dir);
  w.checkpoint = ckpt;
  TensorBinder b(*ckpt, "model.", &w.owned_buffers);
  TensorBinder top(*ckpt, "", &w.owned_buffers);
  const int64_t h = c.hidden_size, V = c.vocab_size, B = ac.backbone_hidden_size;
  const int64_t nH = c.num_attention_heads;

  w.embed_tokens = b.matrix("embed_tokens.weight", {V, h});
  w.final_norm = b.vector("norm.weight", h);
  if (ac.tie_word_embeddings) {
    w.lm_head = w.embed_tokens;
    if (const TensorView* lm = top.find("lm_head.weight")) TensorBinder::check_shape(*lm, {V, h});
  } else {
    w.lm_head = top.matrix("lm_head.weight", {V, h});
  }
  w.pre_projection = top.matrix("pre_projection.weight", {h, 2 * B});
  w.post_projection = top.matrix("post_projection.weight", {B, h});
  w.layers.resize(static_cast<size_t>(c.num_hidden_layers));
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    const LayerSpec& s = c.layers[static_cast<size_t>(i)];
    LayerWeights& lw = w.layers[static_cast<size_t>(i)];
    const std::string p = "layers." + std::to_string(i) + ".";
    const int64_t hd = s.head_dim, I = s.intermediate_size;
    lw.input_layernorm = b.vector(p + "input_layernorm.weight", h);
    lw.post_attention_layernorm = b.vector(p + "post_attention_layernorm.weight", h);
    lw.pre_feedforward_layernorm = b.vector(p + "pre_feedforward_layernorm.weight", h);
    lw.post_feedforward_layernorm = b.vector(p + "post_feedforward_layernorm.weight", h);
    lw.q_proj = b.matrix(p + "self_attn.q_proj.weight", {nH * hd, h});
    lw.q_norm = b.vector(p + "self_attn.q_norm.weight", hd);
    lw.o_proj = b.matrix(p + "self_attn.o_proj.weight", {h, nH * hd});
    // Every assistant layer reads the target's K/V: stored k/v tensors would be unused.
    for (const char* unused :
         {"self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.k_norm.weight"}) {
      b.mark_used(p + unused);
    }
    lw.gate_proj = b.matrix(p + "mlp.gate_proj.weight", {I, h});
    lw.up_proj = b.matrix(p + "mlp.up_proj.weight", {I, h});
    lw.down_proj = b.matrix(p + "mlp.down_proj.weight", {h, I});
    lw.layer_scalar = b.scalar(p + "layer_scalar").value_or(1.0f);
  }
  if (ac.use_ordered_embeddings) {
    const int64_t C = ac.num_centroids;
    w.centroids = top.matrix("masked_embedding.centroids.weight", {C, h});
    w.token_ordering = top.index_vector("masked_embedding.token_ordering", V);
    // Each cluster's tokens are scattered to their ids: a repeated or out-of-range id would
    // make two logits share a slot or write outside the row.
    std::vector<uint8_t> seen(static_cast<size_t>(V), 0);
    for (size_t i = 0; i < w.token_ordering.size(); ++i) {
      const int32_t t = w.token_ordering[i];
      if (t < 0 || t >= V || seen[static_cast<size_t>(t)]++) {
        throw InputError(dir.string() + ": tensor 'masked_embedding.token_ordering' is not a " +
                         "permutation of the vocabulary (entry " + std::to_string(i) + " is " +
                         std::to_string(t) + ")");
      }
    }
  } else {
    top.mark_used("masked_embedding.centroids.weight");
    top.mark_used("masked_embedding.token_ordering");
  }
  size_t unknown = 0;
  std::string example;
  for (const auto& [name, v] : ckpt->tensors()) {
    if (b.used().count(name) || top.used().count(name)) continue;
    if (unknown++ == 0) example = name;
  }
  if (unknown) {
    GS_LOG_WARNING << dir.string() << ": ignoring " << unknown << " unexpected tensors, e.g. '"
                   << example << "'";
  }
  return w;
}

void quantize_assistant_weights(AssistantWeights& w, DType type, ThreadPool* pool) {
  const bool tied = w.lm_head.data == w.embed_tokens.data;
  std::vector<QuantizeTarget> todo = {{&w.embed_tokens, true},
                                      {&w.centroids, true},
                                      {&w.pre_projection, false},
                                      {&w.post_projection, false}};
  if (!tied) todo.push_back({&w.lm_head, true});
  for (LayerWeights& l : w.layers) {
    for (WeightMatrix* m : {&l.q_proj, &l.o_proj, &l.gate_proj, &l.up_proj, &l.down_proj}) {
      todo.push_back({m, false});
    }
  }
  quantize_weight_matrices(todo, type, pool, &w.owned_buffers, nullptr);
  if (tied) w.lm_head = w.embed_tokens;
}

std::array<int, kNumAttentionTypes> assistant_target_kv_layers(const AssistantConfig& assistant,
                                                               const TextConfig& target) {
  const TextConfig& d = assistant.text;
  if (assistant.backbone_hidden_size != target.hidden_size) {
    throw InputError(
        "assistant backbone_hidden_size " + std::to_string(assistant.backbone_hidden_size) +
        " differs from the target's hidden_size " + std::to_string(target.hidden_size));
  }
  if (d.vocab_size != target.vocab_size) {
    throw InputError("assistant vocab_size " + std::to_string(d.vocab_size) +
                     " differs from the target's " + std::to_string(target.vocab_size));
  }
  std::array<int, kNumAttentionTypes> src = {-1, -1};
  for (const LayerSpec& s : target.layers) {
    if (!s.kv_shared()) src[static_cast<int>(s.type)] = s.layer_index;
  }
  for (const LayerSpec& s : d.layers) {
    const int t = static_cast<int>(s.type);
    if (src[t] < 0) {
      throw InputError("assistant layer " + std::to_string(s.layer_index) + " is " + type_name(t) +
                       " but the target has no " + type_name(t) + " layer with its own KV cache");
    }
    const LayerSpec& ts = target.layers[static_cast<size_t>(src[t])];
    if (s.head_dim != ts.head_dim || s.num_kv_heads != ts.num_kv_heads) {
      throw InputError("assistant layer " + std::to_string(s.layer_index) + " (" + type_name(t) +
                       ") expects head_dim " + std::to_string(s.head_dim) + " with " +
                       std::to_string(s.num_kv_heads) + " KV heads, but target layer " +
                       std::to_string(src[t]) + " caches head_dim " + std::to_string(ts.head_dim) +
                       " with " + std::to_string(ts.num_kv_heads) + " KV heads");
    }
  }
  return src;
}

struct Gemma4Assistant::Scratch {
  AlignedVector<float> input, x, normed, q, attn, proj, gate, up, ffn;
  std::vector<std::vector<float>> inv_freq;  // per layer: head_dim / 2
  std::vector<int> rotated_pairs;            // per layer
  std::vector<float> cos, sin;
  std::vector<cpu::AttentionSeq> seqs;
  std::vector<cpu::KeyRange> ranges;
  std::vector<int32_t> order;  // masked head: centroid ranking
  cpu::AttentionWorkspace attention;
};

Gemma4Assistant::Gemma4Assistant(AssistantWeights weights, const ModelWeights& target,
                                 std::shared_ptr<ThreadPool> pool)
    : w_(std::move(weights)),
      target_(target),
      pool_(std::move(pool)),
      scratch_(std::make_unique<Scratch>()) {
  if (target.tensor_parallel.size > 1) {
    throw InputError(
        "the MTP assistant needs the whole target model (tensor parallelism splits "
        "its embedding table)");
  }
  kv_layers_ = assistant_target_kv_layers(w_.config, target.config.text);
  const TextConfig& c = w_.config.text;
  for (const LayerSpec& s : c.layers) {
    const RopeSpec& rope = c.rope[static_cast<int>(s.type)];
    const int half = s.head_dim / 2;
    int rotated = half;
    if (rope.rope_type == "proportional") {
      rotated = std::clamp(
          static_cast<int>(std::floor(rope.partial_rotary_factor * s.head_dim / 2.0)), 0, half);
    }
    std::vector<float> inv(static_cast<size_t>(half));
    cpu::rope_inv_freq(s.head_dim, rope.theta, rotated, rope.factor, inv.data());
    scratch_->inv_freq.push_back(std::move(inv));
    scratch_->rotated_pairs.push_back(rotated);
  }
}

Gemma4Assistant::~Gemma4Assistant() = default;

void Gemma4Assistant::linear(const WeightMatrix& w, const float* x, int64_t rows, float* y) {
  cpu::MatmulArgs a;
  a.x = x;
  a.ldx = static_cast<size_t>(w.cols);
  a.w = w.data;
  a.w_dtype = w.dtype;
  a.w_layout = w.layout;
  a.x_perm = w.x_perm();
  a.y = y;
  a.ldy = static_cast<size_t>(w.rows);
  a.t = rows;
  a.k = w.cols;
  a.n = w.rows;
  cpu::matmul(a, pool_.get());
}

void Gemma4Assistant::embed_inputs(std::span<const DraftInput> batch) {
  Scratch& s = *scratch_;
  const int64_t B = w_.config.backbone_hidden_size;
  const int64_t V = target_.embed_tokens.rows;
  // The target's own input scaling (Gemma4TextScaledWordEmbedding: sqrt of its width).
  const float scale = static_cast<float>(std::sqrt(static_cast<double>(B)));
  s.input.resize(batch.size() * static_cast<size_t>(2 * B));
  for (size_t i = 0; i < batch.size(); ++i) {
    const DraftInput& in = batch[i];
    const std::string who = "draft sequence " + std::to_string(i);
    if (in.token < 0 || in.token >= V) {
      throw InputError(who + ": token " + std::to_string(in.token) + " is outside the vocabulary");
    }
    if (in.hidden == nullptr) throw InputError(who + ": no hidden state");
    if (in.position < 1) {
      throw InputError(who + ": position " + std::to_string(in.position) +
                       " leaves no target KV to attend to (needs >= 1)");
    }
    float* row = &s.input[i * static_cast<size_t>(2 * B)];
    matrix_row_f32(target_.embed_tokens, in.token, row);
    for (int64_t j = 0; j < B; ++j) row[j] *= scale;
    std::memcpy(row + B, in.hidden, static_cast<size_t>(B) * sizeof(float));
  }
}

void Gemma4Assistant::layer(int l, std::span<const DraftInput> batch, const KvCache& cache) {
  Scratch& s = *scratch_;
  const TextConfig& c = w_.config.text;
  const LayerSpec& spec = c.layers[static_cast<size_t>(l)];
  const LayerWeights& lw = w_.layers[static_cast<size_t>(l)];
  const auto R = static_cast<int64_t>(batch.size());
  const int64_t h = c.hidden_size;
  const int hd = spec.head_dim, nH = c.num_attention_heads;
  const int64_t qw = static_cast<int64_t>(nH) * hd;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const int t = static_cast<int>(spec.type);

  s.normed.resize(static_cast<size_t>(R * h));
  s.q.resize(static_cast<size_t>(R * qw));
  cpu::rms_norm_rows(s.x.data(), h, lw.input_layernorm.data(), s.normed.data(), h, R, h, eps);
  linear(lw.q_proj, s.normed.data(), R, s.q.data());
  const auto& inv = s.inv_freq[static_cast<size_t>(l)];
  const int rotated = s.rotated_pairs[static_cast<size_t>(l)];
  s.cos.resize(inv.size());
  s.sin.resize(inv.size());
  for (int64_t r = 0; r < R; ++r) {
    cpu::rope_cos_sin(batch[static_cast<size_t>(r)].position, inv.data(),
                      static_cast<int>(inv.size()), s.cos.data(), s.sin.data());
    for (int head = 0; head < nH; ++head) {
      float* qh = &s.q[static_cast<size_t>(r * qw + head * hd)];
      cpu::rms_norm(qh, lw.q_norm.data(), qh, hd, eps);
      cpu::apply_rope(qh, hd, s.cos.data(), s.sin.data(), rotated);
    }
  }

  // Each query sits at the newest token's position, whose K/V the target has not written: it
  // sees the keys before it (the last sliding_window - 1 on sliding layers, as the target's
  // own query at that position would).
  const int src = kv_layers_[static_cast<size_t>(t)];
  const cpu::PagedKv kv = cache.paged(src);
  cpu::AttentionShape shape;
  shape.num_heads = nH;
  shape.num_kv_heads = spec.num_kv_heads;
  shape.head_dim = hd;
  shape.scale = 1.0f;  // q and k are RMS-normed, as in the target
  s.seqs.resize(static_cast<size_t>(R));
  s.ranges.resize(static_cast<size_t>(R));
  const int window = spec.type == AttentionType::kSliding ? c.sliding_window : 0;
  for (int64_t r = 0; r < R; ++r) {
    const DraftInput& in = batch[static_cast<size_t>(r)];
    const auto table = in.block_tables[static_cast<size_t>(t)];
    if (static_cast<int64_t>(table.size()) * cache.block_size() < in.position) {
      throw InputError("draft sequence " + std::to_string(r) + ": the " + type_name(t) +
                       " block table covers " +
                       std::to_string(table.size() * static_cast<size_t>(cache.block_size())) +
                       " positions, fewer than its " + std::to_string(in.position));
    }
    const int32_t begin = window > 0 ? std::max(0, in.position - window + 1) : 0;
    s.ranges[static_cast<size_t>(r)] = {begin, in.position};
    cpu::AttentionSeq& as = s.seqs[static_cast<size_t>(r)];
    as.q_row = r;
    as.num_queries = 1;
    as.first_pos = in.position;
    as.block_table = table;
    as.key_ranges = std::span<const cpu::KeyRange>(&s.ranges[static_cast<size_t>(r)], 1);
  }
  if (!cpu::attention_blocks_valid(kv, shape, s.seqs)) {
    throw InputError("draft batch: a block table names a block outside the target's cache");
  }
  s.attn.resize(static_cast<size_t>(R * qw));
  cpu::paged_attention(s.q.data(), qw, kv, shape, s.seqs, s.attn.data(), qw, pool_.get(),
                       &s.attention);

  s.proj.resize(static_cast<size_t>(R * h));
  linear(lw.o_proj, s.attn.data(), R, s.proj.data());
  cpu::rms_norm_rows(s.proj.data(), h, lw.post_attention_layernorm.data(), s.proj.data(), h, R, h,
                     eps);
  for (int64_t i = 0; i < R * h; ++i) s.x[static_cast<size_t>(i)] += s.proj[static_cast<size_t>(i)];

  const int64_t I = spec.intermediate_size;
  s.gate.resize(static_cast<size_t>(R * I));
  s.up.resize(static_cast<size_t>(R * I));
  s.ffn.resize(static_cast<size_t>(R * h));
  cpu::rms_norm_rows(s.x.data(), h, lw.pre_feedforward_layernorm.data(), s.normed.data(), h, R, h,
                     eps);
  linear(lw.gate_proj, s.normed.data(), R, s.gate.data());
  linear(lw.up_proj, s.normed.data(), R, s.up.data());
  cpu::gelu_tanh_mul(s.gate.data(), s.up.data(), s.gate.data(), R * I);
  linear(lw.down_proj, s.gate.data(), R, s.ffn.data());
  cpu::rms_norm_rows(s.ffn.data(), h, lw.post_feedforward_layernorm.data(), s.ffn.data(), h, R, h,
                     eps);
  // The learned scalar scales the whole residual stream, as in the target's layers.
  for (int64_t i = 0; i < R * h; ++i) {
    s.x[static_cast<size_t>(i)] =
        (s.x[static_cast<size_t>(i)] + s.ffn[static_cast<size_t>(i)]) * lw.layer_scalar;
  }
}

void Gemma4Assistant::logits(DraftOutput* out) {
  Scratch& s = *scratch_;
  const AssistantConfig& ac = w_.config;
  const int64_t R = out->rows, h = ac.text.hidden_size, V = ac.text.vocab_size;
  out->logits.resize(static_cast<size_t>(R * V));
  if (!ac.use_ordered_embeddings) {
    linear(w_.lm_head, s.normed.data(), R, out->logits.data());
    if (ac.text.final_logit_softcapping && *ac.text.final_logit_softcapping > 0) {
      cpu::soft_cap(out->logits.data(), R * V,
                    static_cast<float>(*ac.text.final_logit_softcapping));
    }
    return;
  }
  // Centroid head: only the tokens of the top-k clusters are scored; every other logit is
  // the row's smallest scored logit minus 1 (HF takes that minimum over the whole batch; per
  // row keeps a sequence's logits independent of its batch, and the argmax is the same).
  const int64_t C = ac.num_centroids, K = ac.vocab_size_per_centroid();
  const int top_k = ac.centroid_intermediate_top_k;
  std::vector<float> centroid_logits(static_cast<size_t>(R * C));
  linear(w_.centroids, s.normed.data(), R, centroid_logits.data());
  std::vector<float> scored(static_cast<size_t>(top_k * K));
  for (int64_t r = 0; r < R; ++r) {
    const float* cl = &centroid_logits[static_cast<size_t>(r * C)];
    s.order.resize(static_cast<size_t>(C));
    std::iota(s.order.begin(), s.order.end(), 0);
    std::partial_sort(
        s.order.begin(), s.order.begin() + top_k, s.order.end(),
        [cl](int32_t a, int32_t b) { return cl[a] > cl[b] || (cl[a] == cl[b] && a < b); });
    const float* x = &s.normed[static_cast<size_t>(r * h)];
    // Each scored token's dot product is one independent loop, so any split gives the same bits.
    const auto score = [&](size_t begin, size_t end) {
      std::vector<float> weights(static_cast<size_t>(h));
      for (size_t i = begin; i < end; ++i) {
        const int64_t k = static_cast<int64_t>(i) / K, j = static_cast<int64_t>(i) % K;
        const int32_t token = w_.token_ordering[static_cast<size_t>(s.order[k] * K + j)];
        matrix_row_f32(w_.lm_head, token, weights.data());
        float dot = 0.0f;
        for (int64_t e = 0; e < h; ++e) dot += x[e] * weights[static_cast<size_t>(e)];
        scored[i] = dot;
      }
    };
    if (pool_) {
      pool_->parallel_for(scored.size(), score);
    } else {
      score(0, scored.size());
    }
    const float lowest = *std::min_element(scored.begin(), scored.end());
    float* row = &out->logits[static_cast<size_t>(r * V)];
    std::fill(row, row + V, lowest - 1.0f);
    for (int k = 0; k < top_k; ++k) {
      for (int64_t j = 0; j < K; ++j) {
        row[w_.token_ordering[static_cast<size_t>(s.order[k] * K + j)]] =
            scored[static_cast<size_t>(k * K + j)];
      }
    }
  }
}

void Gemma4Assistant::step(std::span<const DraftInput> batch, const KvCache& target_cache,
                           DraftOutput* out) {
  Scratch& s = *scratch_;
  const AssistantConfig& ac = w_.config;
  const auto R = static_cast<int64_t>(batch.size());
  const int64_t h = ac.text.hidden_size, B = ac.backbone_hidden_size;
  out->rows = static_cast<int>(R);
  // Inputs first: a caller may pass hidden states that live in `out`.
  if (R > 0) embed_inputs(batch);
  out->logits.clear();
  out->hidden.clear();
  if (R == 0) return;
  s.x.resize(static_cast<size_t>(R * h));
  linear(w_.pre_projection, s.input.data(), R, s.x.data());
  for (int l = 0; l < ac.text.num_hidden_layers; ++l) layer(l, batch, target_cache);
  s.normed.resize(static_cast<size_t>(R * h));
  cpu::rms_norm_rows(s.x.data(), h, w_.final_norm.data(), s.normed.data(), h, R, h,
                     static_cast<float>(ac.text.rms_norm_eps));
  out->hidden.resize(static_cast<size_t>(R * B));
  linear(w_.post_projection, s.normed.data(), R, out->hidden.data());
  logits(out);
}

void Gemma4Assistant::draft_greedy(std::span<const DraftInput> batch, int k,
                                   const KvCache& target_cache, std::vector<int32_t>* tokens) {
  const size_t n = batch.size();
  const int64_t V = vocab_size(), B = w_.config.backbone_hidden_size;
  tokens->assign(n * static_cast<size_t>(std::max(k, 0)), 0);
  std::vector<DraftInput> inputs(batch.begin(), batch.end());
  DraftOutput out, prev;
  for (int j = 0; j < k; ++j) {
    step(inputs, target_cache, &out);
    for (size_t i = 0; i < n; ++i) {
      const int32_t token = first_argmax(&out.logits[i * static_cast<size_t>(V)], V);
      (*tokens)[i * static_cast<size_t>(k) + static_cast<size_t>(j)] = token;
      inputs[i].token = token;
      inputs[i].hidden = &out.hidden[i * static_cast<size_t>(B)];
    }
    std::swap(out, prev);  // `inputs` point into the output just produced
  }
}

}  // namespace gemmaserve
