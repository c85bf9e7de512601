// What the completions and chat handlers share: the serving context, the response they hand the
// HTTP layer (a JSON body or an SSE stream), model-name and overload checks, the max_tokens rule,
// logprob token text and the usage object.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/data_parallel/engine_replicas.h"
#include "engine/engine.h"
#include "engine/engine_setup.h"
#include "io/media/media_connector.h"
#include "server/shared/engine_session.h"
#include "server/shared/metrics.h"
#include "server/shared/server_options.h"
#include "tokenizer/chat_template/chat_template.h"

namespace gemmaserve {

// Admission of generation requests: the waiting-queue bound is checked and the requests queued
// as one step, so simultaneous requests cannot all pass the check; while the server drains for
// shutdown only requests that began before it are admitted.
class AdmissionGate {
 public:
  // Queues the session's requests, or throws 503 ServiceUnavailableError (draining, unless the
  // request began `before_drain`; or `limit` > 0 sequences already waiting or being queued).
  void submit(const EngineReplicas& engines, EngineSession& session,
              std::vector<EngineRequest> requests, int limit, bool before_drain);
  // From now on generation requests that begin get 503 (SIGTERM).
  void start_draining() { draining_ = true; }
  bool draining() const { return draining_; }

 private:
  std::mutex mutex_;
  int queuing_ = 0;  // sequences between the check and the engine's queue
  std::atomic<bool> draining_ = false;
};

struct ServingContext {
  // Throws InputError for a bad --allowed-local-media-path.
  ServingContext(EngineReplicas& r, const ServerOptions& o, ServerMetrics& m)
      : engine(r.front()), replicas(r), options(o), metrics(m), media(o.media) {}
  Engine& engine;            // replica 0: tokenizer, config and prompt rules (same in all)
  EngineReplicas& replicas;  // where requests go (--data-parallel-size; one without it)
  const ServerOptions& options;
  ServerMetrics& metrics;
  media::MediaConnector media;    // image URLs -> bytes (--allowed-local-media-path, ...)
  GenerationDefaults generation;  // for the generation-config max_tokens cap
  std::optional<ChatTemplate> chat_template;  // --chat-template or the checkpoint's
  bool gemma4 = false;                        // a Gemma 4 checkpoint: its parsers are on
  bool reasoning_parser = false;              // thinking -> reasoning
  bool tool_parser = false;                   // tool calls -> tool_calls
  std::string bos_token, eos_token;           // token texts for the template
  AdmissionGate admission;
  // Set by the HTTP layer: ties a request's session to its client connection (disconnects,
  // --request-timeout and shutdown abort it). Called on the request's own thread.
  std::function<void(const std::shared_ptr<EngineSession>&)> watch_session;
  // Set by the HTTP layer: whether the calling thread's request began before SIGTERM (the drain
  // waits for it, so it is still admitted). Unset: no request is admitted while draining.
  std::function<bool()> request_began_before_drain;
  const std::string& model_name() const { return options.served_model_names.front(); }
};

// Writes one SSE chunk; false when the client is gone.
using SseWrite = std::function<bool(const std::string&)>;

struct ServingResponse {
  int status = 200;
  nlohmann::ordered_json body;
  // When set (and no stream), the body is `text` of this content type instead of JSON.
  std::string content_type;
  std::string text;
  // When set the response is an SSE stream produced by this function.
  std::function<void(const SseWrite&)> stream;
};

// 404 NotFoundError unless `model` is absent or one of the served names.
void check_model_name(const ServingContext& ctx, const std::optional<std::string>& model);
// 503 ServiceUnavailableError when more than --max-waiting-requests wait, or when the server
// drains and the request began after SIGTERM.
void check_overload(const ServingContext& ctx);
// A session with `requests` admitted (AdmissionGate) and queued, watched by the HTTP layer.
std::shared_ptr<EngineSession> start_session(ServingContext& ctx,
                                             std::vector<EngineRequest> requests);
// Logs the request fields that were ignored, as vLLM does.
void log_ignored_fields(const std::vector<std::string>& fields);

// Checks the prompt length and returns the max_tokens to run with: the request's (or the
// remaining context when absent), capped by the generation config's max_new_tokens. vLLM's
// context-length messages (400).
int resolve_max_tokens(const ServingContext& ctx, int prompt_len, std::optional<int> requested);

// Checks and truncates a token prompt (truncate_prompt_tokens keeps the last N, or the first N
// with truncation_side "right").
void prepare_prompt_ids(const ServingContext& ctx, std::vector<int32_t>& ids,
                        std::optional<int> truncate_prompt_tokens, bool keep_first = false);

// The chat template a request renders with: its own `chat_template` (parsed into `storage`; 400
// unless --trust-request-chat-template) or the server's (400 when there is none).
const ChatTemplate& select_chat_template(const ServingContext& ctx,
                                         const std::optional<std::string>& request_template,
                                         std::optional<ChatTemplate>& storage);

// The text of one token as vLLM shows it in logprobs ("token_id:N" when asked).
std::string logprob_token_text(const ServingContext& ctx, int32_t id, bool as_token_id);
// Top entries of a logprob map by rank (highest first, ties to the lower id).
std::vector<std::pair<int32_t, float>> ranked_logprobs(const TokenLogprobs& lp);

// vLLM's UsageInfo as a whole response dumps it (the details null unless given;
// prompt_tokens_details {"cached_tokens": N} for N > 0).
nlohmann::ordered_json usage_json(int prompt_tokens, int completion_tokens, int cached_tokens = -1,
                                  nlohmann::ordered_json completion_tokens_details = nullptr);
// The cached-token count usage reports: `cached_tokens` with --enable-prompt-tokens-details,
// else -1 (none).
int reported_cached_tokens(const ServingContext& ctx, int cached_tokens);
// The object without its null members, nested too (pydantic's exclude_none).
nlohmann::ordered_json without_nulls(const nlohmann::ordered_json& j);
// vLLM's prompt_logprobs entries: per position null or {token_id: {logprob, rank, decoded_token}}.
nlohmann::ordered_json prompt_logprobs_json(const ServingContext& ctx,
                                            const std::vector<std::optional<TokenLogprobs>>& lps,
                                            const std::vector<int32_t>& prompt_ids);
nlohmann::ordered_json stop_reason_json(const std::optional<std::string>& text,
                                        const std::optional<int32_t>& token);
// "data: JSON\n\n", with invalid UTF-8 replaced rather than thrown.
std::string sse_event(const nlohmann::ordered_json& chunk);
std::string dump_json(const nlohmann::ordered_json& j);
int64_t unix_time_now();

// Waits for every request of the session to finish; returns the final outputs by prompt.
// Throws 504 when the session hit --request-timeout, 503 when shutdown aborted it.
std::vector<RequestOutput> collect_final_outputs(EngineSession& session, size_t num_prompts);

enum class StreamEnd { kFinished, kFailed, kClientGone };

// Runs a streaming loop: hands each batch of events to on_events (false = a write failed, the
// client is gone), aborting the session at once when the client goes. If on_events throws, the
// error is sent as an error event (kFailed). The caller sends usage and "data: [DONE]".
StreamEnd pump_stream(EngineSession& session, const SseWrite& write,
                      const std::function<bool(std::vector<SessionEvent>&)>& on_events);

}  // namespace gemmaserve
