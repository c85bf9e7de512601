// The inference engine: owns the model, the paged KV cache and the scheduler, and runs the step
// loop on its own thread. Every step schedules chunks of many requests (prefill chunks and
// decodes), runs them through ONE forward call, samples, checks stops and streams the changes.
//
// Thread safety: add_request(s), abort(), stats() and the accessors may be called from any
// thread at any time. Callbacks run on the engine thread, one at a time, never while the engine
// holds its lock, so a callback may call abort() or stats() (but must not block for long: the
// next step waits for it). The forward pass is not reentrant and only the engine thread runs it.
//
// Streaming: a request's callback runs after every step that changed it (new tokens, text or
// prompt logprobs) and exactly once with finished == true, last. The RequestOutput passed is
// the engine's cumulative record (valid during the call only: copy what you keep); the delta is
// what the step added, so an SSE server sends deltas and the concatenation of a completion's
// delta texts / token ids equals its final text / token ids.
//
// n > 1: each of the n samples is its own sequence in the scheduler. With prefix caching on and
// a prompt of at least one full block, samples 1..n-1 enter the scheduler once sample 0 has
// computed the prompt, so they find its full blocks in the prefix cache and compute only the
// partial last block. Sample k of a seeded request uses seed + k (vLLM's ParentRequest rule).
//
// prompt_logprobs: sample 0 skips the prefix cache (every prompt position must be computed) and
// asks for all logits of each prompt chunk; rows are collected across chunks.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/encoder_cache.h"
#include "engine/engine_setup.h"
#include "engine/image_placeholders.h"
#include "engine/json_object_grammar.h"
#include "engine/kv_cache_manager.h"
#include "gemmaserve/llm.h"
#include "gemmaserve/prompt_audio.h"
#include "gemmaserve/prompt_video.h"
#include "gemmaserve/request_output.h"
#include "gemmaserve/sampling_params.h"
#include "io/audio/audio_split.h"
#include "model/config.h"
#include "model/gemma4_image_processor.h"

namespace gemmaserve {

namespace structured {
class CompiledGrammar;
class GrammarCompiler;
}  // namespace structured

class Gemma4Model;
class SpeculativeDecoding;
class KvCache;
class Scheduler;
class ThreadPool;
class Tokenizer;
struct ForwardOutput;
struct ScheduledChunk;

struct EngineRequest {
  std::string request_id;  // unique among unfinished requests
  // With images: one bare <|image|> per image, which add_request expands (see
  // Engine::expand_image_placeholders); RequestOutput::prompt_token_ids are the expanded ids.
  std::vector<int32_t> prompt_token_ids;
  std::vector<PromptImage> images;    // in the order of their <|image|> tokens
  std::vector<PromptAudio> audios;    // in the order of their <|audio|> tokens
  std::vector<PromptVideo> videos;    // in the order of their <|video|> tokens
  std::optional<std::string> prompt;  // the text the ids came from, echoed in the output
  SamplingParams params;
  int priority = 0;  // lower runs first, as vLLM
  std::optional<std::string> cache_salt;
};

// Runs on the engine thread; see the streaming notes above.
using OutputCallback =
    std::function<void(const RequestOutput& output, const RequestOutputDelta& delta)>;

struct Submission {
  EngineRequest request;
  OutputCallback callback;
};

// Counters and gauges for the metrics endpoint (vLLM's names in the comments).
struct EngineStats {
  int num_running = 0;        // vllm:num_requests_running (sequences)
  int num_waiting = 0;        // vllm:num_requests_waiting (sequences, held-back samples included)
  double kv_cache_usage = 0;  // vllm:kv_cache_usage_perc, the fullest group
  std::array<int, kNumAttentionTypes> kv_blocks_total{};   // per attention type
  std::array<int, kNumAttentionTypes> kv_blocks_in_use{};  // ref count > 0
  uint64_t prefix_cache_queries = 0;    // tokens looked up (vllm:prefix_cache_queries)
  uint64_t prefix_cache_hits = 0;       // tokens found (vllm:prefix_cache_hits)
  uint64_t prompt_tokens = 0;           // vllm:prompt_tokens, counted when a prompt is computed
  uint64_t generation_tokens = 0;       // vllm:generation_tokens
  uint64_t computed_tokens = 0;         // tokens sent to the model, recomputation included
  uint64_t steps = 0;                   // forward calls
  uint64_t preemptions = 0;             // vllm:num_preemptions
  uint64_t requests_finished_stop = 0;  // vllm:request_success{finished_reason=...}
  uint64_t requests_finished_length = 0;
  uint64_t requests_aborted = 0;
  uint64_t requests_failed = 0;     // ended by a step error of their own (finish_reason "error")
  uint64_t mm_cache_queries = 0;    // images looked up in the encoder cache (vllm:mm_cache_queries)
  uint64_t mm_cache_hits = 0;       // found there (vllm:mm_cache_hits)
  uint64_t images_encoded = 0;      // vision tower runs
  double encoder_seconds = 0;       // their wall time
  uint64_t encoder_steps = 0;       // steps that ran a slice of an image's encoding
  int64_t encodes_in_progress = 0;  // images partly encoded (their activations are held)
  // Bytes held by the caches requests fill (gemmaserve:*_cache_bytes), and their entries.
  uint64_t encoder_cache_bytes = 0;
  uint64_t encoder_cache_entries = 0;
  uint64_t structured_output_cache_bytes = 0;
  uint64_t structured_output_cache_entries = 0;
  // Speculative decoding (vllm:spec_decode_*): sequences verified with drafts, drafts,
  // accepted drafts, and accepted drafts by position (index 0: the first draft).
  uint64_t spec_decode_num_drafts = 0;
  uint64_t spec_decode_num_draft_tokens = 0;
  uint64_t spec_decode_num_accepted_tokens = 0;
  std::vector<uint64_t> spec_decode_num_accepted_tokens_per_pos;
  // Tensor parallelism: this rank's collectives (all-reduces, logit gathers, step plans).
  uint64_t tp_collectives = 0;
  uint64_t tp_bytes_sent = 0;
  double tp_seconds = 0;
};

class Engine {
 public:
  // Loads the checkpoint, sizes and allocates the KV cache (logging blocks, tokens and the
  // maximum concurrency) and starts the engine thread. Throws InputError for bad arguments.
  explicit Engine(const EngineArgs& args);
  // Aborts what is still running (callbacks get finish_reason "abort") and joins the thread.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request. Throws InputError (vLLM's wording) for a bad request; the callback is
  // then never called. Prompt ids go through the BOS rule, then image expansion (below) when
  // the request has images or the model a vision tower.
  void add_request(EngineRequest request, OutputCallback callback);
  // Queues all or none: every request is checked first, and they enter the same step.
  void add_requests(std::vector<Submission> submissions);
  // Ends a request now: its blocks return to the pool before abort() returns, and its callback
  // gets a last call (finish_reason "abort") from the engine thread. False if unknown/finished.
  bool abort(const std::string& request_id);

