// Forward-pass orchestration: batch validation, embeddings (incl. per-layer embeddings), RoPE
// tables, row compaction for KV-shared layers, final norm and LM head.

#include "model/gemma4_forward.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "core/error.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/interleave.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"

namespace gemmaserve::detail {
namespace {

std::string seq_name(size_t i) { return "batch sequence " + std::to_string(i); }

// Keeps rows `keep` (ascending) of a [rows, width] buffer, in place.
template <typename T, typename A>
void gather_rows_inplace(std::vector<T, A>& buf, size_t width, const std::vector<int64_t>& keep) {
  if (width == 0) return;
  for (size_t i = 0; i < keep.size(); ++i) {
    const auto src = static_cast<size_t>(keep[i]);
    if (src != i) std::memmove(&buf[i * width], &buf[src * width], width * sizeof(T));
  }
}

}  // namespace

Gemma4Plan make_gemma4_plan(const ModelWeights& weights) {
  const TextConfig& c = weights.config.text;
  Gemma4Plan plan;
  plan.eps = static_cast<float>(c.rms_norm_eps);
  if (c.use_bidirectional_attention == "all") {
    throw InputError("use_bidirectional_attention \"all\" (encoder mode) is not supported");
  }
  if (static_cast<int>(c.layers.size()) != c.num_hidden_layers ||
      weights.layers.size() != c.layers.size()) {
    throw InputError("model weights do not match the configured layer count");
  }
  if (c.use_bidirectional_attention == "vision") {
    plan.vision_mask = weights.config.family == ModelFamily::kGemma4Unified
                           ? VisionBlockMask::kWholeBlock
                           : VisionBlockMask::kSlidingLayers;
  }
  const ModelConfig& mc = weights.config;
  const std::optional<int> placeholders[] = {mc.image_token_id, mc.video_token_id,
                                             mc.audio_token_id};
  for (size_t i = 0; i < plan.placeholder_ids.size(); ++i) {
    plan.placeholder_ids[i] = placeholders[i].value_or(-1);
  }
  plan.first_shared = c.num_hidden_layers;
  for (const LayerSpec& s : c.layers) {
    if (s.kv_shared()) plan.first_shared = std::min(plan.first_shared, s.layer_index);
    plan.type_used[static_cast<int>(s.type)] = true;
    if (s.head_dim % 2 != 0) {
      throw InputError("layer " + std::to_string(s.layer_index) + ": head_dim " +
                       std::to_string(s.head_dim) + " must be even for RoPE");
    }
    // RoPE tables are shared by layers of one (type, head_dim).
    const RopeSpec& rope = c.rope[static_cast<int>(s.type)];
    const int half = s.head_dim / 2;
    int rotated = half;
    if (rope.rope_type == "proportional") {
      rotated = static_cast<int>(std::floor(rope.partial_rotary_factor * s.head_dim / 2.0));
      rotated = std::clamp(rotated, 0, half);
    } else if (rope.rope_type != "default") {
      throw InputError("rope_type '" + rope.rope_type + "' is not supported");
    }
    int group = -1;
    for (size_t g = 0; g < plan.rope_groups.size(); ++g) {
      const RopeGroup& rg = plan.rope_groups[g];
      if (rg.head_dim == s.head_dim && rg.rotated_pairs == rotated &&
          rg.type == static_cast<int>(s.type)) {
        group = static_cast<int>(g);
      }
    }
    if (group < 0) {
      RopeGroup rg;
      rg.head_dim = s.head_dim;
      rg.rotated_pairs = rotated;
      rg.type = static_cast<int>(s.type);
      rg.inv_freq.resize(static_cast<size_t>(half));
      cpu::rope_inv_freq(s.head_dim, rope.theta, rotated, rope.factor, rg.inv_freq.data());
      plan.rope_groups.push_back(std::move(rg));
      group = static_cast<int>(plan.rope_groups.size()) - 1;
    }
    plan.layer_rope_group.push_back(group);
  }
  return plan;
}

int64_t Gemma4Forward::num_rows() const {
  int64_t n = 0;
  for (const SeqRows& r : ws_.rows) n += r.count;
  return n;
}

void Gemma4Forward::for_rows(int64_t rows, FunctionRef<void(int64_t, int64_t)> fn) {
  if (pool_ == nullptr || rows < 2) {
    fn(0, rows);
    return;
  }
  pool_->parallel_for(static_cast<size_t>(rows), [&](size_t b, size_t e) {
    fn(static_cast<int64_t>(b), static_cast<int64_t>(e));
  });
}

void Gemma4Forward::for_elements(int64_t n, FunctionRef<void(int64_t, int64_t)> fn) {
  // Below this a section's hand-over costs more than the half of the work it moves.
  constexpr int64_t kMinParallel = 4096;
  if (pool_ == nullptr || n < kMinParallel) {
    fn(0, n);
    return;
  }
  pool_->parallel_for_grain(static_cast<size_t>(n), 64, [&](size_t b, size_t e) {
    fn(static_cast<int64_t>(b), static_cast<int64_t>(e));
  });
}

cpu::MatmulArgs Gemma4Forward::matmul_args(const WeightMatrix& w, int64_t row_begin, int64_t rows,
                                           const float* x, size_t ldx, int64_t t, float* y,
                                           size_t ldy, cpu::MatmulPrecision precision) const {
  cpu::MatmulArgs a;
  a.x = x;
  a.ldx = ldx;
  a.w = static_cast<const std::byte*>(w.data) +
        static_cast<size_t>(row_begin) * dtype_row_bytes(w.dtype, w.cols);
  a.w_dtype = w.dtype;
  a.w_layout = w.layout;
  a.x_perm = w.x_perm();
  if (w.layout == WeightLayout::kInterleaved16 &&
      (row_begin % cpu::kInterleaveRows != 0 || rows % cpu::kInterleaveRows != 0)) {
    throw std::logic_error(w.name + ": interleaved rows taken from a row that starts no group");
  }
  a.y = y;
  a.ldy = ldy;
  a.t = t;
  a.k = w.cols;
  a.n = rows;
  a.precision = precision;
  return a;
}

void Gemma4Forward::linear(const WeightMatrix& w, int64_t row_begin, int64_t rows, const float* x,
                           size_t ldx, int64_t t, float* y, size_t ldy) {
  linear(w, row_begin, rows, x, ldx, t, y, ldy, precision_);
}

Gemma4Forward::WeightBytes Gemma4Forward::weight_bytes(
    std::initializer_list<const WeightMatrix*> run) {
  const auto bytes = [](const WeightMatrix& m) {
    return static_cast<size_t>(m.rows) * dtype_row_bytes(m.dtype, m.cols);
  };
  const WeightMatrix& first = **run.begin();
  if (!first) return {};
  const auto* start = static_cast<const std::byte*>(first.data);
  const std::byte* end = start + bytes(first);
  for (auto it = run.begin() + 1; it != run.end() && **it; ++it) {
    const auto* p = static_cast<const std::byte*>((*it)->data);
    if (p < end || p > end + 64) break;  // not the next one in memory (64-byte alignment)
    end = p + bytes(**it);
  }
  return {start, static_cast<size_t>(end - start)};
}

Gemma4Forward::WeightBytes Gemma4Forward::layer_first_weights(int l) const {
  if (l >= cfg_.num_hidden_layers) return weight_bytes({&w_.lm_head});
  const LayerWeights& lw = w_.layers[static_cast<size_t>(l)];
  return weight_bytes({&lw.q_proj, &lw.k_proj, &lw.v_proj});
}

void Gemma4Forward::linear(const WeightMatrix& w, int64_t row_begin, int64_t rows, const float* x,
                           size_t ldx, int64_t t, float* y, size_t ldy,
                           cpu::MatmulPrecision precision) {
  const WeightBytes next = std::exchange(next_, {});
  if (t == 0 || rows == 0) return;
  cpu::MatmulArgs args = matmul_args(w, row_begin, rows, x, ldx, t, y, ldy, precision);
  args.next_w = next.data;
  args.next_bytes = next.bytes;
  cpu::matmul(args, pool_);
  calls_.fetch_add(1, std::memory_order_relaxed);
}

void Gemma4Forward::linear_group(std::initializer_list<LinearOut> outs, const float* x, size_t ldx,
                                 int64_t t) {
  const WeightBytes next = std::exchange(next_, {});
  if (t == 0 || outs.size() == 0) return;
  const WeightMatrix& first = *outs.begin()->w;
  bool shared = true;
  for (const LinearOut& o : outs)
    shared = shared && o.w->dtype == first.dtype && o.w->layout == first.layout &&
             o.w->cols == first.cols && o.w->input_perm == first.input_perm;
  if (!shared) {
    for (const LinearOut& o : outs) linear(*o.w, 0, o.w->rows, x, ldx, t, o.y, o.ldy);
    return;
  }
  std::array<cpu::MatmulArgs, 4> parts;
  size_t n = 0;
  for (const LinearOut& o : outs) {
    if (n == parts.size()) throw std::logic_error("linear_group: more than 4 matrices");
    parts[n++] = matmul_args(*o.w, 0, o.w->rows, x, ldx, t, o.y, o.ldy, precision_);
  }
  parts[0].next_w = next.data;
  parts[0].next_bytes = next.bytes;
  cpu::matmul_group(std::span<const cpu::MatmulArgs>(parts.data(), n), pool_);
  calls_.fetch_add(n, std::memory_order_relaxed);
}

void Gemma4Forward::validate(std::span<const SequenceInput> batch, const KvCache& cache) const {
  const int V = cfg_.vocab_size;
  const int P = cfg_.hidden_size_per_layer_input;
  const int V_ple = cfg_.vocab_size_per_layer_input;
  for (size_t i = 0; i < batch.size(); ++i) {
    const SequenceInput& s = batch[i];
    if (s.tokens.empty()) throw InputError(seq_name(i) + " has no tokens");
    if (s.start_pos < 0) throw InputError(seq_name(i) + " has a negative start position");
    if (static_cast<int64_t>(s.start_pos) + static_cast<int64_t>(s.tokens.size()) >
        std::numeric_limits<int32_t>::max()) {
      throw InputError(seq_name(i) + " is too long");
    }
    for (int32_t id : s.tokens) {
      if (id < 0 || id >= V || (P > 0 && id >= V_ple)) {
        throw InputError(seq_name(i) + ": token id " + std::to_string(id) +
                         " is outside the vocabulary");
      }
    }
    const int32_t end = s.start_pos + static_cast<int32_t>(s.tokens.size());
    for (const EmbeddingRows& e : s.embeddings) {
      if (e.first_pos < 0 || e.count < 0 || (e.count > 0 && e.rows == nullptr)) {
        throw InputError(seq_name(i) + ": embedding rows need a position >= 0, a count >= 0 " +
                         "and data");
      }
    }
    for (const PositionRange& b : s.vision_blocks) {
      if (b.begin < 0 || b.end <= b.begin) {
        throw InputError(seq_name(i) + ": image block [" + std::to_string(b.begin) + ", " +
                         std::to_string(b.end) + ") is empty or negative");
      }
      // Its tokens see each other both ways, so all of them must be computed in one step.
      if (b.begin < end && b.end > s.start_pos && (b.begin < s.start_pos || b.end > end)) {
        throw InputError(seq_name(i) + ": image block [" + std::to_string(b.begin) + ", " +
                         std::to_string(b.end) + ") is split across steps (this step: [" +
                         std::to_string(s.start_pos) + ", " + std::to_string(end) + "))");
      }
    }
    for (int t = 0; t < kNumAttentionTypes; ++t) {
      if (!plan_.type_used[t]) continue;
      const auto table = s.block_tables[t];
      const int bs = cache.block_size();
      const int nb = cache.num_blocks(static_cast<AttentionType>(t));
      // Every new position is written by the cache-owning layers.
      for (int32_t b = s.start_pos / bs; b <= (end - 1) / bs; ++b) {
        if (static_cast<size_t>(b) >= table.size() || table[b] < 0 || table[b] >= nb) {
          throw InputError(seq_name(i) + ": block table (" + (t == 0 ? "sliding" : "full") +
                           " layers) has no valid block for logical block " + std::to_string(b));
        }
      }
      cpu::PagedKv kv;
      kv.block_size = bs;
      kv.num_blocks = nb;
      cpu::AttentionShape shape;
      shape.num_heads = 1;
      shape.num_kv_heads = 1;
      shape.window = t == static_cast<int>(AttentionType::kSliding) ? cfg_.sliding_window : 0;
      cpu::AttentionSeq seq;
      seq.num_queries = static_cast<int32_t>(s.tokens.size());
      seq.first_pos = s.start_pos;
      seq.block_table = table;
      if (!cpu::attention_blocks_valid(kv, shape, std::span<const cpu::AttentionSeq>(&seq, 1))) {
        throw InputError(seq_name(i) + ": block table (" + (t == 0 ? "sliding" : "full") +
                         " layers) does not cover the positions attention reads");
      }
    }
  }
}

int32_t Gemma4Forward::embedding_id(int32_t token) const {
  for (int32_t id : plan_.placeholder_ids) {
    if (token == id) return cfg_.pad_token_id;
  }
  return token;
}

void Gemma4Forward::embed(std::span<const SequenceInput> batch) {
  const int64_t H = cfg_.hidden_size;
  const int64_t T = static_cast<int64_t>(ws_.tokens.size());
  ws_.x.resize(static_cast<size_t>(T * H));
  const float scale = static_cast<float>(std::sqrt(static_cast<double>(H)));
  const size_t row_bytes = dtype_row_bytes(w_.embed_tokens.dtype, H);
  // Under tensor parallelism a rank holds the vocabulary rows [v0, v1): the others' rows are
  // zero here and the all-reduce adds exactly the one rank's row.
  const int64_t v0 = w_.tensor_parallel.vocab_begin, v1 = v0 + w_.embed_tokens.rows;
  for (int64_t t = 0; t < T; ++t) {
    float* xr = &ws_.x[static_cast<size_t>(t * H)];
    const int64_t id = ws_.tokens[t];
    if (id < v0 || id >= v1) {
      std::fill(xr, xr + H, 0.0f);
      continue;
    }
    if (w_.embed_tokens.layout == WeightLayout::kInterleaved16) {
      cpu::interleaved_row_to_f32(w_.embed_tokens.dtype, w_.embed_tokens.data, id - v0, H, xr);
    } else {
      const auto* src = static_cast<const std::byte*>(w_.embed_tokens.data) +
                        static_cast<size_t>(id - v0) * row_bytes;
      cpu::to_f32(w_.embed_tokens.dtype, src, xr, static_cast<size_t>(H));
    }
    for (int64_t i = 0; i < H; ++i) xr[i] *= scale;
  }
  all_reduce_rows(ws_.x, T);
  for (const SeqRows& r : ws_.rows) {
    for (const EmbeddingRows& e : batch[static_cast<size_t>(r.seq)].embeddings) {
      const int32_t b = std::max(e.first_pos, r.first_pos);
      const int32_t end = std::min(e.first_pos + e.count, r.first_pos + r.count);
      if (b >= end) continue;
      // Rows given by the caller replace the lookup; their per-layer token part is pad's.
      for (int32_t p = b; p < end; ++p) ws_.tokens[r.row + p - r.first_pos] = cfg_.pad_token_id;
      std::memcpy(&ws_.x[static_cast<size_t>((r.row + b - r.first_pos) * H)],
                  e.rows + static_cast<size_t>(b - e.first_pos) * static_cast<size_t>(H),
                  static_cast<size_t>((end - b) * H) * sizeof(float));
    }
  }

  const int64_t P = cfg_.hidden_size_per_layer_input;
  if (P <= 0) return;
  // Per-layer embeddings: (RMSNorm(proj(e) * H^-0.5) + table[id] * sqrt(P)) * 2^-0.5.
  const int64_t L = cfg_.num_hidden_layers;
  const int64_t LP = L * P;
  ws_.ple.resize(static_cast<size_t>(T * LP));
  ws_.ffn.resize(static_cast<size_t>(T * LP));
  read_next(layer_first_weights(0));
  linear(w_.per_layer_model_projection, 0, LP, ws_.x.data(), H, T, ws_.ffn.data(), LP);
  const float proj_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(H)));
  const float token_scale = static_cast<float>(std::sqrt(static_cast<double>(P)));
  const float sum_scale = static_cast<float>(1.0 / std::sqrt(2.0));
  const size_t ple_row_bytes = dtype_row_bytes(w_.embed_tokens_per_layer.dtype, LP);
  const float* norm_w = w_.per_layer_projection_norm.data();
  for_rows(T, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      float* ctx = &ws_.ffn[static_cast<size_t>(t * LP)];
      float* out = &ws_.ple[static_cast<size_t>(t * LP)];
      const auto* src = static_cast<const std::byte*>(w_.embed_tokens_per_layer.data) +
                        static_cast<size_t>(ws_.tokens[t]) * ple_row_bytes;
      cpu::to_f32(w_.embed_tokens_per_layer.dtype, src, out, static_cast<size_t>(LP));
      for (int64_t i = 0; i < LP; ++i) ctx[i] *= proj_scale;
      for (int64_t l = 0; l < L; ++l) cpu::rms_norm(ctx + l * P, norm_w, ctx + l * P, P, plan_.eps);
      for (int64_t i = 0; i < LP; ++i) out[i] = (ctx[i] + out[i] * token_scale) * sum_scale;
    }
  });
}

