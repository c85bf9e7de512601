// The Gemma 4 audio tower (HF's Gemma4AudioModel, a USM conformer) and its projection into the
// text model (embed_audio): one clip's log-mel features become soft-token embeddings that replace
// the clip's <|audio|> placeholders.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/matmul.h"
#include "model/gemma4_audio_features.h"
#include "model/weights.h"

namespace gemmaserve {

class Gemma4Model;

// One clip's encoding in progress (Gemma4AudioTower::begin), so the engine can slice it between
// steps as it slices images: the residual stream and how far the tower got. Stages: the
// subsampling, each conformer layer, the projections; a unit of work is one stage.
class AudioEncodeJob {
 public:
  bool done() const { return stage_ == num_stages_; }
  // Work left in time-step stages: a conformer layer costs 3 per time step (it is about three
  // vision stages of work), the subsampling and the projections 1.
  int64_t remaining_cost() const;

 private:
  friend class Gemma4AudioTower;
  friend class Gemma4Model;  // the 12B's embedder: one stage over the raw samples
  int64_t stage_cost(int stage) const;
  AudioFeatures features_;      // until subsampled
  std::vector<float> samples_;  // the unified embedder's input
  int64_t frames_ = 0, t_ = 0;  // valid feature frames; time steps after subsampling
  int num_stages_ = 0;
  int stage_ = 0;
  std::vector<float> h_;    // [t, hidden] between stages
  std::vector<float> out_;  // the soft-token rows once done
};

class Gemma4AudioTower {
 public:
  // `weights` (with an audio tower) must outlive the tower; `pool` may be null.
  Gemma4AudioTower(const ModelWeights& weights, ThreadPool* pool, cpu::MatmulPrecision precision);

  // Soft-token embeddings of one clip: gemma4_audio_soft_tokens(features.num_frames) rows of the
  // text hidden size into `out` (resized). Only the valid frames are read: HF zeroes the others
  // before each convolution and masks them as keys, and every later op looks back only, so a
  // clip padded in a batch gives the same rows. InputError for malformed features.
  // Same as begin() + advance() until done + finish(): the result does not depend on slicing.
  void encode(AudioFeatures features, std::vector<float>* out);
  // The resumable form: `budget` in time-step stages (AudioEncodeJob::remaining_cost's unit);
  // advance runs whole stages while they fit, at least one, and returns what it spent.
  std::unique_ptr<AudioEncodeJob> begin(AudioFeatures features) const;
  int64_t advance(AudioEncodeJob& job, int64_t budget);
  void finish(AudioEncodeJob& job, std::vector<float>* out) const;

 private:
  void matmul(const WeightMatrix& w, const float* x, int64_t t, float* y);
  void linear(const ClippedLinear& c, const float* x, int64_t t, float* y);
  void subsample(const float* features, int64_t frames, int64_t bins);
  void feed_forward(const AudioFeedForwardWeights& f, int64_t t);
  void attention(const AudioLayerWeights& l, int64_t t);
  void light_conv(const AudioLayerWeights& l, int64_t t);
  void run_stage(AudioEncodeJob& job);
  void conformer_layer(const AudioLayerWeights& l, int64_t t);
  void project(AudioEncodeJob& job);

  const ModelWeights& w_;
  const AudioConfig& cfg_;
  ThreadPool* pool_;
  cpu::MatmulPrecision precision_;
  std::vector<float> rel_pos_;  // [context_size / 2 + 1, hidden]: HF's sin/cos table

  // Activations of the clip being encoded ([t, hidden] unless noted).
  std::vector<float> h_, x_, y_, big_, q_, k_, v_, rel_k_;
};

}  // namespace gemmaserve
