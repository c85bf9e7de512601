// One Gemma 4 decoder layer over the batch's rows: attention (own or shared KV), dense MLP,
// optional MoE beside it, per-layer-input injection and the layer scalar.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/ops.h"
#include "model/gemma4_forward.h"

namespace gemmaserve::detail {
namespace {

void add_into(float* x, const float* d, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] += d[i];
}

}  // namespace

void Gemma4Forward::layer(int l, std::span<const SequenceInput> batch, KvCache& cache) {
  attention_block(l, batch, cache);
  feed_forward_block(l);
  if (cfg_.hidden_size_per_layer_input > 0) per_layer_input_block(l);
  // The learned scalar scales the whole residual stream, not just this layer's update.
  const float s = w_.layers[static_cast<size_t>(l)].layer_scalar;
  const size_t n = static_cast<size_t>(num_rows()) * static_cast<size_t>(cfg_.hidden_size);
  for (size_t i = 0; i < n; ++i) ws_.x[i] *= s;
}

void Gemma4Forward::attention_block(int l, std::span<const SequenceInput> batch, KvCache& cache) {
  const LayerSpec& spec = cfg_.layers[static_cast<size_t>(l)];
  const LayerWeights& lw = w_.layers[static_cast<size_t>(l)];
  const int64_t R = num_rows();
  const int64_t H = cfg_.hidden_size;
  const int hd = spec.head_dim;
  const int nH = cfg_.num_attention_heads;
  const int nKV = spec.num_kv_heads;
  const int64_t qw = static_cast<int64_t>(nH) * hd;
  const int64_t kvw = static_cast<int64_t>(nKV) * hd;
  const float eps = plan_.eps;
  const int group = plan_.layer_rope_group[static_cast<size_t>(l)];
  const RopeGroup& rope = plan_.rope_groups[static_cast<size_t>(group)];
  const int64_t half = hd / 2;
  const AlignedVector<float>& cos_t = ws_.cos[static_cast<size_t>(group)];
  const AlignedVector<float>& sin_t = ws_.sin[static_cast<size_t>(group)];

  ws_.normed.resize(static_cast<size_t>(R * H));
  ws_.q.resize(static_cast<size_t>(R * qw));
  cpu::rms_norm_rows(ws_.x.data(), H, lw.input_layernorm.data(), ws_.normed.data(), H, R, H, eps);
  const bool own_kv = !spec.kv_shared();
  read_next(weight_bytes({&lw.o_proj}));
  const LinearOut q_out{&lw.q_proj, ws_.q.data(), static_cast<size_t>(qw)};
  if (own_kv) {
    ws_.k.resize(static_cast<size_t>(R * kvw));
    ws_.v.resize(static_cast<size_t>(R * kvw));
    const LinearOut k_out{&lw.k_proj, ws_.k.data(), static_cast<size_t>(kvw)};
    if (spec.k_eq_v) {
      linear_group({q_out, k_out}, ws_.normed.data(), H, R);
      // V is the raw k_proj output, taken before k_norm and RoPE.
      std::copy(ws_.k.begin(), ws_.k.begin() + R * kvw, ws_.v.begin());
    } else {
      const LinearOut v_out{&lw.v_proj, ws_.v.data(), static_cast<size_t>(kvw)};
      linear_group({q_out, k_out, v_out}, ws_.normed.data(), H, R);
    }
  } else {
    linear_group({q_out}, ws_.normed.data(), H, R);
  }

  // Per-head norms and RoPE; each row's new K/V then go into its cache slot (converted to
  // the cache dtype), in the same parallel pass: rows of a step never share a slot.
  const int t = static_cast<int>(spec.type);
  const int bs = cache.block_size();
  std::vector<int32_t>& row_slot = ws_.row_slot;
  if (own_kv) {
    row_slot.resize(static_cast<size_t>(R));
    for (const SeqRows& sr : ws_.rows) {
      const auto table = batch[static_cast<size_t>(sr.seq)].block_tables[t];
      for (int32_t i = 0; i < sr.count; ++i) {
        const int32_t pos = sr.first_pos + i;
        row_slot[static_cast<size_t>(sr.row + i)] =
            table[static_cast<size_t>(pos / bs)] * bs + pos % bs;
      }
    }
  }
  for_rows(R, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* c = &cos_t[static_cast<size_t>(r * half)];
      const float* s = &sin_t[static_cast<size_t>(r * half)];
      for (int h = 0; h < nH; ++h) {
        float* qh = &ws_.q[static_cast<size_t>(r * qw + h * hd)];
        cpu::rms_norm(qh, lw.q_norm.data(), qh, hd, eps);
        cpu::apply_rope(qh, hd, c, s, rope.rotated_pairs);
      }
      if (!own_kv) continue;
      for (int h = 0; h < nKV; ++h) {
        float* kh = &ws_.k[static_cast<size_t>(r * kvw + h * hd)];
        float* vh = &ws_.v[static_cast<size_t>(r * kvw + h * hd)];
        cpu::rms_norm(kh, lw.k_norm.data(), kh, hd, eps);
        cpu::apply_rope(kh, hd, c, s, rope.rotated_pairs);
        cpu::rms_norm(vh, nullptr, vh, hd, eps);
      }
      const int32_t slot = row_slot[static_cast<size_t>(r)];
      cache.write(l, slot / bs, slot % bs, &ws_.k[static_cast<size_t>(r * kvw)],
                  &ws_.v[static_cast<size_t>(r * kvw)]);
    }
  });

  const cpu::PagedKv kv = cache.paged(spec.kv_source_layer);
  cpu::AttentionShape shape;
  shape.num_heads = nH;
  shape.num_kv_heads = nKV;
  shape.head_dim = hd;
  shape.window = spec.type == AttentionType::kSliding ? cfg_.sliding_window : 0;
  shape.scale = 1.0f;  // q and k are RMS-normed; Gemma 4 uses no 1/sqrt(d) scaling
  ws_.attn_seqs.clear();
  for (const SeqRows& sr : ws_.rows) {
    if (sr.count == 0) continue;
    cpu::AttentionSeq as;
    as.q_row = sr.row;
    as.num_queries = sr.count;
    as.first_pos = sr.first_pos;
    as.block_table = batch[static_cast<size_t>(sr.seq)].block_tables[t];
    ws_.attn_seqs.push_back(as);
  }
  set_vision_key_ranges(batch, shape.window);
  ws_.attn.resize(static_cast<size_t>(R * qw));
  cpu::paged_attention(ws_.q.data(), qw, kv, shape, ws_.attn_seqs, ws_.attn.data(), qw, pool_,
                       &ws_.attention);

  ws_.proj.resize(static_cast<size_t>(R * H));
  read_next(weight_bytes({&lw.gate_proj, &lw.up_proj}));
  linear(lw.o_proj, 0, H, ws_.attn.data(), qw, R, ws_.proj.data(), H);
  all_reduce_rows(ws_.proj, R);
  cpu::rms_norm_rows(ws_.proj.data(), H, lw.post_attention_layernorm.data(), ws_.proj.data(), H, R,
                     H, eps);
  add_into(ws_.x.data(), ws_.proj.data(), static_cast<size_t>(R * H));
}