void Gemma4Forward::compute_rope_tables() {
  const int64_t R = num_rows();
  ws_.cos.resize(plan_.rope_groups.size());
  ws_.sin.resize(plan_.rope_groups.size());
  for (size_t g = 0; g < plan_.rope_groups.size(); ++g) {
    const RopeGroup& rg = plan_.rope_groups[g];
    const int64_t half = rg.head_dim / 2;
    ws_.cos[g].resize(static_cast<size_t>(R * half));
    ws_.sin[g].resize(static_cast<size_t>(R * half));
    for (int64_t r = 0; r < R; ++r) {
      cpu::rope_cos_sin(ws_.positions[r], rg.inv_freq.data(), rg.rotated_pairs,
                        &ws_.cos[g][static_cast<size_t>(r * half)],
                        &ws_.sin[g][static_cast<size_t>(r * half)]);
    }
  }
}

void Gemma4Forward::set_vision_key_ranges(std::span<const SequenceInput> batch, int window) {
  // Gemma 4 (the vision fixture): only sliding layers widen a block's range, to its later
  // tokens. Unified (its fixture): every layer, to the whole block whatever the window.
  const VisionBlockMask mask = plan_.vision_mask;
  if (mask == VisionBlockMask::kCausal) return;
  if (mask == VisionBlockMask::kSlidingLayers && window <= 0) return;
  size_t a = 0;  // attention seq of the current rows
  for (const SeqRows& r : ws_.rows) {
    if (r.count == 0) continue;
    cpu::AttentionSeq& as = ws_.attn_seqs[a++];
    const auto blocks = batch[static_cast<size_t>(r.seq)].vision_blocks;
    const int32_t first = r.first_pos, end = r.first_pos + r.count;
    bool any = false;
    for (const PositionRange& b : blocks) any = any || (b.begin < end && b.end > first);
    if (!any) continue;
    if (ws_.key_ranges.size() < ws_.positions.size()) ws_.key_ranges.resize(ws_.positions.size());
    const cpu::AttentionShape shape{0, 0, 0, window};
    for (int32_t i = 0; i < r.count; ++i) {
      cpu::KeyRange range = cpu::attention_key_range(as, shape, i);
      const int32_t pos = first + i;
      for (const PositionRange& b : blocks) {
        if (pos < b.begin || pos >= b.end) continue;
        range.end = std::max(range.end, b.end);
        if (mask == VisionBlockMask::kWholeBlock) range.begin = std::min(range.begin, b.begin);
      }
      ws_.key_ranges[static_cast<size_t>(r.row + i)] = range;
    }
    as.key_ranges = std::span<const cpu::KeyRange>(&ws_.key_ranges[static_cast<size_t>(r.row)],
                                                   static_cast<size_t>(r.count));
  }
}

