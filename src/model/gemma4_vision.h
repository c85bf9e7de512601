// The Gemma 4 vision tower (HF's Gemma4VisionModel) and its projection into the text model
// (Gemma4MultimodalEmbedder): the patches of one preprocessed image become soft-token
// embeddings that replace the image's placeholder tokens. Not SigLIP: a learned 2-D position
// table, 2-D RoPE, q/k/v norms, attention scale 1, optional clipped linears, k×k average
// pooling scaled by sqrt(hidden), optional standardize (spec §5.2).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/aligned.h"
#include "core/thread_pool.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/matmul.h"
#include "model/weights.h"

namespace gemmaserve {

// One preprocessed image as HF's image processor gives it (already patchified).
struct ImagePatches {
  std::span<const float> pixels;       // [num_patches, 3 * patch²] in [0, 1], HF's pixel order
  std::span<const int32_t> positions;  // [num_patches, 2]: (x, y); (-1, -1) marks padding
};

// The soft tokens `positions` give (real patches / pooling_kernel_size², as HF's pooler keeps
// them). InputError naming the fault for a malformed image (see encode()).
int vision_soft_tokens(const VisionConfig& config, std::span<const int32_t> positions);

// Where each real patch of an image goes (Gemma4VisionEncoder::plan_pooling).
struct VisionPatchPlan {
  std::vector<int32_t> xs, ys, slot;  // per real patch, in patch order
  std::vector<int64_t> rows;          // index of each real patch among all the patches
  std::vector<uint8_t> used;          // per pooled slot: kept as a soft token
  int32_t num_slots = 0;
  int soft_tokens = 0;
};

// Patches per unit of resumable encoder work (a block of rows through one stage of a layer).
inline constexpr int64_t kVisionRowBlock = 256;

// One image's encoding in progress (Gemma4VisionEncoder::begin): its activations and how far
// the encoder layers got. Each encoder layer runs as three stages (attention projections,
// attention, MLP), each over blocks of rows; a unit of work is one block through one stage.
class VisionEncodeJob {
 public:
  bool done() const { return stage_ == num_stages_; }
  int64_t num_patches() const { return static_cast<int64_t>(plan_.rows.size()); }
  // Work left, in patch-stages: one patch through one stage of one encoder layer.
  int64_t remaining_cost() const {
    return (num_stages_ - stage_) * num_patches() - (done() ? 0 : next_row_);
  }

 private:
  friend class Gemma4VisionEncoder;
  friend class Gemma4UnifiedEmbedder;  // the 12B's one-stage jobs: patches in q_, rows out in h_
  VisionPatchPlan plan_;
  int64_t row_block_ = kVisionRowBlock;
  int64_t num_stages_ = 0;  // 3 per encoder layer
  int64_t stage_ = 0;       // the next unit: stage_ over rows [next_row_, + row_block_)
  int64_t next_row_ = 0;
  AlignedVector<float> h_, q_, k_, v_, attn_;
  AlignedVector<float> cos_, sin_;  // [rows, 2 (x then y), head_dim / 4]
};

class Gemma4VisionEncoder {
 public:
  // `weights` (with a vision tower) must outlive the encoder; `pool` may be null.
  Gemma4VisionEncoder(const ModelWeights& weights, ThreadPool* pool,
                      cpu::MatmulPrecision precision);

  // Soft-token embeddings of one image: vision_soft_tokens() rows of the text hidden size, in
  // placeholder order, into `out` (resized). Padding patches are dropped up front (HF masks
  // them as keys and discards their outputs, so the result is the same). InputError when the
  // pixel and position counts disagree, the patch count is not a multiple of the pooling
  // window, or a position lies outside the position table or the pooled grid.
  // Same as begin() + advance() until done + finish(): the result does not depend on slicing.
  void encode(const ImagePatches& image, std::vector<float>* out);

  // Resumable encoding, so a caller can interleave other work (the engine's decodes). begin()
  // checks the image (encode()'s InputErrors) and embeds its patches; advance() runs units of
  // work until `budget` patch-stages are spent (at least one unit) and returns what it spent;
  // finish() (once done()) pools and projects into `out`. `row_block` > 0 sets the unit size.
  std::unique_ptr<VisionEncodeJob> begin(const ImagePatches& image,
                                         int64_t row_block = kVisionRowBlock);
  int64_t advance(VisionEncodeJob& job, int64_t budget);
  void finish(VisionEncodeJob& job, std::vector<float>* out);

 private:
  static void plan_pooling(const VisionConfig& c, std::span<const int32_t> positions,
                           VisionPatchPlan* p);
  friend int vision_soft_tokens(const VisionConfig& config, std::span<const int32_t> positions);

  void matmul(const WeightMatrix& w, const float* x, int64_t ldx, int64_t t, float* y, int64_t ldy);
  void linear(const ClippedLinear& c, const float* x, int64_t t, float* y);
  void for_rows(int64_t rows, FunctionRef<void(int64_t, int64_t)> fn);
  void embed_patches(const ImagePatches& image, VisionEncodeJob& job);
  // The three stages of one encoder layer over the job's rows [b, e).
  void attention_inputs(const VisionLayerWeights& l, VisionEncodeJob& job, int64_t b, int64_t e);
  void attention(VisionEncodeJob& job, int64_t b, int64_t e);
  void mlp(const VisionLayerWeights& l, VisionEncodeJob& job, int64_t b, int64_t e);
  void pool_and_project(VisionEncodeJob& job, std::vector<float>* out);

  const ModelWeights& w_;
  const VisionConfig& cfg_;
  ThreadPool* pool_;
  cpu::MatmulPrecision precision_;
  std::vector<float> inv_freq_;  // head_dim / 4 slots, the same for the x and the y half

  // Scratch of one unit of work (jobs hold what outlives it).
  AlignedVector<float> x_, normed_, gate_, up_, clipped_;
  std::vector<cpu::KeyRange> key_ranges_;
  cpu::AttentionWorkspace attention_;
};

}  // namespace gemmaserve
