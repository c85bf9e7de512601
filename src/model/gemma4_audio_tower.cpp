// The Gemma 4 audio tower's forward pass (HF's Gemma4AudioModel): two 3x3 stride-2 convolutions
// over the log-mel image, then conformer blocks (half-step feed-forwards, chunked local attention
// with relative positions, a causal depthwise light convolution), output_proj and embed_audio.
#include "model/gemma4_audio_tower.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "core/error.h"
#include "model/weight_matmul.h"

namespace gemmaserve {
namespace {

void clamp(float* x, int64_t n, float lo, float hi) {
  for (int64_t i = 0; i < n; ++i) x[i] = std::min(std::max(x[i], lo), hi);
}

bool bounded(float lo, float hi) { return std::isfinite(lo) || std::isfinite(hi); }

// HF's Gemma4RMSNorm: x * (mean(x²) + eps)^-0.5, times the weight when there is one.
void rms_norm(const float* x, const float* weight, int64_t n, float eps, float* y) {
  float ss = 0.0f;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const float inv = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = weight ? x[i] * inv * weight[i] : x[i] * inv;
}

void rms_norm_rows(float* x, const std::vector<float>& weight, int64_t t, int64_t n, float eps) {
  for (int64_t r = 0; r < t; ++r) rms_norm(x + r * n, weight.data(), n, eps, x + r * n);
}

// torch's LayerNorm without bias (biased variance), then ReLU, in place over n channels.
void layer_norm_relu(float* x, const float* weight, int64_t n, float eps) {
  float mean = 0.0f;
  for (int64_t i = 0; i < n; ++i) mean += x[i];
  mean /= static_cast<float>(n);
  float var = 0.0f;
  for (int64_t i = 0; i < n; ++i) var += (x[i] - mean) * (x[i] - mean);
  var /= static_cast<float>(n);
  const float inv = 1.0f / std::sqrt(var + eps);
  for (int64_t i = 0; i < n; ++i) x[i] = std::max((x[i] - mean) * inv * weight[i], 0.0f);
}

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
float silu(float x) { return x / (1.0f + std::exp(-x)); }
float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// A 3x3 stride-2 convolution with padding 1 over [t_in, f_in, c_in] (channels fastest) into
// [ceil(t_in / 2), ceil(f_in / 2), c_out]; w is [c_out, c_in, 3, 3] as stored.
void conv3x3_s2(const float* in, int64_t t_in, int64_t f_in, int64_t c_in, const float* w,
                int64_t c_out, ThreadPool* pool, std::vector<float>* out) {
  const int64_t t_out = (t_in + 1) / 2, f_out = (f_in + 1) / 2;
  // The weights regrouped [c_out][dt][df][c_in] so each tap is a contiguous dot product.
  std::vector<float> wt(static_cast<size_t>(c_out * 9 * c_in));
  for (int64_t o = 0; o < c_out; ++o) {
    for (int64_t i = 0; i < c_in; ++i) {
      for (int64_t k = 0; k < 9; ++k) wt[(o * 9 + k) * c_in + i] = w[(o * c_in + i) * 9 + k];
    }
  }
  out->assign(static_cast<size_t>(t_out * f_out * c_out), 0.0f);
  // Output rows are independent: any split gives the same bits.
  for_row_ranges(pool, t_out, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      for (int64_t f = 0; f < f_out; ++f) {
        float* y = out->data() + (t * f_out + f) * c_out;
        for (int64_t dt = 0; dt < 3; ++dt) {
          const int64_t ti = 2 * t - 1 + dt;
          if (ti < 0 || ti >= t_in) continue;
          for (int64_t df = 0; df < 3; ++df) {
            const int64_t fi = 2 * f - 1 + df;
            if (fi < 0 || fi >= f_in) continue;
            const float* x = in + (ti * f_in + fi) * c_in;
            for (int64_t o = 0; o < c_out; ++o) {
              const float* wk = wt.data() + (o * 9 + dt * 3 + df) * c_in;
              float acc = 0.0f;
              for (int64_t i = 0; i < c_in; ++i) acc += wk[i] * x[i];
              y[o] += acc;
            }
          }
        }
      }
    }
  });
}

}  // namespace