void Gemma4Forward::keep_wanted_rows(std::span<const SequenceInput> batch) {
  ws_.keep.clear();
  int64_t next = 0;
  for (SeqRows& r : ws_.rows) {
    int32_t first = 0, count = 0;
    switch (batch[r.seq].logits) {
      case LogitsWanted::kNone:
        break;
      case LogitsWanted::kLast:
        if (r.count > 0) {
          first = r.count - 1;
          count = 1;
        }
        break;
      case LogitsWanted::kAll:
        count = r.count;
        break;
    }
    for (int32_t i = 0; i < count; ++i) ws_.keep.push_back(r.row + first + i);
    r.row = next;
    r.first_pos += first;
    r.count = count;
    next += count;
  }
  const auto R = static_cast<int64_t>(ws_.positions.size());
  if (static_cast<int64_t>(ws_.keep.size()) == R) return;  // already only wanted rows
  const size_t H = static_cast<size_t>(cfg_.hidden_size);
  gather_rows_inplace(ws_.x, H, ws_.keep);
  gather_rows_inplace(ws_.positions, 1, ws_.keep);
  ws_.positions.resize(ws_.keep.size());
  const size_t LP = static_cast<size_t>(cfg_.num_hidden_layers) * cfg_.hidden_size_per_layer_input;
  if (LP > 0) gather_rows_inplace(ws_.ple, LP, ws_.keep);
  for (size_t g = 0; g < plan_.rope_groups.size(); ++g) {
    const size_t half = static_cast<size_t>(plan_.rope_groups[g].head_dim / 2);
    gather_rows_inplace(ws_.cos[g], half, ws_.keep);
    gather_rows_inplace(ws_.sin[g], half, ws_.keep);
  }
}

