// The Gemma 4 text decoder forward pass over a ragged batch. Holds no request state: every call
// gets the new tokens of each sequence, their positions and where their K/V live.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/matmul.h"
#include "model/gemma4_audio_features.h"
#include "model/gemma4_audio_tower.h"
#include "model/gemma4_vision.h"
#include "model/kv_cache.h"
#include "model/weights.h"

namespace gemmaserve {

class Communicator;
struct CommunicatorStats;

// Which rows of logits a sequence wants from this step.
enum class LogitsWanted { kNone, kLast, kAll };

// Inputs that replace the token embeddings of consecutive positions (an image's soft tokens
// from encode_image): row i, hidden_size floats, is the input at position first_pos + i.
struct EmbeddingRows {
  int32_t first_pos = 0;
  int32_t count = 0;
  const float* rows = nullptr;
};

// Positions [begin, end) of one image's soft tokens.
struct PositionRange {
  int32_t begin = 0;
  int32_t end = 0;
};

struct SequenceInput {
  std::span<const int32_t> tokens;  // new tokens, at positions start_pos .. start_pos+n-1
  int32_t start_pos = 0;            // tokens of this sequence already in the cache
  // Logical block -> physical block in `cache`, per attention type, covering every position
  // < start_pos + tokens.size() that attention may read (sliding layers only read the window).
  std::array<std::span<const int32_t>, kNumAttentionTypes> block_tables;
  LogitsWanted logits = LogitsWanted::kLast;
  // At these positions (only this step's are read) the input is the given row, not sqrt(H)
  // scaled, and the per-layer token embedding is the pad token's, as HF does for placeholders.
  std::span<const EmbeddingRows> embeddings;
  // The sequence's image blocks. With use_bidirectional_attention "vision" a block's tokens also
  // attend to its later tokens on sliding-attention layers (earlier keys stay bounded by the
  // window; full-attention layers stay causal, as in HF); otherwise they are plain causal. A
  // block with positions in this step must lie wholly inside it.
  std::span<const PositionRange> vision_blocks;
};

struct ForwardOutput {
  // Rows of `vocab_size` soft-capped logits, in batch order: for each sequence, nothing (kNone),
  // its last token (kLast) or every new token (kAll). Under tensor parallelism only rank 0
  // receives them (other ranks get `rows` and no logits).
  std::vector<float> logits;
  int rows = 0;
  // Set before forward() to also receive, for the same rows, the final-normed hidden states
  // (hidden_size floats each: what the LM head reads; an MTP drafter's input).
  bool return_hidden = false;
  std::vector<float> hidden;
};

// Settings fixed for the model's whole life: never chosen per step or per batch size, so a
// token's logits do not depend on which other tokens share its step (batch invariance).
struct Gemma4ModelOptions {
  // kBF16 rounds the activations of bf16 weight matrices to bf16 for AVX512_BF16 dot products
  // (about twice the f32 rate, for prefill) where the CPU has them; quantized matrices keep
  // their int8 path and the MoE router f32. kF32 keeps the golden logits. See
  // docs/QUANTIZATION.md.
  cpu::MatmulPrecision matmul_precision = cpu::MatmulPrecision::kF32;
  // Regroup BF16 / Q8_0 / Q4_0 matrices 16 rows at a time (kernels/cpu/interleave.h) where
  // the AVX-512 kernels run: one sequential stream per thread for decode, and for Q8_0 / Q4_0
  // about 3x the int8 rate of prefill and batched decode. Off only to compare with the rows.
  bool interleave_weights = true;
  // Most floats of per-(row, expert choice) MoE output held at once (64 MiB); longer batches
  // run the experts in passes of rows, with the same bits. Lowered only by tests.
  int64_t moe_slot_floats = int64_t{16} << 20;
};

// Parses a --cpu-matmul-precision value, "f32" or "bf16"; InputError naming `flag` otherwise.
cpu::MatmulPrecision parse_matmul_precision(const std::string& text, const std::string& flag);
const char* matmul_precision_name(cpu::MatmulPrecision precision);

// Where kBF16 takes effect for `weights` on this CPU (the matmul's own dispatch rule).
struct Bf16ActivationCoverage {
  int bf16_matrices = 0;           // weight matrices that run with bf16 activations
  int matrices = 0;                // all weight matrices the forward pass multiplies with
  std::string unavailable_reason;  // why none do, or "" (CPU, kernel level, weight dtype)
};
Bf16ActivationCoverage bf16_activation_coverage(const ModelWeights& weights);

class Gemma4Model {
 public:
  // `communicator` joins the ranks of a tensor-parallel model (weights sliced for its rank and
  // size, see model/tensor_parallel.h); nullptr for a whole model. Every rank calls forward()
  // with the same batch.
  Gemma4Model(ModelWeights weights, std::shared_ptr<ThreadPool> pool,
              Gemma4ModelOptions options = {},
              std::shared_ptr<Communicator> communicator = nullptr);
  ~Gemma4Model();

