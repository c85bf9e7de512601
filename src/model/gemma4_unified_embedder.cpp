// See gemma4_unified_embedder.h; HF's modeling_gemma4_unified.py (Gemma4UnifiedVisionEmbedder,
// Gemma4UnifiedModel.get_audio_features) is the reference.
#include "model/gemma4_unified_embedder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "core/error.h"
#include "kernels/cpu/ops.h"
#include "model/weight_matmul.h"

namespace gemmaserve {
namespace {

// torch's LayerNorm: biased variance, eps 1e-5 (HF builds these with nn.LayerNorm's default).
constexpr double kLayerNormEps = 1e-5;

void layer_norm(const float* x, const std::vector<float>& weight, const std::vector<float>& bias,
                float* y, int64_t n) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  const double mean = sum / static_cast<double>(n);
  double var = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = x[i] - mean;
    var += d * d;
  }
  const double inv = 1.0 / std::sqrt(var / static_cast<double>(n) + kLayerNormEps);
  for (int64_t i = 0; i < n; ++i) {
    const auto u = static_cast<size_t>(i);
    y[i] = static_cast<float>((x[i] - mean) * inv) * weight[u] + bias[u];
  }
}

const UnifiedVisionConfig& vision_config(const ModelWeights& w) {
  if (!w.config.unified_vision) {
    throw InputError("This model does not accept image input: it has no vision_config.");
  }
  return *w.config.unified_vision;
}

}  // namespace

int unified_image_soft_tokens(const UnifiedVisionConfig& config,
                              std::span<const int32_t> positions) {
  if (positions.size() % 2 != 0) {
    throw InputError("image position ids must be (x, y) pairs; got " +
                     std::to_string(positions.size()) + " values");
  }
  int real = 0;
  for (size_t i = 0; i < positions.size(); i += 2) {
    const int32_t x = positions[i], y = positions[i + 1];
    if (x == -1 && y == -1) continue;
    if (x < 0 || y < 0 || x >= config.mm_posemb_size || y >= config.mm_posemb_size) {
      throw InputError("image patch " + std::to_string(i / 2) + " has position (" +
                       std::to_string(x) + ", " + std::to_string(y) +
                       "), outside the position table (0.." +
                       std::to_string(config.mm_posemb_size - 1) + ", or (-1, -1) for padding)");
    }
    ++real;
  }
  return real;
}

int64_t unified_audio_soft_tokens(const UnifiedAudioConfig& config, int64_t samples) {
  return (samples + config.audio_embed_dim - 1) / config.audio_embed_dim;
}

Gemma4UnifiedEmbedder::Gemma4UnifiedEmbedder(const ModelWeights& weights, ThreadPool* pool,
                                             cpu::MatmulPrecision precision)
    : w_(weights), pool_(pool), precision_(precision) {
  if (weights.config.family != ModelFamily::kGemma4Unified) {
    throw std::invalid_argument("the unified embedder needs a gemma4_unified model");
  }
}

void Gemma4UnifiedEmbedder::for_rows(int64_t rows, FunctionRef<void(int64_t, int64_t)> fn) {
  for_row_ranges(pool_, rows, fn);
}

void Gemma4UnifiedEmbedder::matmul(const WeightMatrix& w, const float* x, int64_t ldx, int64_t t,
                                   float* y, int64_t ldy) {
  matmul_weights(w, x, ldx, t, y, ldy, precision_, pool_);
}

std::unique_ptr<VisionEncodeJob> Gemma4UnifiedEmbedder::begin_image(const ImagePatches& image,
                                                                    int64_t row_block) {
  if (row_block <= 0) throw std::invalid_argument("image embed row block must be positive");
  const UnifiedVisionConfig& c = vision_config(w_);
  unified_image_soft_tokens(c, image.positions);  // validates every position
  const int64_t patch = c.patch_dim();
  const size_t all = image.positions.size() / 2;
  if (image.pixels.size() != all * static_cast<size_t>(patch)) {
    throw InputError("image pixel values hold " + std::to_string(image.pixels.size()) +
                     " floats; " + std::to_string(all) + " merged patches of " +
                     std::to_string(patch) + " (3 x model_patch_size²) expected");
  }
  auto job = std::make_unique<VisionEncodeJob>();
  VisionPatchPlan& plan = job->plan_;
  for (size_t i = 0; i < all; ++i) {
    const int32_t x = image.positions[2 * i], y = image.positions[2 * i + 1];
    if (x == -1 && y == -1) continue;  // HF drops padding rows after the embedder
    plan.rows.push_back(static_cast<int64_t>(i));
    plan.xs.push_back(x);
    plan.ys.push_back(y);
  }
  plan.soft_tokens = static_cast<int>(plan.rows.size());
  if (plan.rows.empty()) throw InputError("an image must hold at least one patch");
  job->row_block_ = row_block;
  job->num_stages_ = 1;
  // The job keeps its own copy of the real patches: the caller's pixels may not outlive begin.
  const int64_t n = job->num_patches();
  job->q_.resize(static_cast<size_t>(n * patch));
  for (int64_t r = 0; r < n; ++r) {
    std::memcpy(&job->q_[static_cast<size_t>(r * patch)],
                &image.pixels[static_cast<size_t>(plan.rows[static_cast<size_t>(r)] * patch)],
                static_cast<size_t>(patch) * sizeof(float));
  }
  job->h_.resize(static_cast<size_t>(n * w_.config.text.hidden_size));
  return job;
}

