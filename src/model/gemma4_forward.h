// Private to the Gemma 4 model: the reusable scratch buffers and the per-call forward runner.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <vector>

#include "core/aligned.h"
#include "core/function_ref.h"
#include "core/thread_pool.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/matmul.h"
#include "model/gemma4_model.h"
#include "model/kv_cache.h"
#include "model/weights.h"
#include "parallel/communicator.h"

namespace gemmaserve::detail {

// RoPE tables shared by every layer with the same (type, head_dim).
struct RopeGroup {
  int head_dim = 0;
  int rotated_pairs = 0;
  int type = 0;                 // AttentionType whose theta the table uses
  std::vector<float> inv_freq;  // head_dim / 2
};

// How the tokens of an image block see each other.
enum class VisionBlockMask {
  kCausal,
  // Gemma 4 (HF after transformers PR 46850): sliding layers only, and the window still bounds
  // the earlier keys: (causal OR same block) AND key > query - window; full layers causal.
  kSlidingLayers,
  // The unified Gemma 4: every layer, the whole block: (causal [AND in window]) OR same block.
  kWholeBlock,
};

// Fixed per-model facts derived once at construction.
struct Gemma4Plan {
  std::vector<RopeGroup> rope_groups;
  std::vector<int> layer_rope_group;  // per layer
  int first_shared = 0;               // first KV-shared layer (== L when none)
  bool type_used[kNumAttentionTypes] = {false, false};
  float eps = 1e-6f;
  // Multimodal placeholder ids (image, video, audio; -1 = none): HF looks them up as the pad id.
  std::array<int32_t, 3> placeholder_ids = {-1, -1, -1};
  // How image blocks attend (use_bidirectional_attention "vision"; causal otherwise).
  VisionBlockMask vision_mask = VisionBlockMask::kCausal;
};

// The new rows of one sequence currently held in the activations.
struct SeqRows {
  int32_t seq = 0;
  int64_t row = 0;        // first row in the activation buffers
  int32_t count = 0;      // consecutive rows
  int32_t first_pos = 0;  // position of the first row
};

// Up to kMoeItemRows rows routed to one expert: the unit of expert work one thread runs alone.
struct MoeItem {
  int32_t expert = 0;
  int32_t first = 0;  // slot of the first row (slots of an expert are consecutive)
  int32_t count = 0;
};

// Buffers reused across forward() calls (grown, never shrunk); activations line-aligned so
// vector loads of a row never straddle two lines (rows are whole lines for every Gemma 4 width).
struct Gemma4Workspace {
  std::vector<int32_t> tokens, positions;
  std::vector<SeqRows> rows;
  AlignedVector<float> x, normed, q, k, v, attn, proj;  // residual and attention block
  AlignedVector<float> gate, up, mlp, ffn;              // feed-forward block
  AlignedVector<float> ple, ple_gate;                   // per-layer embeddings
  AlignedVector<float> local_logits, gathered_logits;   // tensor parallel: this rank's vocab
  std::vector<int64_t> vocab_floats;                    // tensor parallel: logits per rank
  std::vector<AlignedVector<float>> cos, sin;           // per rope group: [rows, head_dim / 2]
  // MoE routing, the expert work items of a pass and each (row, choice) slot's expert output.
  AlignedVector<float> router_in, router_probs, expert_out, expert_sum;
  std::vector<int32_t> topk_index, expert_count, expert_offset, expert_tokens, slot_of;
  std::vector<float> topk_weight, expert_weights;
  std::vector<MoeItem> moe_items;
  std::vector<AlignedVector<float>> expert_scratch;  // per thread: gathered rows, gate|up, act
  bool moe_thread_scratch_ready = false;  // every pool thread's matmul X buffers hold an item
  std::vector<cpu::AttentionSeq> attn_seqs;
  cpu::AttentionWorkspace attention;
  std::vector<cpu::KeyRange> key_ranges;  // per row, for sequences with image blocks
  std::vector<int32_t> row_slot;  // each new row's KV cache slot: physical block * bs + offset
  std::vector<int64_t> keep;      // rows kept by a compaction
};

class Gemma4Forward {
 public:
  Gemma4Forward(const ModelWeights& weights, const Gemma4Plan& plan, ThreadPool* pool,
                Gemma4Workspace& ws, std::atomic<uint64_t>& matmul_calls,
                const Gemma4ModelOptions& options, Communicator* comm)
      : w_(weights),
        cfg_(weights.config.text),
        plan_(plan),
        pool_(pool),
        ws_(ws),
        calls_(matmul_calls),
        precision_(options.matmul_precision),
        moe_slot_floats_(options.moe_slot_floats),
        comm_(comm != nullptr && comm->size() > 1 ? comm : nullptr) {}

