// Gemma 4 12B's encoder-free embedders (HF's Gemma4UnifiedVisionEmbedder and the audio
// Gemma4UnifiedMultimodalEmbedder): merged pixel patches and raw audio frames become soft-token
// rows of the text hidden size with a few norms and two products, no encoder layers.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/aligned.h"
#include "core/thread_pool.h"
#include "kernels/cpu/matmul.h"
#include "model/gemma4_vision.h"
#include "model/weights.h"

namespace gemmaserve {

// Soft tokens of `positions` (the real rows: (-1, -1) rows are padding) for the unified
// embedder; InputError for positions outside the position table or a half-padded row.
int unified_image_soft_tokens(const UnifiedVisionConfig& config,
                              std::span<const int32_t> positions);

// Soft tokens of an audio clip of `samples` samples: ceil(samples / audio_embed_dim).
int64_t unified_audio_soft_tokens(const UnifiedAudioConfig& config, int64_t samples);

class Gemma4UnifiedEmbedder {
 public:
  // `weights` (family kGemma4Unified) must outlive the embedder; `pool` may be null.
  Gemma4UnifiedEmbedder(const ModelWeights& weights, ThreadPool* pool,
                        cpu::MatmulPrecision precision);

  // An image's soft-token rows (one per real merged patch, in row order) into `out`. The
  // pixels are [rows, 3 * model_patch_size²] in HF's (row, column, channel) order.
  void encode_image(const ImagePatches& image, std::vector<float>* out);
  // The same, resumable as the vision tower's jobs are (one unit = a block of patches).
  std::unique_ptr<VisionEncodeJob> begin_image(const ImagePatches& image,
                                               int64_t row_block = kVisionRowBlock);
  int64_t advance(VisionEncodeJob& job, int64_t budget);
  void finish(VisionEncodeJob& job, std::vector<float>* out);

  // An audio clip's soft-token rows: frames of audio_embed_dim samples (the last zero-padded),
  // each RMS-normed and projected. InputError without an audio embedder or for no samples.
  void encode_audio(std::span<const float> samples, std::vector<float>* out);

 private:
  void matmul(const WeightMatrix& w, const float* x, int64_t ldx, int64_t t, float* y, int64_t ldy);
  void for_rows(int64_t rows, FunctionRef<void(int64_t, int64_t)> fn);
  // Rows [b, e) of the job's patches through the whole embedder into job.h_.
  void embed_rows(VisionEncodeJob& job, int64_t b, int64_t e);

  const ModelWeights& w_;
  ThreadPool* pool_;
  cpu::MatmulPrecision precision_;
  AlignedVector<float> normed_, dense_;
};

}  // namespace gemmaserve