Gemma4AudioTower::Gemma4AudioTower(const ModelWeights& weights, ThreadPool* pool,
                                   cpu::MatmulPrecision precision)
    : w_(weights), cfg_(weights.config.audio.value()), pool_(pool), precision_(precision) {
  // HF's Gemma4AudioRelPositionalEncoding in float32: positions context/2 .. 0, [sin | cos] of
  // position x 1e4^(-i / (H/2 - 1)).
  const int context =
      cfg_.attention_chunk_size + cfg_.attention_context_left - 1 + cfg_.attention_context_right;
  const int positions = context / 2 + 1;
  const int half = cfg_.hidden_size / 2;
  const float step = static_cast<float>(-std::log(10000.0) / std::max(half - 1, 1));
  rel_pos_.resize(static_cast<size_t>(positions) * cfg_.hidden_size);
  for (int j = 0; j < positions; ++j) {
    const float pos = static_cast<float>(context / 2 - j);
    for (int i = 0; i < half; ++i) {
      const float scaled = pos * std::exp(static_cast<float>(i) * step);
      rel_pos_[static_cast<size_t>(j) * cfg_.hidden_size + i] = std::sin(scaled);
      rel_pos_[static_cast<size_t>(j) * cfg_.hidden_size + half + i] = std::cos(scaled);
    }
  }
}

void Gemma4AudioTower::matmul(const WeightMatrix& w, const float* x, int64_t t, float* y) {
  matmul_weights(w, x, w.cols, t, y, w.rows, precision_, pool_);
}

// Y = clamp(clamp(X) Wᵀ): HF's Gemma4ClippableLinear.
void Gemma4AudioTower::linear(const ClippedLinear& c, const float* x, int64_t t, float* y) {
  const int64_t k = c.w.cols, n = c.w.rows;
  const bool clip = cfg_.use_clipped_linears;
  std::vector<float> clipped;
  if (clip && bounded(c.input_min, c.input_max)) {
    clipped.assign(x, x + t * k);
    clamp(clipped.data(), t * k, c.input_min, c.input_max);
    x = clipped.data();
  }
  matmul(c.w, x, t, y);
  if (clip && bounded(c.output_min, c.output_max)) clamp(y, t * n, c.output_min, c.output_max);
}

// Gemma4AudioSubSampleConvProjection over the valid frames: h_ = [ceil(ceil(F/2)/2), hidden].
void Gemma4AudioTower::subsample(const float* features, int64_t frames, int64_t bins) {
  const AudioTowerWeights& a = w_.audio;
  const int64_t c0 = cfg_.subsampling_conv_channels[0], c1 = cfg_.subsampling_conv_channels[1];
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  std::vector<float> l0, l1;
  conv3x3_s2(features, frames, bins, 1, a.conv0.data(), c0, pool_, &l0);
  const int64_t t1 = (frames + 1) / 2, f1 = (bins + 1) / 2;
  for (int64_t r = 0; r < t1 * f1; ++r)
    layer_norm_relu(l0.data() + r * c0, a.conv0_norm.data(), c0, eps);
  conv3x3_s2(l0.data(), t1, f1, c0, a.conv1.data(), c1, pool_, &l1);
  const int64_t t2 = (t1 + 1) / 2, f2 = (f1 + 1) / 2;
  for (int64_t r = 0; r < t2 * f2; ++r)
    layer_norm_relu(l1.data() + r * c1, a.conv1_norm.data(), c1, eps);
  // Rows flatten frequency-major with channels fastest, as HF's permute(0, 2, 3, 1).
  if (f2 * c1 != a.input_proj_linear.cols) {
    throw InputError("audio features of " + std::to_string(bins) + " mel bins give " +
                     std::to_string(f2 * c1) +
                     " values per frame after subsampling; the audio "
                     "tower's input_proj_linear takes " +
                     std::to_string(a.input_proj_linear.cols));
  }
  h_.resize(static_cast<size_t>(t2 * cfg_.hidden_size));
  matmul(a.input_proj_linear, l1.data(), t2, h_.data());
}