  const ModelConfig& config() const { return weights_.config; }
  const TextConfig& text_config() const { return weights_.config.text; }
  int vocab_size() const { return weights_.config.text.vocab_size; }
  const Gemma4ModelOptions& options() const { return options_; }
  // The weights as the kernels use them (quantized matrices may be interleaved).
  const ModelWeights& weights() const { return weights_; }

  // One step for a ragged batch: writes the new tokens' K/V into `cache` and returns logits.
  // Every weight matrix is applied once to all the batch's tokens.
  // Under tensor parallelism rank 0 calls it (with its engine's cache) and first sends the
  // batch to the other ranks, which run follow().
  void forward(std::span<const SequenceInput> batch, KvCache& cache, ForwardOutput* out);

  // Tensor-parallel ranks other than 0: runs every step rank 0's forward() sends, on a KV
  // cache of the same geometry holding this rank's heads, until rank 0's model is destroyed.
  void follow();

  // Soft tokens of one preprocessed image (its position ids) on this model's image path.
  int image_soft_tokens(std::span<const int32_t> positions) const;
  // Soft-token embeddings of one image for SequenceInput::embeddings: image_soft_tokens()
  // rows of hidden_size floats, in placeholder order, into `out`. InputError when the model has
  // no vision tower or the image is malformed. Runs on the model's pool, so not during forward().
  void encode_image(const ImagePatches& image, std::vector<float>* out);
  // The same, resumable (Gemma4VisionEncoder::begin/advance/finish): `budget` is in
  // patch-stages (one patch through one of an encoder layer's three stages); advance returns
  // what it spent (at least one unit). Bit-identical to encode_image however it is sliced.
  std::unique_ptr<VisionEncodeJob> begin_image_encode(const ImagePatches& image);
  int64_t advance_image_encode(VisionEncodeJob& job, int64_t budget);
  void finish_image_encode(VisionEncodeJob& job, std::vector<float>* out);

  // Audio input: the unified family's embedder (raw 16 kHz samples, one soft token per
  // audio_embed_dim samples) or the audio tower (16 kHz samples -> log-mel features with HF's
  // default Gemma4AudioFeatureExtractor -> tower -> embed_audio). audio_soft_tokens and
  // encode_audio throw InputError when the model takes no audio; encode_audio writes
  // audio_soft_tokens(samples.size()) rows of hidden_size.
  bool accepts_audio() const;
  int64_t audio_soft_tokens(int64_t samples) const;
  void encode_audio(std::span<const float> samples, std::vector<float>* out);
  // The checkpoint's feature extractor settings for the audio tower (load_gemma4_audio_feature_
  // config; the defaults until set). InputError for options the extractor cannot run.
  void set_audio_feature_options(const Gemma4AudioFeatureOptions& options);
  // The same, resumable, so the engine slices a clip's encode between steps as it slices an
  // image's: `budget` in time-step stages (AudioEncodeJob); advance returns what it spent (at
  // least one stage). The 12B's embedder is one stage. Bit-identical to encode_audio.
  std::unique_ptr<AudioEncodeJob> begin_audio_encode(std::span<const float> samples);
  int64_t advance_audio_encode(AudioEncodeJob& job, int64_t budget);
  void finish_audio_encode(AudioEncodeJob& job, std::vector<float>* out);
  // The audio tower's soft tokens of one clip's log-mel features (as the extractor gives them,
  // padded or not): gemma4_audio_soft_tokens(features.num_frames) rows of hidden_size into `out`.
  // InputError when the model has no audio tower or the features are malformed.
  void encode_audio_features(const AudioFeatures& features, std::vector<float>* out);

  // What this rank's collectives sent so far (zeros without tensor parallelism).
  CommunicatorStats communication_stats() const;

  // Number of weight-matrix applications so far (one per matrix per step; tests count it).
  uint64_t matmul_calls() const { return matmul_calls_.load(); }

 private:
  struct Scratch;
  bool leads_ranks() const;
  // Sends one step's plan (nullptr: stop) to the other ranks (gemma4_step_plan.cpp).
  void send_step(const std::span<const SequenceInput>* batch, const KvCache* cache);
  void run_forward(std::span<const SequenceInput> batch, KvCache& cache, ForwardOutput* out);
  ModelWeights weights_;
  std::shared_ptr<ThreadPool> pool_;
  Gemma4ModelOptions options_;
  std::shared_ptr<Communicator> communicator_;
  std::unique_ptr<Scratch> scratch_;
  std::atomic<uint64_t> matmul_calls_{0};
  std::vector<uint8_t> plan_bytes_;  // the step plan sent or received, reused
};

}  // namespace gemmaserve