  EngineStats stats() const;
  // For the data-parallel router (engine/data_parallel/): the prompt tokens this engine's prefix
  // cache would hit now for a prompt of `num_tokens` whose full blocks hash to `block_hashes`
  // (nothing is allocated or counted).
  int cached_prefix_tokens(std::span<const BlockHash> block_hashes, int num_tokens) const;
  // The error the engine thread stopped with; nullopt while it runs. Any thread.
  std::optional<std::string> failure() const;

  // Token ids of a text prompt: the tokenizer's encoding with exactly one BOS in front.
  // InputError when the engine has no tokenizer.
  std::vector<int32_t> encode_prompt(const std::string& text) const;
  // The BOS rule every prompt goes through (Gemma 4 degrades badly without BOS, and its IT
  // tokenizers do not add one): leading BOS ids collapse to exactly one at position 0, added when
  // missing. Unchanged when the engine has no tokenizer or the tokenizer no BOS.
  std::vector<int32_t> prompt_with_bos(std::vector<int32_t> ids) const;
  const Tokenizer* tokenizer() const { return tokenizer_.get(); }

  // Images. Each bare <|image|> of `ids` becomes <|image> + N x <|image|> + <image|> for the
  // next image, N = image_soft_tokens() (Hugging Face's Gemma 4 processor rule). InputError:
  // "This model does not accept image input: MODEL has no vision encoder." (images given to a
  // model without a vision tower), vLLM's "At most N image(s) may be provided in one prompt.
  // ..." (over --limit-mm-per-prompt), a bad max_soft_tokens, an image HF cannot resize, or
  // the <|image|> count differing from the images (see image_placeholders.h). Without images
  // on a model without a vision tower, the ids come back unchanged. Any thread.
  ExpandedPrompt expand_image_placeholders(std::span<const int32_t> ids,
                                           std::span<const PromptImage> images) const;
  // Images and audio clips: each bare <|audio|> becomes <|audio> + N x <|audio|> + <audio|>
  // for the next clip, N = audio_soft_tokens(); the image rule as above. `placeholders` are
  // the images' then the clips' runs, each in prompt order. InputError as above, and "This
  // model does not accept audio input: MODEL has no audio embedder." (clips given to a model
  // without one), "At most N audio(s) ..." (over --limit-mm-per-prompt), an empty clip, a clip
  // over --max-audio-seconds. A clip longer than the model hears at once (30 s) is heard in
  // pieces (audio_pieces), each its own span: its <|audio|> stands for all of them.
  // Videos: each bare <|video|> becomes the next video's frames as video_frame_ids lays them
  // out; their runs of <|video|> come after the clips' in `placeholders`, one per frame.
  ExpandedPrompt expand_media_placeholders(std::span<const int32_t> ids,
                                           std::span<const PromptImage> images,
                                           std::span<const PromptAudio> audios,
                                           std::span<const PromptVideo> videos = {}) const;
  // One video's tokens (Hugging Face's Gemma4Processor.replace_video_token, tokenized per
  // frame as vLLM does): per frame the tokens of "mm:ss " (" mm:ss " after the first), then
  // <|image> + N x <|video|> + <image|>, N = the frame's soft tokens. InputError: "This model
  // does not accept video input: ...", an empty video, frames and timestamps that differ in
  // number, a bad budget, no tokenizer for the timestamps.
  std::vector<int32_t> video_frame_ids(const PromptVideo& video) const;
  // The frames of `video` as the images the vision path encodes (the video's budget each).
  static std::vector<PromptImage> video_frames_as_images(PromptVideo video);
  // InputError "This model does not accept video input: ..." without a vision path.
  void check_accepts_video() const;
  // expand_media_placeholders without videos.
  ExpandedPrompt expand_image_and_audio(std::span<const int32_t> ids,
                                        std::span<const PromptImage> images,
                                        std::span<const PromptAudio> audios) const;
  // Soft tokens of a clip of `samples` 16 kHz samples (ceil(samples / audio_embed_dim)).
  int audio_soft_tokens(size_t samples) const;
  // The pieces a clip is heard in: one up to 30 s, else io/audio's split_audio cuts. InputError
  // for a clip over --max-audio-seconds ("an audio clip of 700.0 s is longer than
  // --max-audio-seconds (600 s)").
  std::vector<audio::SampleRange> audio_pieces(std::span<const float> samples) const;
  bool has_audio() const;
  // Soft tokens `image` becomes at its budget (its max_soft_tokens, else the engine's).
  int image_soft_tokens(const PromptImage& image) const;
  // Soft tokens of a width x height picture at `max_soft_tokens` (validated) on this model.
  int soft_tokens_at(int width, int height, int max_soft_tokens) const;
  // The budget of images that bring none: --mm-processor-kwargs max_soft_tokens, else the
  // checkpoint's processor config, else 280.
  int default_max_soft_tokens() const { return image_processor_.max_soft_tokens; }
  // The image processor in effect (checkpoint's config + --mm-processor-kwargs) at the default
  // budget; an image's own budget replaces max_soft_tokens.
  const Gemma4ImageProcessorOptions& image_processor() const { return image_processor_; }
  // What an image at `max_soft_tokens` is preprocessed with on this model's image path (the
  // unified family patchifies merged patches).
  Gemma4ImageProcessorOptions image_processor_options(int max_soft_tokens) const;
  bool has_vision() const;
  // Stop ids unless ignore_eos: tokenizer eos + every checkpoint eos_token_id (config.json,
  // generation_config.json, the --generation-config folder and its override).
  const std::vector<int32_t>& eos_token_ids() const { return eos_ids_; }
  int vocab_size() const;
  int max_model_len() const { return max_model_len_; }
  const ModelConfig& model_config() const;
  const KvCachePlan& kv_cache_plan() const { return plan_; }
  const EngineArgs& args() const { return args_; }
  // Where the tokenizer and chat template come from: the GGUF model file of a GGUF model, else
  // the model folder.
  const std::filesystem::path& model_source() const { return model_source_; }
  // SamplingParams with the generation-config defaults applied (vLLM's
  // get_default_sampling_params); requests start from these and override fields.
  SamplingParams default_sampling_params() const;

