#include "model/gemma4_vision.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "core/error.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/ops.h"
#include "model/weight_matmul.h"

namespace gemmaserve {
namespace {

void clamp(float* x, int64_t n, float lo, float hi) {
  for (int64_t i = 0; i < n; ++i) x[i] = std::min(std::max(x[i], lo), hi);
}

bool bounded(float lo, float hi) { return std::isfinite(lo) || std::isfinite(hi); }

}  // namespace

// HF's pooler puts patch (x, y) into slot x / k + ((max_x + 1) / k) * (y / k) of
// num_patches / k² slots and padding patches (clamped to (0, 0), zero-valued) into slot 0; it
// keeps the slots something fell into, in slot order.
void Gemma4VisionEncoder::plan_pooling(const VisionConfig& c, std::span<const int32_t> positions,
                                       VisionPatchPlan* p) {
  if (positions.size() % 2 != 0) {
    throw InputError("image position ids must be (x, y) pairs; got " +
                     std::to_string(positions.size()) + " values");
  }
  const auto n = static_cast<int64_t>(positions.size() / 2);
  const int k = c.pooling_kernel_size;
  const int64_t window = static_cast<int64_t>(k) * k;
  if (n < window || n % window != 0) {
    throw InputError("an image of " + std::to_string(n) + " patches cannot be pooled " +
                     std::to_string(k) + "x" + std::to_string(k) +
                     ": the patch count (padding included) must be a positive multiple of " +
                     std::to_string(window));
  }
  p->xs.clear();
  p->ys.clear();
  p->slot.clear();
  p->rows.clear();
  int32_t max_x = 0;
  bool padding = false;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t x = positions[static_cast<size_t>(2 * i)];
    const int32_t y = positions[static_cast<size_t>(2 * i + 1)];
    if (x == -1 && y == -1) {
      padding = true;
      continue;
    }
    if (x < 0 || y < 0 || x >= c.position_embedding_size || y >= c.position_embedding_size) {
      throw InputError("image patch " + std::to_string(i) + " has position (" + std::to_string(x) +
                       ", " + std::to_string(y) + "), outside the position table (0.." +
                       std::to_string(c.position_embedding_size - 1) +
                       ", or (-1, -1) for padding)");
    }
    max_x = std::max(max_x, x);
    p->xs.push_back(x);
    p->ys.push_back(y);
    p->rows.push_back(i);
  }
  if (p->rows.empty()) throw InputError("an image has no patches (all are padding)");
  p->num_slots = static_cast<int32_t>(n / window);
  p->used.assign(static_cast<size_t>(p->num_slots), 0);
  for (size_t r = 0; r < p->rows.size(); ++r) {
    // k = 1: HF skips pooling and keeps the real patches in order.
    const int64_t slot =
        k == 1 ? static_cast<int64_t>(r)
               : p->xs[r] / k + static_cast<int64_t>((max_x + 1) / k) * (p->ys[r] / k);
    if (slot >= p->num_slots) {
      throw InputError("image patch " + std::to_string(p->rows[r]) + " at (" +
                       std::to_string(p->xs[r]) + ", " + std::to_string(p->ys[r]) +
                       ") falls outside the " + std::to_string(p->num_slots) +
                       " pooled soft tokens its patch count allows");
    }
    p->slot.push_back(static_cast<int32_t>(slot));
    p->used[static_cast<size_t>(slot)] = 1;
  }
  if (padding && k > 1) p->used[0] = 1;
  p->soft_tokens = static_cast<int>(std::count(p->used.begin(), p->used.end(), uint8_t{1}));
}

int vision_soft_tokens(const VisionConfig& config, std::span<const int32_t> positions) {
  VisionPatchPlan plan;
  Gemma4VisionEncoder::plan_pooling(config, positions, &plan);
  return plan.soft_tokens;
}