  void run(std::span<const SequenceInput> batch, KvCache& cache, ForwardOutput* out);

 private:
  // gemma4_forward.cpp
  void validate(std::span<const SequenceInput> batch, const KvCache& cache) const;
  void embed(std::span<const SequenceInput> batch);
  int32_t embedding_id(int32_t token) const;
  // Explicit key ranges for the rows of sequences with image blocks under plan_.vision_mask
  // (`window` > 0 on sliding layers); attention seq i is the i-th of ws_.rows with rows.
  void set_vision_key_ranges(std::span<const SequenceInput> batch, int window);
  void compute_rope_tables();
  void keep_wanted_rows(std::span<const SequenceInput> batch);
  void logits(ForwardOutput* out);
  // Tensor parallel: sums the ranks' partial rows [0, rows) of a [rows, hidden] buffer.
  void all_reduce_rows(AlignedVector<float>& buf, int64_t rows);
  // Tensor parallel: this rank's vocabulary slice of `rows` logit rows -> whole rows on rank 0.
  void gather_logits(int64_t rows, ForwardOutput* out);
  // Y = X W[row_begin, row_begin + rows)ᵀ at the model's precision, or at `precision`.
  void linear(const WeightMatrix& w, int64_t row_begin, int64_t rows, const float* x, size_t ldx,
              int64_t t, float* y, size_t ldy);
  void linear(const WeightMatrix& w, int64_t row_begin, int64_t rows, const float* x, size_t ldx,
              int64_t t, float* y, size_t ldy, cpu::MatmulPrecision precision);
  // Several whole matrices applied to the same X in one parallel section (q/k/v, gate/up) at
  // the model's precision; falls back to one linear() each when their dtypes or widths differ.
  struct LinearOut {
    const WeightMatrix* w;
    float* y;
    size_t ldy;
  };
  void linear_group(std::initializer_list<LinearOut> outs, const float* x, size_t ldx, int64_t t);
  cpu::MatmulArgs matmul_args(const WeightMatrix& w, int64_t row_begin, int64_t rows,
                              const float* x, size_t ldx, int64_t t, float* y, size_t ldy,
                              cpu::MatmulPrecision precision) const;
  // The weights the product after the next linear()/linear_group() will read (the kernels
  // request their start between the two sections); used by that call only.
  struct WeightBytes {
    const void* data = nullptr;
    size_t bytes = 0;
  };
  // Matrices first..last (an empty matrix ends the run early) when they lie one after another
  // in memory, as the regrouped weights do; else `first` alone.
  static WeightBytes weight_bytes(std::initializer_list<const WeightMatrix*> run);
  // What layer l reads first: its q (and k, v), or the LM head after the last layer.
  WeightBytes layer_first_weights(int l) const;
  void read_next(WeightBytes next) { next_ = next; }
  int64_t num_rows() const;
  void for_rows(int64_t rows, FunctionRef<void(int64_t, int64_t)> fn);
  // Element-wise work over n values on the pool in pieces of whole 64 values (the SIMD ops give
  // an element the same bits wherever its piece starts), so one row is shared out too.
  void for_elements(int64_t n, FunctionRef<void(int64_t, int64_t)> fn);

  // gemma4_layer.cpp
  void layer(int l, std::span<const SequenceInput> batch, KvCache& cache);
  void attention_block(int l, std::span<const SequenceInput> batch, KvCache& cache);
  void feed_forward_block(int l);
  void per_layer_input_block(int l);
  // gemma4_moe.cpp
  void moe_block(int l, int64_t rows);
  void moe_route(int l, int64_t rows);
  void moe_pass(int l, int64_t row_begin, int64_t rows);
  void moe_item(int l, const MoeItem& item, float* scratch, ThreadPool* pool);

  const ModelWeights& w_;
  const TextConfig& cfg_;
  const Gemma4Plan& plan_;
  ThreadPool* pool_;
  Gemma4Workspace& ws_;
  std::atomic<uint64_t>& calls_;
  cpu::MatmulPrecision precision_;  // the model's, for every product of every step
  int64_t moe_slot_floats_;
  Communicator* comm_;  // nullptr unless the model is split over several ranks
  WeightBytes next_;
};

// Builds the plan for a model (validates RoPE and geometry; throws InputError).
Gemma4Plan make_gemma4_plan(const ModelWeights& weights);

}  // namespace gemmaserve::detail