 private:
  struct Sequence;
  struct RequestState;
  struct RequestMedia;
  struct StepPlan;
  struct Sampled;
  struct StepFailure;
  struct Emission {
    std::shared_ptr<RequestState> request;
    RequestOutputDelta delta;
  };

  // The BOS rule and image expansion of a request's prompt, and its images' hashes (the costly
  // part of a request's checks, so it runs before the lock).
  std::vector<RequestMedia> prepare_prompt(EngineRequest& request) const;
  // Checks a request and builds its state (no engine state changes). Under mutex_.
  // `grammar`: the compiled structured-output spec of the request's answer constraint, if any.
  std::shared_ptr<RequestState> make_request_state(
      Submission submission, std::vector<RequestMedia> images,
      std::shared_ptr<const structured::CompiledGrammar> grammar);
  // Hands a sequence to the scheduler and indexes it. Under mutex_.
  void admit_sequence(RequestState& request, Sequence& seq);

  void run_loop();
  // Schedules one step and copies what the forward needs. Under mutex_.
  bool plan_step(StepPlan* plan);
  // Whether a request's image has its rows (fetching them from the encoder cache). Engine
  // thread, under the lock (SchedulerConfig::image_ready).
  bool image_ready(const std::string& scheduler_id, size_t image);
  // The step's encoder work: slices of the encodes of images that stopped a chunk, within the
  // budget the chunks left (see run_encoder in engine.cpp). Engine thread, outside the lock.
  void run_encoder(StepPlan* plan);
  // The chunks' soft-token rows, embeddings and image blocks. Engine thread, outside the lock.
  void attach_images(StepPlan* plan);
  // Checks an encoded item's rows against its placeholder, keeps them and caches them.
  void finish_encode(RequestMedia& media, std::shared_ptr<std::vector<float>> rows, StepPlan* plan);
  // Samples every chunk that ends at its request's last token, and collects prompt logprobs.
  // What fails for one sequence (masks, sampler, logprobs, stop checks) goes to `failed`
  // instead of `out`, so only its request ends.
  void sample_step(const StepPlan& plan, const ForwardOutput& forward, std::vector<Sampled>* out,
                   std::vector<StepFailure>* failed);
  // Speculative decoding: drafts for every sequence the step sampled and that goes on
  // (engine_speculative.cpp). Engine thread, outside the lock. A proposal that fails is retried
  // one sequence at a time; a sequence that fails alone goes to `failed`.
  void propose_drafts(const StepPlan& plan, const ForwardOutput& forward,
                      std::vector<Sampled>* sampled, std::vector<StepFailure>* failed);
  // One sample's tokens: verified drafts (when the item has them) or one draw. Any thread.
  void sample_item(const StepPlan& plan, std::span<const float> rows, Sampled* s);
  // Applies a step's samples to the scheduler and the outputs. Under mutex_.
  void apply_step(StepPlan& plan, std::vector<Sampled>& sampled, std::vector<Emission>* emit);
  // Final deltas of requests aborted since the last step. Under mutex_.
  void take_aborted(std::vector<Emission>* emit);
  // Aborts every live request (destructor, engine failure). Under mutex_.
  void abort_all_locked();
  // Ends one request whose step failed for it alone: its unfinished completions get
  // finish_reason "error" and the output its error. Under mutex_.
  void fail_request_locked(RequestState& request, RequestError error);
  bool abort_locked(const std::string& request_id);
  void deliver(std::vector<Emission>& emissions);