Gemma4VisionEncoder::Gemma4VisionEncoder(const ModelWeights& weights, ThreadPool* pool,
                                         cpu::MatmulPrecision precision)
    : w_(weights), cfg_(weights.config.vision.value()), pool_(pool), precision_(precision) {
  // Each axis gets HF's default frequencies over half the head: 1 / theta^(2i / (head_dim/2)).
  const int half = cfg_.head_dim / 2;
  inv_freq_.resize(static_cast<size_t>(half / 2));
  cpu::rope_inv_freq(half, cfg_.rope_theta, half / 2, 1.0, inv_freq_.data());
}

void Gemma4VisionEncoder::for_rows(int64_t rows, FunctionRef<void(int64_t, int64_t)> fn) {
  for_row_ranges(pool_, rows, fn);
}

void Gemma4VisionEncoder::matmul(const WeightMatrix& w, const float* x, int64_t ldx, int64_t t,
                                 float* y, int64_t ldy) {
  matmul_weights(w, x, ldx, t, y, ldy, precision_, pool_);
}

// Y = clamp(clamp(X) Wᵀ) for X with w.cols columns (contiguous rows).
void Gemma4VisionEncoder::linear(const ClippedLinear& c, const float* x, int64_t t, float* y) {
  const int64_t k = c.w.cols, n = c.w.rows;
  const bool clip = cfg_.use_clipped_linears;
  if (clip && bounded(c.input_min, c.input_max)) {
    clipped_.resize(static_cast<size_t>(t * k));
    std::memcpy(clipped_.data(), x, static_cast<size_t>(t * k) * sizeof(float));
    clamp(clipped_.data(), t * k, c.input_min, c.input_max);
    x = clipped_.data();
  }
  matmul(c.w, x, k, t, y, n);
  if (clip && bounded(c.output_min, c.output_max)) clamp(y, t * n, c.output_min, c.output_max);
}

void Gemma4VisionEncoder::embed_patches(const ImagePatches& image, VisionEncodeJob& job) {
  const VisionPatchPlan& plan = job.plan_;
  const int64_t n = job.num_patches();
  const int64_t hv = cfg_.hidden_size;
  const int64_t patch = w_.vision.input_proj.cols;
  const size_t all = image.positions.size() / 2;
  if (image.pixels.size() != all * static_cast<size_t>(patch)) {
    throw InputError("image pixel values hold " + std::to_string(image.pixels.size()) +
                     " floats; " + std::to_string(all) + " patches of " + std::to_string(patch) +
                     " (3 x patch_size²) expected");
  }
  // HF maps [0, 1] to [-1, 1] in the model (the processor does no mean/std normalisation).
  x_.resize(static_cast<size_t>(n * patch));
  for (int64_t r = 0; r < n; ++r) {
    const float* src =
        &image.pixels[static_cast<size_t>(plan.rows[static_cast<size_t>(r)] * patch)];
    float* dst = &x_[static_cast<size_t>(r * patch)];
    for (int64_t i = 0; i < patch; ++i) dst[i] = 2.0f * (src[i] - 0.5f);
  }
  AlignedVector<float>& hidden = job.h_;
  hidden.resize(static_cast<size_t>(n * hv));
  matmul(w_.vision.input_proj, x_.data(), patch, n, hidden.data(), hv);

  // Learned 2-D position: table[x] + table[S + y], added to the patch embedding.
  const WeightMatrix& table = w_.vision.position_table;
  const size_t row_bytes = dtype_row_bytes(table.dtype, hv);
  const auto* base = static_cast<const std::byte*>(table.data);
  const int64_t S = cfg_.position_embedding_size;
  for_rows(n, [&](int64_t b, int64_t e) {
    std::vector<float> px(static_cast<size_t>(hv)), py(static_cast<size_t>(hv));
    for (int64_t r = b; r < e; ++r) {
      const auto i = static_cast<size_t>(r);
      cpu::to_f32(table.dtype, base + static_cast<size_t>(plan.xs[i]) * row_bytes, px.data(),
                  static_cast<size_t>(hv));
      cpu::to_f32(table.dtype, base + static_cast<size_t>(S + plan.ys[i]) * row_bytes, py.data(),
                  static_cast<size_t>(hv));
      float* h = &hidden[static_cast<size_t>(r * hv)];
      for (int64_t d = 0; d < hv; ++d)
        h[d] += px[static_cast<size_t>(d)] + py[static_cast<size_t>(d)];
    }
  });

  // 2-D RoPE tables: the first half of each head turns with x, the second with y.
  const int64_t quarter = cfg_.head_dim / 4;
  job.cos_.resize(static_cast<size_t>(n * 2 * quarter));
  job.sin_.resize(job.cos_.size());
  for (int64_t r = 0; r < n; ++r) {
    const auto i = static_cast<size_t>(r);
    const size_t at = i * 2 * static_cast<size_t>(quarter);
    cpu::rope_cos_sin(plan.xs[i], inv_freq_.data(), static_cast<int>(quarter), &job.cos_[at],
                      &job.sin_[at]);
    cpu::rope_cos_sin(plan.ys[i], inv_freq_.data(), static_cast<int>(quarter),
                      &job.cos_[at + static_cast<size_t>(quarter)],
                      &job.sin_[at + static_cast<size_t>(quarter)]);
  }
  const int64_t qw = static_cast<int64_t>(cfg_.num_attention_heads) * cfg_.head_dim;
  const int64_t kvw = static_cast<int64_t>(cfg_.num_key_value_heads) * cfg_.head_dim;
  job.q_.resize(static_cast<size_t>(n * qw));
  job.k_.resize(static_cast<size_t>(n * kvw));
  job.v_.resize(static_cast<size_t>(n * kvw));
  job.attn_.resize(static_cast<size_t>(n * qw));
}