void Gemma4Forward::logits(ForwardOutput* out) {
  const int64_t R = num_rows();
  const int64_t H = cfg_.hidden_size;
  // This rank's vocabulary rows (all of them without tensor parallelism).
  const int64_t V = w_.lm_head.rows;
  out->rows = static_cast<int>(R);
  if (R == 0) return;
  float* logits = out->logits.data();
  if (comm_) {
    ws_.local_logits.resize(static_cast<size_t>(R * V));
    logits = ws_.local_logits.data();
  } else {
    out->logits.resize(static_cast<size_t>(R * V));
    logits = out->logits.data();
  }
  ws_.normed.resize(static_cast<size_t>(R * H));
  cpu::rms_norm_rows(ws_.x.data(), H, w_.final_norm.data(), ws_.normed.data(), H, R, H, plan_.eps);
  if (out->return_hidden) out->hidden.assign(ws_.normed.begin(), ws_.normed.begin() + R * H);
  // The next step starts with the per-layer-input projection, or with layer 0.
  read_next(cfg_.hidden_size_per_layer_input > 0 ? weight_bytes({&w_.per_layer_model_projection})
                                                 : layer_first_weights(0));
  linear(w_.lm_head, 0, V, ws_.normed.data(), H, R, logits, V);
  if (cfg_.final_logit_softcapping && *cfg_.final_logit_softcapping > 0) {
    const float cap = static_cast<float>(*cfg_.final_logit_softcapping);
    for_elements(R * V, [&](int64_t b, int64_t e) { cpu::soft_cap(logits + b, e - b, cap); });
  }
  if (comm_) gather_logits(R, out);
}