// Gemma4AudioFeedForward: h += residual_weight * norm(clamp(W2 silu(W1 norm(clamp(h))))).
void Gemma4AudioTower::feed_forward(const AudioFeedForwardWeights& f, int64_t t) {
  const int64_t H = cfg_.hidden_size;
  const float gc = static_cast<float>(std::min(cfg_.gradient_clipping, double{FLT_MAX}));
  const float eps = 1e-6f;  // HF builds these norms with the default eps
  x_.assign(h_.begin(), h_.end());
  clamp(x_.data(), t * H, -gc, gc);
  rms_norm_rows(x_.data(), f.pre_layer_norm, t, H, eps);
  big_.resize(static_cast<size_t>(t * 4 * H));
  linear(f.ffw_layer_1, x_.data(), t, big_.data());
  for (float& v : big_) v = silu(v);
  linear(f.ffw_layer_2, big_.data(), t, x_.data());
  clamp(x_.data(), t * H, -gc, gc);
  rms_norm_rows(x_.data(), f.post_layer_norm, t, H, eps);
  const float scale = static_cast<float>(cfg_.residual_weight);
  for (int64_t i = 0; i < t * H; ++i) h_[i] += x_[i] * scale;
}

// Gemma4AudioAttention on x_ (already normed) into y_: each query sees itself and the
// attention_context_left - 2 steps before it (HF's blocked mask with True = attend), with
// logits (q·k + q·rel[distance]) soft-capped. Keys past the clip do not exist here, which is
// what HF's padding mask gives.
void Gemma4AudioTower::attention(const AudioLayerWeights& l, int64_t t) {
  const int64_t H = cfg_.hidden_size, heads = cfg_.num_attention_heads, D = cfg_.head_dim();
  q_.resize(static_cast<size_t>(t * H));
  k_.resize(static_cast<size_t>(t * H));
  v_.resize(static_cast<size_t>(t * H));
  linear(l.q_proj, x_.data(), t, q_.data());
  linear(l.k_proj, x_.data(), t, k_.data());
  linear(l.v_proj, x_.data(), t, v_.data());
  const float q_scale = static_cast<float>(std::pow(static_cast<double>(D), -0.5) / std::log(2.0));
  const float k_scale = static_cast<float>(std::log(1.0 + std::exp(1.0)) / std::log(2.0));
  std::vector<float> per_dim(static_cast<size_t>(D));
  for (int64_t d = 0; d < D; ++d) per_dim[d] = softplus(l.per_dim_scale[d]);
  for (int64_t r = 0; r < t; ++r) {
    for (int64_t i = 0; i < H; ++i) {
      q_[r * H + i] = q_[r * H + i] * q_scale * per_dim[i % D];
      k_[r * H + i] *= k_scale;
    }
  }
  const int64_t positions = static_cast<int64_t>(rel_pos_.size()) / H;
  rel_k_.resize(static_cast<size_t>(positions * H));
  matmul(l.relative_k_proj, rel_pos_.data(), positions, rel_k_.data());

  // Table entry j holds distance max_past - j (HF's rel_shift); keys at distance 0 .. left - 1.
  const int64_t max_past = cfg_.attention_context_left - 1;
  const float cap = static_cast<float>(cfg_.attention_logit_cap);
  y_.assign(static_cast<size_t>(t * H), 0.0f);
  for_row_ranges(pool_, t, [&](int64_t q0, int64_t q1) {
    std::vector<float> logits(static_cast<size_t>(max_past));
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t qi = q0; qi < q1; ++qi) {
        const float* q = q_.data() + qi * H + h * D;
        const int64_t first = std::max<int64_t>(0, qi - max_past + 1);
        float top = -FLT_MAX;
        for (int64_t kv = first; kv <= qi; ++kv) {
          const float* k = k_.data() + kv * H + h * D;
          float ac = 0.0f, bd = 0.0f;
          for (int64_t d = 0; d < D; ++d) ac += q[d] * k[d];
          const int64_t j = kv - qi + max_past;
          if (j >= 0 && j < positions) {
            const float* rk = rel_k_.data() + j * H + h * D;
            for (int64_t d = 0; d < D; ++d) bd += q[d] * rk[d];
          }
          const float logit = std::tanh((ac + bd) / cap) * cap;
          logits[kv - first] = logit;
          top = std::max(top, logit);
        }
        float sum = 0.0f;
        for (int64_t kv = first; kv <= qi; ++kv) {
          logits[kv - first] = std::exp(logits[kv - first] - top);
          sum += logits[kv - first];
        }
        float* out = y_.data() + qi * H + h * D;
        for (int64_t kv = first; kv <= qi; ++kv) {
          const float p = logits[kv - first] / sum;
          const float* v = v_.data() + kv * H + h * D;
          for (int64_t d = 0; d < D; ++d) out[d] += p * v[d];
        }
      }
    }
  });
  x_.resize(static_cast<size_t>(t * H));
  linear(l.post, y_.data(), t, x_.data());
}

