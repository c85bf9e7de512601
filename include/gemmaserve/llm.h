// Offline inference API: load a checkpoint once, generate for many prompts.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "gemmaserve/prompt_audio.h"
#include "gemmaserve/prompt_image.h"
#include "gemmaserve/prompt_video.h"
#include "gemmaserve/request_output.h"
#include "gemmaserve/sampling_params.h"

namespace gemmaserve {

class Engine;
class EngineReplicas;
class Tokenizer;

// Engine settings, named after vLLM's EngineArgs (the CLI flags are these names with dashes).
struct EngineArgs {
  // Hugging Face checkpoint folder, Gemma 4 GGUF file (first part of a split one) or a folder of
  // GGUF files.
  std::string model;
  std::string tokenizer;  // tokenizer.json / GGUF / folder; empty = the model's, if any
  std::string mmproj;     // vision projector GGUF of a GGUF model (llama-server's --mmproj)
  int threads = 0;        // 0 = all cores
  int max_model_len = 0;  // 0 = the config's max_position_embeddings
  int block_size = 16;
  // KV cache element type: auto (the checkpoint's: bf16, or f32 / f16 for such checkpoints),
  // bf16, f16, f32, fp8 (e4m3 with a scale per token and KV head) or q8_0.
  std::string kv_cache_dtype = "auto";
  // KV cache size. Explicit bytes win; else gpu_memory_utilization of the memory available
  // after loading the weights; else min(4 GiB, half of it) (vLLM's CPU backend default is 4 GiB).
  // Never more than max_num_seqs sequences of max_model_len tokens could use.
  std::optional<int64_t> kv_cache_memory_bytes;
  std::optional<double> gpu_memory_utilization;
  int max_num_seqs = 256;  // vLLM's default
  // Token budget of one step. Smaller than vLLM's GPU default (8192): a CPU step costs time in
  // proportion to its tokens, and decodes sharing a step with a prefill chunk wait for all of it.
  int max_num_batched_tokens = 2048;
  int long_prefill_token_threshold = 0;  // > 0: per-request chunk cap of a step
  bool enable_prefix_caching = true;
  std::string generation_config = "auto";  // "auto" (the model's), "vllm" (none) or a folder
  std::string override_generation_config;  // JSON object merged over it; empty = none
  uint64_t seed = 0;                       // draws the seeds of requests without their own
  bool show_progress = true;               // progress bar on stderr for large checkpoints
  // Weight quantization applied at load: "" (none), "q8_0", "q4_0" or "q4_k"; or vLLM's name
  // of a quantized checkpoint's own method ("gptq", "awq", "compressed-tensors", "gguf", the
  // *_marlin spellings), checked against the checkpoint. See docs/QUANTIZATION.md.
  std::string quantization;
  // Activations of bf16 weight matrices: "f32" (default; golden-accurate) or "bf16" (rounded
  // for AVX512_BF16 dot products, about twice the prefill rate where the CPU has them).
  std::string cpu_matmul_precision = "f32";
  // Images (vLLM's names). Most items per prompt by modality, {"image": N}; no entry = no limit.
  std::map<std::string, int> limit_mm_per_prompt;
  // Longest audio clip taken, in seconds; longer clips are refused. A clip over 30 s is heard
  // in 30-second pieces, each its own <|audio>...<audio|> span, in order.
  double max_audio_seconds = 600;
  // Longest video taken, in seconds (from its header, before any frame is decoded).
  double max_video_seconds = 600;
  // vLLM's --media-io-kwargs: the media loaders' options by modality, e.g. {"video":
  // {"num_frames": 16, "fps": 2}} (server/shared/chat_video.h); null = none.
  nlohmann::json media_io_kwargs;
  // Default processor settings for images, {"max_soft_tokens": 70|140|280|560|1120} (absent:
  // the checkpoint's processor config, else 280); a request's own mm_processor_kwargs win.
  // null = none.
  nlohmann::json mm_processor_kwargs;
  // Encoded-image cache (soft tokens by content hash, least recently used out); 0 disables.
  double mm_processor_cache_gb = 4;
  // Structured outputs' compiled grammars and token masks (one LRU by bytes) in GiB; 0 disables.
  double structured_outputs_cache_gb = 1;
  // Ranks the model is split over (Megatron tensor parallelism, docs/ARCHITECTURE.md). "mp"
  // starts them on this host by re-executing the command under mpirun; "mpi" expects the
  // command to run under `mpirun -n N` already. Rank 0 runs the engine, the others the model.
  int tensor_parallel_size = 1;
  std::string distributed_executor_backend = "mp";
  // MoE: whole experts per rank (num_experts / tensor_parallel_size each) instead of a slice of
  // every expert; attention and the dense MLP stay tensor parallel.
  bool enable_expert_parallel = false;
  // Engine replicas in this process, each with its own KV cache, scheduler and a
  // threads/data_parallel_size share of the CPUs; requests go to the replica with the longest
  // cached prefix, else the least loaded (engine/data_parallel/). data_parallel_rank is the
  // replica an Engine is (set by EngineReplicas; it picks the replica's CPUs).
  int data_parallel_size = 1;
  int data_parallel_rank = 0;
  // vLLM's --speculative-config as JSON text (empty: none), e.g. {"method": "ngram",
  // "num_speculative_tokens": 4, "prompt_lookup_max": 4}. See engine/speculative/.
  std::string speculative_config;
};

// A prompt is text or token ids, with one image per bare <|image|> token, one audio clip per
// bare <|audio|> token and one video per bare <|video|> token (vLLM's {"prompt": ...,
// "multi_modal_data": {"image": ..., "audio": ..., "video": ...}}).
struct Prompt {
  std::optional<std::string> text;
  std::vector<int32_t> token_ids;
  std::vector<PromptImage> images;
  std::vector<PromptAudio> audios;
  std::vector<PromptVideo> videos;
  static Prompt from_text(std::string t) { return Prompt{std::move(t), {}, {}, {}, {}}; }
  static Prompt from_ids(std::vector<int32_t> ids) {
    return Prompt{std::nullopt, std::move(ids), {}, {}, {}};
  }
};

// What LLM::generate does besides generating (the Python binding's progress bar and Ctrl+C).
// Callbacks run on the thread that called generate, never on the engine thread. If one throws,
// the call's unfinished requests are aborted and the exception propagates once all have ended.
struct GenerateOptions {
  // Called as each prompt finishes, with its index in `prompts` and its final output.
  std::function<void(size_t index, const RequestOutput& output)> on_finished;
  // Called every `poll_interval` while requests run; false aborts the call's unfinished requests
  // (finish_reason "abort") and generate returns once they have ended.
  std::function<bool()> keep_going;
  std::chrono::milliseconds poll_interval{50};
  // Per prompt (empty: none): true ignores max_tokens and lets the prompt generate up to
  // max_model_len minus its length (vLLM's max_tokens=None).
  std::vector<bool> max_tokens_to_context;
};

// A chat prompt as LLM::chat renders it: the template's text and its token ids.
struct RenderedChat {
  std::string text;
  std::vector<int32_t> token_ids;
};

// LLM::chat options, named as in vLLM's LLM.chat and the chat completions request.
struct ChatOptions {
  nlohmann::ordered_json tools;  // null or an OpenAI tools array
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  std::optional<std::string> chat_template;  // template text; default: the checkpoint's
  nlohmann::ordered_json chat_template_kwargs = nlohmann::ordered_json::object();
  std::optional<std::string> reasoning_effort;  // Gemma 4: maps to enable_thinking
  bool parse_output = true;  // Gemma 4: split reasoning and tool calls off the text
  // vLLM's chat_template_content_format: "auto" (the template's detected format), "string" or
  // "openai"; anything else is an InputError.
  std::string chat_template_content_format = "auto";
};

struct ChatToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // a JSON object as text
};

