// The Gemma 4 vision tower (HF's Gemma4VisionModel) and its projection into the text model
// (Gemma4MultimodalEmbedder): the patches of one preprocessed image become soft-token
// embeddings that replace the image's placeholder tokens. Not SigLIP: a learned 2-D position
// table, 2-D RoPE, q/k/v norms, attention scale 1, optional clipped linears, k×k average
// pooling scaled by sqrt(hidden), optional standardize (spec §5.2).
#pragma once

#include <cstdint>
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
  void encode(const ImagePatches& image, std::vector<float>* out);

 private:
  // Where each real patch of an image goes (plan_pooling in gemma4_vision.cpp).
  struct PatchPlan {
    std::vector<int32_t> xs, ys, slot;  // per real patch, in patch order
    std::vector<int64_t> rows;          // index of each real patch among all the patches
    std::vector<uint8_t> used;          // per pooled slot: kept as a soft token
    int32_t num_slots = 0;
    int soft_tokens = 0;
  };
  static void plan_pooling(const VisionConfig& c, std::span<const int32_t> positions, PatchPlan* p);
  friend int vision_soft_tokens(const VisionConfig& config, std::span<const int32_t> positions);

  void matmul(const WeightMatrix& w, const float* x, int64_t ldx, int64_t t, float* y, int64_t ldy);
  void linear(const ClippedLinear& c, const float* x, int64_t t, float* y);
  void for_rows(int64_t rows, FunctionRef<void(int64_t, int64_t)> fn);
  void embed_patches(const ImagePatches& image);
  void encoder_layer(const VisionLayerWeights& l);
  void pool_and_project(std::vector<float>* out);

  const ModelWeights& w_;
  const VisionConfig& cfg_;
  ThreadPool* pool_;
  cpu::MatmulPrecision precision_;
  std::vector<float> inv_freq_;  // head_dim / 4 slots, the same for the x and the y half

  PatchPlan plan_;  // of the image being encoded
  AlignedVector<float> x_, h_, normed_, q_, k_, v_, attn_, gate_, up_, clipped_;
  AlignedVector<float> cos_, sin_;  // [rows, 2 (x then y), head_dim / 4]
  std::vector<cpu::KeyRange> key_ranges_;
  cpu::AttentionWorkspace attention_;
};

}  // namespace gemmaserve