  EngineArgs args_;
  std::shared_ptr<ThreadPool> pool_;
  std::unique_ptr<Gemma4Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::filesystem::path model_source_;
  std::unique_ptr<SpeculativeDecoding> speculative_;  // null without --speculative-config
  std::vector<std::string> speculative_ended_;        // sequences the proposer forgets (mutex_)
  // The vocabulary as a byte trie for response_format json_object, built by the first such
  // request (call_once: requests arrive from any thread).
  std::shared_ptr<const JsonTokenTrie> json_trie();
  std::once_flag json_trie_once_;
  std::shared_ptr<const JsonTokenTrie> json_trie_;
  std::unique_ptr<structured::GrammarCompiler> grammars_;  // structured outputs' specs, cached
  GenerationDefaults generation_;
  std::vector<int32_t> eos_ids_;
  int max_model_len_ = 0;
  Gemma4ImageProcessorOptions image_processor_;  // set at load (vision checkpoints)
  KvCachePlan plan_;
  std::unique_ptr<KvCache> cache_;  // written by the engine thread only (inside forward)
  EncoderCache encoder_cache_;      // engine thread only
  // Encode jobs alive (EngineStats::encodes_in_progress); shared with their deleters.
  std::shared_ptr<std::atomic<int64_t>> encodes_alive_ = std::make_shared<std::atomic<int64_t>>(0);

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  // Guarded by mutex_:
  std::unique_ptr<Scheduler> scheduler_;
  std::map<std::string, std::shared_ptr<RequestState>> requests_;  // by user request id
  std::unordered_map<std::string, Sequence*> sequences_;  // in the scheduler, by scheduler id
  std::vector<std::shared_ptr<RequestState>> aborted_;    // awaiting their final callback
  uint64_t next_sequence_ = 0;
  uint64_t change_count_ = 0;  // bumped by add/abort, so an idle loop notices work
  int num_held_samples_ = 0;   // n > 1 samples waiting for sample 0's prompt
  EngineStats counters_;
  bool stopping_ = false;
  std::optional<std::string> failure_;  // the engine thread died with this error

  std::thread thread_;  // last: starts after everything above exists
};

}  // namespace gemmaserve