// Stage 1 of a layer: normed input, q/k/v projections, their norms and the 2-D RoPE.
void Gemma4VisionEncoder::attention_inputs(const VisionLayerWeights& l, VisionEncodeJob& job,
                                           int64_t b, int64_t e) {
  const int64_t rows = e - b;
  const int64_t hv = cfg_.hidden_size;
  const int hd = cfg_.head_dim;
  const int nh = cfg_.num_attention_heads, nkv = cfg_.num_key_value_heads;
  const int64_t qw = static_cast<int64_t>(nh) * hd, kvw = static_cast<int64_t>(nkv) * hd;
  const int64_t quarter = hd / 4;
  const auto eps = static_cast<float>(cfg_.rms_norm_eps);

  normed_.resize(static_cast<size_t>(rows * hv));
  cpu::rms_norm_rows(&job.h_[static_cast<size_t>(b * hv)], hv, l.input_layernorm.data(),
                     normed_.data(), hv, rows, hv, eps);
  linear(l.q_proj, normed_.data(), rows, &job.q_[static_cast<size_t>(b * qw)]);
  linear(l.k_proj, normed_.data(), rows, &job.k_[static_cast<size_t>(b * kvw)]);
  linear(l.v_proj, normed_.data(), rows, &job.v_[static_cast<size_t>(b * kvw)]);
  const auto rope_2d = [&](float* head, const float* c, const float* s) {
    const int q = static_cast<int>(quarter);
    cpu::apply_rope(head, hd / 2, c, s, q);
    cpu::apply_rope(head + hd / 2, hd / 2, c + quarter, s + quarter, q);
  };
  for_rows(rows, [&](int64_t rb, int64_t re) {
    for (int64_t r = b + rb; r < b + re; ++r) {
      const float* c = &job.cos_[static_cast<size_t>(r * 2 * quarter)];
      const float* s = &job.sin_[static_cast<size_t>(r * 2 * quarter)];
      for (int h = 0; h < nh; ++h) {
        float* qh = &job.q_[static_cast<size_t>(r * qw + h * hd)];
        cpu::rms_norm(qh, l.q_norm.data(), qh, hd, eps);
        rope_2d(qh, c, s);
      }
      for (int h = 0; h < nkv; ++h) {
        float* kh = &job.k_[static_cast<size_t>(r * kvw + h * hd)];
        float* vh = &job.v_[static_cast<size_t>(r * kvw + h * hd)];
        cpu::rms_norm(kh, l.k_norm.data(), kh, hd, eps);
        rope_2d(kh, c, s);
        cpu::rms_norm(vh, nullptr, vh, hd, eps);
      }
    }
  });
}

