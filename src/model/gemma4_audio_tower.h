// The Gemma 4 audio tower (HF's Gemma4AudioModel, a USM conformer) and its projection into the
// text model (embed_audio): one clip's log-mel features become soft-token embeddings that replace
// the clip's <|audio|> placeholders.
#pragma once

#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/matmul.h"
#include "model/gemma4_audio_features.h"
#include "model/weights.h"

namespace gemmaserve {

class Gemma4AudioTower {
 public:
  // `weights` (with an audio tower) must outlive the tower; `pool` may be null.
  Gemma4AudioTower(const ModelWeights& weights, ThreadPool* pool, cpu::MatmulPrecision precision);

  // Soft-token embeddings of one clip: gemma4_audio_soft_tokens(features.num_frames) rows of the
  // text hidden size into `out` (resized). Only the valid frames are read: HF zeroes the others
  // before each convolution and masks them as keys, and every later op looks back only, so a
  // clip padded in a batch gives the same rows. InputError for malformed features.
  void encode(const AudioFeatures& features, std::vector<float>* out);

 private:
  void matmul(const WeightMatrix& w, const float* x, int64_t t, float* y);
  void linear(const ClippedLinear& c, const float* x, int64_t t, float* y);
  void subsample(const float* features, int64_t frames, int64_t bins);
  void feed_forward(const AudioFeedForwardWeights& f, int64_t t);
  void attention(const AudioLayerWeights& l, int64_t t);
  void light_conv(const AudioLayerWeights& l, int64_t t);

  const ModelWeights& w_;
  const AudioConfig& cfg_;
  ThreadPool* pool_;
  cpu::MatmulPrecision precision_;
  std::vector<float> rel_pos_;  // [context_size / 2 + 1, hidden]: HF's sin/cos table

  // Activations of the clip being encoded ([t, hidden] unless noted).
  std::vector<float> h_, x_, y_, big_, q_, k_, v_, rel_k_;
};

}  // namespace gemmaserve
