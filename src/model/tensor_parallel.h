// Megatron-style tensor parallelism of the Gemma 4 text decoder: which part of each weight one
// rank holds, and the slicing of a loaded checkpoint down to that part.
//
// Split: query heads and KV heads across ranks (a KV head is replicated on the ranks whose query
// heads read it when there are fewer KV heads than ranks, as vLLM does); q/k/v and the MLP's
// gate/up by rows (column parallel), o_proj and down by columns (row parallel, one all-reduce
// after each); every expert's intermediate dim likewise (the router is replicated); embedding
// and LM head by vocabulary rows. The per-layer-embedding (PLE) weights are replicated.
#pragma once

#include <cstdint>
#include <vector>

namespace gemmaserve {

struct ModelWeights;
struct WeightMatrix;

// This rank's place in the split (size 1 = the whole model).
struct TensorParallelShard {
  int rank = 0;
  int size = 1;
  // Vocabulary rows [vocab_begin, vocab_begin + vocab_counts[rank]) of embed_tokens / lm_head;
  // vocab_counts[r] for every rank r (logits are gathered with these counts).
  int64_t vocab_begin = 0;
  std::vector<int64_t> vocab_counts;
  // MoE experts [expert_begin, expert_end) held whole (expert parallelism), or every expert
  // with a slice of its intermediate dim (expert_end = -1: all of them).
  int expert_begin = 0;
  int expert_end = -1;
};

// Replaces `w`'s matrices by this rank's slices (row slices stay views of the mapped file,
// column slices and the experts' gate|up rows are copied) and its config's head counts and
// intermediate sizes by the rank's (vocab_size stays the model's). InputError when the heads do
// not divide: num_attention_heads % size, and KV heads % size or size % KV heads, per layer.
// Call before quantizing (slices are quantized, not the whole) and before regrouping.
// With `expert_parallel` each rank holds num_experts / size whole experts instead (vLLM's
// --enable-expert-parallel); attention and the dense MLP stay split as above.
void shard_for_tensor_parallel(ModelWeights& w, int rank, int size, bool expert_parallel = false);

// The text decoder's matrices this rank multiplies or looks up (present ones only).
std::vector<const WeightMatrix*> held_matrices(const ModelWeights& w);

// Bytes of the weights this rank multiplies or looks up (its slices; the PLE table included).
uint64_t held_weight_bytes(const ModelWeights& w);

}  // namespace gemmaserve