// Stage 2: queries [b, e) attend to every patch of the image (all keys of stage 1).
void Gemma4VisionEncoder::attention(VisionEncodeJob& job, int64_t b, int64_t e) {
  const int64_t n = job.num_patches();
  const int hd = cfg_.head_dim;
  const int nh = cfg_.num_attention_heads, nkv = cfg_.num_key_value_heads;
  const int64_t qw = static_cast<int64_t>(nh) * hd, kvw = static_cast<int64_t>(nkv) * hd;
  cpu::PagedKv kv;
  kv.k = job.k_.data();
  kv.v = job.v_.data();
  kv.block_size = static_cast<int>(n);
  kv.slot_bytes = kvw * static_cast<int64_t>(sizeof(float));
  kv.num_blocks = 1;
  kv.dtype = cpu::KvDtype::kF32;
  cpu::AttentionShape shape;
  shape.num_heads = nh;
  shape.num_kv_heads = nkv;
  shape.head_dim = hd;
  shape.scale = 1.0f;  // q and k are RMS-normed, as in the text model
  static constexpr int32_t kOnlyBlock[1] = {0};
  key_ranges_.assign(static_cast<size_t>(e - b), cpu::KeyRange{0, static_cast<int32_t>(n)});
  cpu::AttentionSeq seq;
  seq.num_queries = static_cast<int32_t>(e - b);
  seq.block_table = kOnlyBlock;
  seq.key_ranges = key_ranges_;
  cpu::paged_attention(&job.q_[static_cast<size_t>(b * qw)], static_cast<size_t>(qw), kv, shape,
                       std::span<const cpu::AttentionSeq>(&seq, 1),
                       &job.attn_[static_cast<size_t>(b * qw)], static_cast<size_t>(qw), pool_,
                       &attention_);
}

// Stage 3: output projection and MLP, each normed and added to the residual, per row.
void Gemma4VisionEncoder::mlp(const VisionLayerWeights& l, VisionEncodeJob& job, int64_t b,
                              int64_t e) {
  const int64_t rows = e - b;
  const int64_t hv = cfg_.hidden_size;
  const int64_t qw = static_cast<int64_t>(cfg_.num_attention_heads) * cfg_.head_dim;
  const auto eps = static_cast<float>(cfg_.rms_norm_eps);
  float* h = &job.h_[static_cast<size_t>(b * hv)];
  const size_t count = static_cast<size_t>(rows * hv);

  normed_.resize(count);
  linear(l.o_proj, &job.attn_[static_cast<size_t>(b * qw)], rows, normed_.data());
  cpu::rms_norm_rows(normed_.data(), hv, l.post_attention_layernorm.data(), normed_.data(), hv,
                     rows, hv, eps);
  for (size_t i = 0; i < count; ++i) h[i] += normed_[i];

  const int64_t iv = cfg_.intermediate_size;
  gate_.resize(static_cast<size_t>(rows * iv));
  up_.resize(static_cast<size_t>(rows * iv));
  cpu::rms_norm_rows(h, hv, l.pre_feedforward_layernorm.data(), normed_.data(), hv, rows, hv, eps);
  linear(l.gate_proj, normed_.data(), rows, gate_.data());
  linear(l.up_proj, normed_.data(), rows, up_.data());
  // Row by row, so a row's result never depends on how rows are split into blocks or threads.
  for_rows(rows, [&](int64_t rb, int64_t re) {
    for (int64_t r = rb; r < re; ++r) {
      float* g = &gate_[static_cast<size_t>(r * iv)];
      cpu::gelu_tanh_mul(g, &up_[static_cast<size_t>(r * iv)], g, iv);
    }
  });
  linear(l.down_proj, gate_.data(), rows, normed_.data());
  cpu::rms_norm_rows(normed_.data(), hv, l.post_feedforward_layernorm.data(), normed_.data(), hv,
                     rows, hv, eps);
  for (size_t i = 0; i < count; ++i) h[i] += normed_[i];
}