void Gemma4Forward::all_reduce_rows(AlignedVector<float>& buf, int64_t rows) {
  if (!comm_) return;
  comm_->all_reduce_sum(std::span<float>(buf.data(), static_cast<size_t>(rows * cfg_.hidden_size)));
}

void Gemma4Forward::gather_logits(int64_t rows, ForwardOutput* out) {
  const TensorParallelShard& tp = w_.tensor_parallel;
  ws_.vocab_floats.resize(tp.vocab_counts.size());
  int64_t total = 0;
  for (size_t r = 0; r < tp.vocab_counts.size(); ++r) {
    ws_.vocab_floats[r] = tp.vocab_counts[r] * rows;
    total += ws_.vocab_floats[r];
  }
  const bool root = comm_->rank() == 0;
  if (root) ws_.gathered_logits.resize(static_cast<size_t>(total));
  comm_->gather(
      std::span<const float>(ws_.local_logits.data(), static_cast<size_t>(w_.lm_head.rows * rows)),
      ws_.vocab_floats, ws_.gathered_logits.data(), 0);
  if (!root) return;
  // Rank r's block is [rows, vocab_counts[r]]: its columns start at the ranks before it.
  const int64_t V = cfg_.vocab_size;
  out->logits.resize(static_cast<size_t>(rows * V));
  const float* src = ws_.gathered_logits.data();
  int64_t col = 0;
  for (int64_t count : tp.vocab_counts) {
    for (int64_t i = 0; i < rows; ++i) {
      std::memcpy(&out->logits[static_cast<size_t>(i * V + col)], src + i * count,
                  static_cast<size_t>(count) * sizeof(float));
    }
    src += rows * count;
    col += count;
  }
}