// Gemma4AudioLightConv1d: h += W_end silu(norm(clamp(causal depthwise conv(glu(W_start norm h))))).
void Gemma4AudioTower::light_conv(const AudioLayerWeights& l, int64_t t) {
  const int64_t H = cfg_.hidden_size, K = cfg_.conv_kernel_size;
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  const float gc = static_cast<float>(std::min(cfg_.gradient_clipping, double{FLT_MAX}));
  x_.assign(h_.begin(), h_.end());
  rms_norm_rows(x_.data(), l.lconv_pre_layer_norm, t, H, eps);
  big_.resize(static_cast<size_t>(t * 2 * H));
  linear(l.lconv_linear_start, x_.data(), t, big_.data());
  y_.resize(static_cast<size_t>(t * H));
  for (int64_t r = 0; r < t; ++r) {
    for (int64_t c = 0; c < H; ++c) {
      y_[r * H + c] = big_[r * 2 * H + c] * sigmoid(big_[r * 2 * H + H + c]);
    }
  }
  // Left-padded by kernel - 1 zeros: step r sees steps r - K + 1 .. r.
  for (int64_t r = 0; r < t; ++r) {
    for (int64_t c = 0; c < H; ++c) {
      float acc = 0.0f;
      for (int64_t k = 0; k < K; ++k) {
        const int64_t src = r - (K - 1) + k;
        if (src >= 0) acc += l.lconv_depthwise[c * K + k] * y_[src * H + c];
      }
      x_[r * H + c] = acc;
    }
  }
  clamp(x_.data(), t * H, -gc, gc);
  rms_norm_rows(x_.data(), l.lconv_conv_norm, t, H, eps);
  for (float& v : x_) v = silu(v);
  linear(l.lconv_linear_end, x_.data(), t, y_.data());
  for (int64_t i = 0; i < t * H; ++i) h_[i] += y_[i];
}

int64_t AudioEncodeJob::stage_cost(int stage) const {
  const int64_t steps = t_ > 0 ? t_ : (frames_ + 3) / 4;  // before subsampling: its estimate
  return stage == 0 || stage == num_stages_ - 1 ? steps : 3 * steps;
}

int64_t AudioEncodeJob::remaining_cost() const {
  int64_t cost = 0;
  for (int s = stage_; s < num_stages_; ++s) cost += stage_cost(s);
  return cost;
}

std::unique_ptr<AudioEncodeJob> Gemma4AudioTower::begin(AudioFeatures features) const {
  const AudioTowerWeights& a = w_.audio;
  if (!a) throw InputError("This model has no audio tower (audio_config)");
  const int64_t frames = features.num_frames, padded = features.num_frames_padded;
  if (frames <= 0 || padded < frames || features.values.empty() ||
      features.values.size() % static_cast<size_t>(padded) != 0) {
    throw InputError("audio features of " + std::to_string(frames) + " valid frames (" +
                     std::to_string(padded) + " padded, " + std::to_string(features.values.size()) +
                     " values) cannot be encoded: a clip needs at least one valid frame");
  }
  auto job = std::make_unique<AudioEncodeJob>();
  job->frames_ = frames;
  job->features_ = std::move(features);
  job->num_stages_ = static_cast<int>(a.layers.size()) + 2;
  return job;
}