// One chat choice as the server's message object has it.
struct ChatMessageOutput {
  std::optional<std::string> content;
  std::optional<std::string> reasoning;
  std::vector<ChatToolCall> tool_calls;
  std::string finish_reason;  // "tool_calls" when the output called tools
};

struct ChatOutput {
  RequestOutput output;                     // the raw generation (text with markers)
  std::string prompt;                       // the rendered chat prompt
  std::vector<ChatMessageOutput> messages;  // one per sample
};

class LLM {
 public:
  explicit LLM(const EngineArgs& args);
  ~LLM();
  LLM(const LLM&) = delete;
  LLM& operator=(const LLM&) = delete;

  // Runs every prompt to completion, all submitted together; outputs keep prompt order. Checks
  // every prompt before submitting any (InputError naming the prompt).
  std::vector<RequestOutput> generate(const std::vector<Prompt>& prompts,
                                      const SamplingParams& params);
  // The same with parameters per prompt (`params` holds one per prompt, or one for all).
  std::vector<RequestOutput> generate(const std::vector<Prompt>& prompts,
                                      const std::vector<SamplingParams>& params,
                                      const GenerateOptions& options);

  // Renders `messages` (an OpenAI messages array) with the chat template exactly as the server
  // does, generates, and parses the output like /v1/chat/completions (the same code). Throws
  // InputError without a tokenizer or chat template, or for a template error.
  ChatOutput chat(const nlohmann::ordered_json& messages, const SamplingParams& params,
                  const ChatOptions& options = {});
  // Many conversations in one batch (`params`: one per conversation, or one for all).
  std::vector<ChatOutput> chat(const std::vector<nlohmann::ordered_json>& conversations,
                               const std::vector<SamplingParams>& params,
                               const ChatOptions& options, const GenerateOptions& generate_options);
  // The prompt chat() would generate from (Hugging Face's apply_chat_template). Throws as chat().
  RenderedChat render_chat(const nlohmann::ordered_json& messages, const ChatOptions& options);

  // nullptr when the checkpoint has no tokenizer and none was given.
  const Tokenizer* tokenizer() const;
  // Ids that end generation unless ignore_eos: generation_config's, config.json's and the
  // tokenizer's eos, never hard-coded.
  const std::vector<int32_t>& eos_token_ids() const;
  int vocab_size() const;
  // SamplingParams with the generation-config defaults applied (--generation-config,
  // --override-generation-config), as vLLM's get_default_sampling_params().
  SamplingParams default_sampling_params() const;
  // Engine steps run so far (one forward call each).
  uint64_t num_steps() const;
  // The engine underneath, for stats and streaming (replica 0 with data_parallel_size > 1).
  Engine& engine();
  // Every replica (one without data parallelism); generate() routes among them.
  EngineReplicas& replicas();

 private:
  std::unique_ptr<EngineReplicas> replicas_;
  uint64_t next_request_ = 0;
};

}  // namespace gemmaserve