void Gemma4VisionEncoder::pool_and_project(VisionEncodeJob& job, std::vector<float>* out) {
  const VisionPatchPlan& plan = job.plan_;
  const int64_t n = job.num_patches();
  const int64_t hv = cfg_.hidden_size;
  const int k = cfg_.pooling_kernel_size;
  // HF averages with weight 1/k² (f32) and then scales by sqrt(hidden) (a Python float).
  const float weight = 1.0f / static_cast<float>(k * k);
  const auto root = static_cast<float>(std::sqrt(static_cast<double>(hv)));
  normed_.assign(static_cast<size_t>(plan.num_slots * hv), 0.0f);
  for (int64_t r = 0; r < n; ++r) {
    float* dst = &normed_[static_cast<size_t>(plan.slot[static_cast<size_t>(r)] * hv)];
    const float* src = &job.h_[static_cast<size_t>(r * hv)];
    for (int64_t d = 0; d < hv; ++d) dst[d] += weight * src[d];
  }
  // Kept slots, in order: scaled, standardized, RMS-normed without weight.
  int64_t m = 0;
  for (int32_t s = 0; s < plan.num_slots; ++s) {
    if (!plan.used[static_cast<size_t>(s)]) continue;
    float* dst = &normed_[static_cast<size_t>(m * hv)];
    if (m != s) std::memmove(dst, &normed_[static_cast<size_t>(s * hv)], hv * sizeof(float));
    for (int64_t d = 0; d < hv; ++d) dst[d] *= root;
    if (cfg_.standardize) {
      for (int64_t d = 0; d < hv; ++d) {
        dst[d] = (dst[d] - w_.vision.std_bias[static_cast<size_t>(d)]) *
                 w_.vision.std_scale[static_cast<size_t>(d)];
      }
    }
    cpu::rms_norm(dst, nullptr, dst, hv, static_cast<float>(cfg_.rms_norm_eps));
    ++m;
  }
  const int64_t text_hidden = w_.config.text.hidden_size;
  out->resize(static_cast<size_t>(m * text_hidden));
  matmul(w_.vision.embedding_projection, normed_.data(), hv, m, out->data(), text_hidden);
}

std::unique_ptr<VisionEncodeJob> Gemma4VisionEncoder::begin(const ImagePatches& image,
                                                            int64_t row_block) {
  if (row_block <= 0) throw std::invalid_argument("vision encode row block must be positive");
  auto job = std::make_unique<VisionEncodeJob>();
  plan_pooling(cfg_, image.positions, &job->plan_);
  job->row_block_ = row_block;
  job->num_stages_ = 3 * static_cast<int64_t>(w_.vision.layers.size());
  embed_patches(image, *job);
  return job;
}

int64_t Gemma4VisionEncoder::advance(VisionEncodeJob& job, int64_t budget) {
  const int64_t n = job.num_patches();
  int64_t spent = 0;
  while (!job.done() && (spent == 0 || spent < budget)) {
    const VisionLayerWeights& l = w_.vision.layers[static_cast<size_t>(job.stage_ / 3)];
    const int64_t b = job.next_row_, e = std::min(n, b + job.row_block_);
    switch (job.stage_ % 3) {
      case 0:
        attention_inputs(l, job, b, e);
        break;
      case 1:
        attention(job, b, e);
        break;
      default:
        mlp(l, job, b, e);
    }
    spent += e - b;
    job.next_row_ = e;
    if (e == n) {
      job.next_row_ = 0;
      ++job.stage_;
    }
  }
  return spent;
}

void Gemma4VisionEncoder::finish(VisionEncodeJob& job, std::vector<float>* out) {
  if (!job.done()) throw std::logic_error("vision encode finished before its last layer");
  pool_and_project(job, out);
}

void Gemma4VisionEncoder::encode(const ImagePatches& image, std::vector<float>* out) {
  std::unique_ptr<VisionEncodeJob> job = begin(image);
  while (!job->done()) advance(*job, job->remaining_cost());
  finish(*job, out);
}

}  // namespace gemmaserve