void Gemma4AudioTower::conformer_layer(const AudioLayerWeights& l, int64_t t) {
  const int64_t H = cfg_.hidden_size;
  const float gc = static_cast<float>(std::min(cfg_.gradient_clipping, double{FLT_MAX}));
  feed_forward(l.feed_forward1, t);
  x_.assign(h_.begin(), h_.end());
  clamp(x_.data(), t * H, -gc, gc);
  rms_norm_rows(x_.data(), l.norm_pre_attn, t, H, 1e-6f);
  attention(l, t);
  clamp(x_.data(), t * H, -gc, gc);
  rms_norm_rows(x_.data(), l.norm_post_attn, t, H, 1e-6f);
  for (int64_t i = 0; i < t * H; ++i) h_[i] += x_[i];
  light_conv(l, t);
  feed_forward(l.feed_forward2, t);
  clamp(h_.data(), t * H, -gc, gc);
  rms_norm_rows(h_.data(), l.norm_out, t, H, 1e-6f);
}

void Gemma4AudioTower::project(AudioEncodeJob& job) {
  const AudioTowerWeights& a = w_.audio;
  // The soft tokens HF keeps (its processor caps them at audio_seq_length).
  const int64_t n =
      std::min<int64_t>(job.t_, gemma4_audio_soft_tokens(static_cast<int>(job.frames_)));
  const int64_t P = cfg_.output_proj_dims, text_hidden = a.embedding_projection.rows;
  std::vector<float> proj(static_cast<size_t>(n * P));
  matmul(a.output_proj, h_.data(), n, proj.data());
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  for (int64_t r = 0; r < n; ++r) {
    float* row = proj.data() + r * P;
    for (int64_t i = 0; i < P; ++i) row[i] += a.output_proj_bias[i];
    rms_norm(row, nullptr, P, eps, row);  // embed_audio's weightless pre-projection norm
  }
  job.out_.resize(static_cast<size_t>(n * text_hidden));
  matmul(a.embedding_projection, proj.data(), n, job.out_.data());
}

// One stage, with the job's residual stream in h_ while it runs (the other buffers are scratch).
void Gemma4AudioTower::run_stage(AudioEncodeJob& job) {
  if (job.stage_ == 0) {
    const AudioFeatures& f = job.features_;
    const int64_t bins = static_cast<int64_t>(f.values.size()) / f.num_frames_padded;
    subsample(f.values.data(), job.frames_, bins);
    job.t_ = static_cast<int64_t>(h_.size()) / cfg_.hidden_size;
    job.features_ = AudioFeatures{};
  } else {
    h_.swap(job.h_);
    if (job.stage_ < job.num_stages_ - 1) {
      conformer_layer(w_.audio.layers[static_cast<size_t>(job.stage_ - 1)], job.t_);
    } else {
      project(job);
    }
  }
  h_.swap(job.h_);
  ++job.stage_;
  if (job.done()) job.h_ = {};
}

int64_t Gemma4AudioTower::advance(AudioEncodeJob& job, int64_t budget) {
  int64_t spent = 0;
  while (!job.done()) {
    const int64_t cost = job.stage_cost(job.stage_);
    if (spent > 0 && spent + cost > budget) break;
    run_stage(job);
    spent += cost;
  }
  return spent;
}

void Gemma4AudioTower::finish(AudioEncodeJob& job, std::vector<float>* out) const {
  if (!job.done()) throw std::logic_error("finish() on an audio encode that is not done");
  *out = std::move(job.out_);
}

void Gemma4AudioTower::encode(AudioFeatures features, std::vector<float>* out) {
  std::unique_ptr<AudioEncodeJob> job = begin(std::move(features));
  while (!job->done()) advance(*job, INT64_MAX);
  finish(*job, out);
}

}  // namespace gemmaserve