void Gemma4Forward::feed_forward_block(int l) {
  const LayerSpec& spec = cfg_.layers[static_cast<size_t>(l)];
  const LayerWeights& lw = w_.layers[static_cast<size_t>(l)];
  const int64_t R = num_rows();
  const int64_t H = cfg_.hidden_size;
  const int64_t I = spec.intermediate_size;
  const float eps = plan_.eps;

  ws_.normed.resize(static_cast<size_t>(R * H));
  ws_.gate.resize(static_cast<size_t>(R * I));
  ws_.up.resize(static_cast<size_t>(R * I));
  ws_.ffn.resize(static_cast<size_t>(R * H));
  cpu::rms_norm_rows(ws_.x.data(), H, lw.pre_feedforward_layernorm.data(), ws_.normed.data(), H, R,
                     H, eps);
  read_next(weight_bytes({&lw.down_proj}));
  linear_group({{&lw.gate_proj, ws_.gate.data(), static_cast<size_t>(I)},
                {&lw.up_proj, ws_.up.data(), static_cast<size_t>(I)}},
               ws_.normed.data(), H, R);
  for_elements(R * I, [&](int64_t b, int64_t e) {
    cpu::gelu_tanh_mul(&ws_.gate[static_cast<size_t>(b)], &ws_.up[static_cast<size_t>(b)],
                       &ws_.gate[static_cast<size_t>(b)], e - b);
  });
  read_next(cfg_.enable_moe_block                  ? WeightBytes{}
            : cfg_.hidden_size_per_layer_input > 0 ? weight_bytes({&lw.per_layer_input_gate})
                                                   : layer_first_weights(l + 1));
  linear(lw.down_proj, 0, H, ws_.gate.data(), I, R, ws_.ffn.data(), H);
  all_reduce_rows(ws_.ffn, R);

  if (cfg_.enable_moe_block) {
    // The dense MLP acts as an always-on shared expert with its own post-norm.
    cpu::rms_norm_rows(ws_.ffn.data(), H, lw.post_feedforward_layernorm_1.data(), ws_.ffn.data(), H,
                       R, H, eps);
    moe_block(l, R);
    all_reduce_rows(ws_.expert_sum, R);
    cpu::rms_norm_rows(ws_.expert_sum.data(), H, lw.post_feedforward_layernorm_2.data(),
                       ws_.expert_sum.data(), H, R, H, eps);
    add_into(ws_.ffn.data(), ws_.expert_sum.data(), static_cast<size_t>(R * H));
  }
  cpu::rms_norm_rows(ws_.ffn.data(), H, lw.post_feedforward_layernorm.data(), ws_.ffn.data(), H, R,
                     H, eps);
  add_into(ws_.x.data(), ws_.ffn.data(), static_cast<size_t>(R * H));
}

void Gemma4Forward::per_layer_input_block(int l) {
  const LayerWeights& lw = w_.layers[static_cast<size_t>(l)];
  const int64_t R = num_rows();
  const int64_t H = cfg_.hidden_size;
  const int64_t P = cfg_.hidden_size_per_layer_input;
  const int64_t LP = static_cast<int64_t>(cfg_.num_hidden_layers) * P;
  ws_.ple_gate.resize(static_cast<size_t>(R * P));
  ws_.proj.resize(static_cast<size_t>(R * H));
  read_next(weight_bytes({&lw.per_layer_projection}));
  linear(lw.per_layer_input_gate, 0, P, ws_.x.data(), H, R, ws_.ple_gate.data(), P);
  for (int64_t r = 0; r < R; ++r) {
    cpu::gelu_tanh_mul_inplace(&ws_.ple_gate[static_cast<size_t>(r * P)],
                               &ws_.ple[static_cast<size_t>(r * LP + l * P)], P);
  }
  read_next(layer_first_weights(l + 1));
  linear(lw.per_layer_projection, 0, H, ws_.ple_gate.data(), P, R, ws_.proj.data(), H);
  cpu::rms_norm_rows(ws_.proj.data(), H, lw.post_per_layer_input_norm.data(), ws_.proj.data(), H, R,
                     H, plan_.eps);
  add_into(ws_.x.data(), ws_.proj.data(), static_cast<size_t>(R * H));
}

}  // namespace gemmaserve::detail