void Gemma4Forward::run(std::span<const SequenceInput> batch, KvCache& cache, ForwardOutput* out) {
  out->logits.clear();
  out->hidden.clear();
  out->rows = 0;
  validate(batch, cache);
  ws_.tokens.clear();
  ws_.positions.clear();
  ws_.rows.clear();
  for (size_t i = 0; i < batch.size(); ++i) {
    const SequenceInput& s = batch[i];
    SeqRows r;
    r.seq = static_cast<int32_t>(i);
    r.row = static_cast<int64_t>(ws_.tokens.size());
    r.count = static_cast<int32_t>(s.tokens.size());
    r.first_pos = s.start_pos;
    ws_.rows.push_back(r);
    for (size_t j = 0; j < s.tokens.size(); ++j) {
      ws_.tokens.push_back(embedding_id(s.tokens[j]));
      ws_.positions.push_back(s.start_pos + static_cast<int32_t>(j));
    }
  }
  if (ws_.tokens.empty()) return;
  embed(batch);
  compute_rope_tables();
  for (int l = 0; l < cfg_.num_hidden_layers; ++l) {
    // KV-shared layers write no cache, so only rows whose logits are wanted matter there.
    if (l == plan_.first_shared) keep_wanted_rows(batch);
    layer(l, batch, cache);
  }
  keep_wanted_rows(batch);
  logits(out);
}

}  // namespace gemmaserve::detail