void Gemma4UnifiedEmbedder::embed_rows(VisionEncodeJob& job, int64_t b, int64_t e) {
  const UnifiedVisionConfig& c = *w_.config.unified_vision;
  const UnifiedEmbedderWeights& u = w_.unified;
  const int64_t patch = c.patch_dim(), mm = c.mm_embed_dim, H = w_.config.text.hidden_size;
  const int64_t t = e - b;
  normed_.resize(static_cast<size_t>(t * patch));
  dense_.resize(static_cast<size_t>(t * mm));
  for_rows(t, [&](int64_t rb, int64_t re) {
    for (int64_t r = rb; r < re; ++r) {
      layer_norm(&job.q_[static_cast<size_t>((b + r) * patch)], u.patch_ln1_weight,
                 u.patch_ln1_bias, &normed_[static_cast<size_t>(r * patch)], patch);
    }
  });
  matmul(u.patch_dense, normed_.data(), patch, t, dense_.data(), mm);
  const float eps = static_cast<float>(c.rms_norm_eps);
  for_rows(t, [&](int64_t rb, int64_t re) {
    std::vector<float> tmp(static_cast<size_t>(mm));
    for (int64_t r = rb; r < re; ++r) {
      float* row = &dense_[static_cast<size_t>(r * mm)];
      for (int64_t d = 0; d < mm; ++d) row[d] += u.patch_dense_bias[static_cast<size_t>(d)];
      layer_norm(row, u.patch_ln2_weight, u.patch_ln2_bias, tmp.data(), mm);
      // Factorized position: table[x, 0] + table[y, 1] (HF sums the two rows, then adds).
      const auto i = static_cast<size_t>(b + r);
      const float* px = &u.pos_embedding[static_cast<size_t>(job.plan_.xs[i]) * 2 * mm];
      const float* py = &u.pos_embedding[(static_cast<size_t>(job.plan_.ys[i]) * 2 + 1) * mm];
      for (int64_t d = 0; d < mm; ++d) tmp[static_cast<size_t>(d)] += px[d] + py[d];
      layer_norm(tmp.data(), u.pos_norm_weight, u.pos_norm_bias, row, mm);
      cpu::rms_norm(row, nullptr, row, mm, eps);
    }
  });
  matmul(u.vision_projection, dense_.data(), mm, t, &job.h_[static_cast<size_t>(b * H)], H);
}

int64_t Gemma4UnifiedEmbedder::advance(VisionEncodeJob& job, int64_t budget) {
  const int64_t n = job.num_patches();
  int64_t spent = 0;
  while (!job.done() && (spent == 0 || spent < budget)) {
    const int64_t b = job.next_row_, e = std::min(n, b + job.row_block_);
    embed_rows(job, b, e);
    spent += e - b;
    job.next_row_ = e;
    if (e == n) {
      job.next_row_ = 0;
      job.stage_ = job.num_stages_;
    }
  }
  return spent;
}

void Gemma4UnifiedEmbedder::finish(VisionEncodeJob& job, std::vector<float>* out) {
  if (!job.done()) throw std::logic_error("image embed finished before its last rows");
  out->assign(job.h_.begin(), job.h_.end());
}

void Gemma4UnifiedEmbedder::encode_image(const ImagePatches& image, std::vector<float>* out) {
  std::unique_ptr<VisionEncodeJob> job = begin_image(image);
  while (!job->done()) advance(*job, job->remaining_cost());
  finish(*job, out);
}

void Gemma4UnifiedEmbedder::encode_audio(std::span<const float> samples, std::vector<float>* out) {
  if (!w_.config.unified_audio) {
    throw InputError("This model does not accept audio input: it has no audio_config.");
  }
  if (samples.empty()) throw InputError("an audio clip must hold at least one sample");
  const UnifiedAudioConfig& c = *w_.config.unified_audio;
  const int64_t frame = c.audio_embed_dim, H = w_.config.text.hidden_size;
  const int64_t n = unified_audio_soft_tokens(c, static_cast<int64_t>(samples.size()));
  // Frames of raw samples, the last zero-padded (the processor pads the clip to whole frames).
  normed_.assign(static_cast<size_t>(n * frame), 0.0f);
  std::memcpy(normed_.data(), samples.data(), samples.size() * sizeof(float));
  const float eps = static_cast<float>(c.rms_norm_eps);
  for_rows(n, [&](int64_t rb, int64_t re) {
    for (int64_t r = rb; r < re; ++r) {
      float* row = &normed_[static_cast<size_t>(r * frame)];
      cpu::rms_norm(row, nullptr, row, frame, eps);
    }
  });
  out->resize(static_cast<size_t>(n * H));
  matmul(w_.unified.audio_projection, normed_.data(), frame, n, out->data(), H);
}

}  // namespace gemmaserve
