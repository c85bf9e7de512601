// The Gemma 4 MTP "assistant" drafter (HF Gemma4AssistantForCausalLM): a few Q-only decoder
// layers that attend over the target's KV cache. One draft step takes the newest token (not
// yet in the target's cache) and a backbone-wide hidden state, and returns draft logits and
// the next step's hidden state; k steps draft k tokens, all at the same position over the
// same target KV. Holds no request state. Layout and sources: docs/MTP_DRAFTER.md.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <vector>

#include "core/thread_pool.h"
#include "model/gemma4_assistant_config.h"
#include "model/kv_cache.h"
#include "model/weights.h"

namespace gemmaserve {

struct AssistantWeights {
  AssistantConfig config;
  WeightMatrix embed_tokens;            // [V, h]: the drafter's own table (the tied LM head)
  WeightMatrix lm_head;                 // == embed_tokens when tied
  std::vector<float> final_norm;        // [h]
  WeightMatrix pre_projection;          // [h, 2B]
  WeightMatrix post_projection;         // [B, h]
  std::vector<LayerWeights> layers;     // q_proj, q_norm, o_proj, norms, MLP, layer_scalar only
  WeightMatrix centroids;               // [C, h] with use_ordered_embeddings
  std::vector<int32_t> token_ordering;  // [V]: cluster c holds tokens [c*V/C, (c+1)*V/C)
  std::shared_ptr<const Checkpoint> checkpoint;
  std::vector<std::shared_ptr<const void>> owned_buffers;
};

// Loads config.json and the safetensors of an assistant folder, checking every name and shape
// (InputError naming file and tensor). k/v tensors, if a checkpoint has them, are ignored.
AssistantWeights load_assistant_weights(const std::filesystem::path& dir);

// Quantizes the drafter's matrices in place at load (Q8_0, Q4_0 or Q4_K as model/quantize.h
// does for the target: the tied head and the centroids at the embedding's type).
void quantize_assistant_weights(AssistantWeights& w, DType type, ThreadPool* pool);

// For each attention type, the target layer whose cache the drafter's layers of that type
// read: the last target layer of the type that owns a cache (vLLM's mapping; HF's
// shared_kv_states). InputError when the pair does not fit (widths, vocabularies, head
// geometry of each drafter layer against its target layer, a type the target lacks).
std::array<int, kNumAttentionTypes> assistant_target_kv_layers(const AssistantConfig& assistant,
                                                               const TextConfig& target);

// One sequence's draft step input.
struct DraftInput {
  int32_t token = 0;     // the newest token: sampled, not yet in the target's cache
  int32_t position = 0;  // its position == the number of tokens in the target's cache
  // backbone_hidden_size floats: the target's final-normed hidden state at position - 1
  // (ForwardOutput::hidden) on the first step, the previous step's DraftOutput::hidden after.
  const float* hidden = nullptr;
  // The target's block tables (as in SequenceInput), covering positions < `position`.
  std::array<std::span<const int32_t>, kNumAttentionTypes> block_tables;
};

struct DraftOutput {
  std::vector<float> logits;  // [rows, vocab_size]
  std::vector<float> hidden;  // [rows, backbone_hidden_size]: post_projection, next step's input
  int rows = 0;
};

class Gemma4Assistant {
 public:
  // `target` (its embedding table, read for every input token) must outlive the drafter;
  // InputError when the pair does not fit or the target is split over ranks.
  Gemma4Assistant(AssistantWeights weights, const ModelWeights& target,
                  std::shared_ptr<ThreadPool> pool);
  ~Gemma4Assistant();

  const AssistantConfig& config() const { return w_.config; }
  const AssistantWeights& weights() const { return w_; }
  int vocab_size() const { return w_.config.text.vocab_size; }
  // The target layers the drafter reads, per attention type (see assistant_target_kv_layers).
  const std::array<int, kNumAttentionTypes>& target_kv_layers() const { return kv_layers_; }

  // One draft step for every sequence of `batch`, reading `target_cache`.
  void step(std::span<const DraftInput> batch, const KvCache& target_cache, DraftOutput* out);

  // `k` greedy draft steps per sequence: tokens[i * k + j] is sequence i's j-th draft. Step
  // j + 1 feeds step j's argmax token and hidden state at the same position.
  void draft_greedy(std::span<const DraftInput> batch, int k, const KvCache& target_cache,
                    std::vector<int32_t>* tokens);

 private:
  struct Scratch;
  void embed_inputs(std::span<const DraftInput> batch);
  void layer(int l, std::span<const DraftInput> batch, const KvCache& cache);
  void logits(DraftOutput* out);
  void linear(const WeightMatrix& w, const float* x, int64_t rows, float* y);

  AssistantWeights w_;
  const ModelWeights& target_;
  std::shared_ptr<ThreadPool> pool_;
  std::array<int, kNumAttentionTypes> kv_layers_{};
  std::unique_ptr<Scratch> scratch_;
};

}  // namespace gemmaserve
