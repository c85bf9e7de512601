// Tensor parallelism's step plan: rank 0 sends each forward() batch (tokens, positions, block
// tables, logits wanted, image embedding rows and blocks) and its KV cache geometry to the
// other ranks, which run the same forward on their slices. Private to Gemma4Model.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "model/gemma4_model.h"
#include "model/kv_cache.h"

namespace gemmaserve::detail {

struct KvGeometry {
  int block_size = 0;
  std::array<int, kNumAttentionTypes> num_blocks = {0, 0};
  int dtype = 0;  // cpu::KvDtype
};

// The bytes of one step (or of the stop message when `batch` is null).
void encode_step_plan(const std::span<const SequenceInput>* batch, const KvGeometry& kv,
                      int64_t hidden_size, std::vector<uint8_t>* out);

// A decoded step: the batch's spans point into this object's own storage.
struct StepPlan {
  bool stop = false;
  KvGeometry kv;
  std::vector<SequenceInput> batch;
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::array<std::vector<int32_t>, kNumAttentionTypes>> tables;
  std::vector<std::vector<EmbeddingRows>> embeddings;
  std::vector<std::vector<float>> embedding_floats;
  std::vector<std::vector<PositionRange>> vision_blocks;
};

// Parses encode_step_plan's bytes into `plan` (reusing its storage).
void decode_step_plan(const std::vector<uint8_t>& bytes, int64_t hidden_size, StepPlan* plan);

}  // namespace gemmaserve::detail
