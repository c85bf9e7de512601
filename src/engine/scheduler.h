// Continuous-batching scheduler over request records, after vLLM v1's Scheduler.
//
// Each step, schedule() spends a token budget (max_num_batched_tokens): first on running
// requests in admission order (a decode is one token; an unfinished prefill continues with its
// next chunk), then on waiting requests in (priority, arrival) order, admitting at most
// max_num_seqs running requests. Prefill is always chunked: a request gets whatever budget is
// left. New requests start after their longest prefix-cache hit.
// When a running request cannot get KV blocks, the running request with the largest
// (priority, arrival) - the lowest priority, then the latest arrival - is preempted: its blocks
// are freed and it goes back to waiting with no computed tokens; its generated tokens stay in
// its token list and are recomputed as prompt, like vLLM's recompute preemption. Waiting
// requests are only admitted in steps without preemption, and never preempt anyone.
// Images: the placeholders in hash_extras.multimodal are never split across steps (their
// tokens attend to each other both ways; vLLM's disable_chunked_mm_input). A chunk that would
// end inside one stops before it, or, when the image starts the chunk, takes all of it even
// past the budget (a 1120-token image runs with a 512-token budget; the step then ends). A
// prefix-cache hit never ends inside an image: it is cut to the last block boundary before it.
// Placeholders marked splittable (audio clips, causal) are cut like text.
// A chunk also stops before an image that is not encoded yet (SchedulerConfig::image_ready);
// the step reports it in waiting_for_images so the engine encodes it meanwhile (a waiting
// request that could not start then holds the queue, as vLLM's encoder budget does).
//
// Engine loop (the caller):
//   scheduler.add_request({...});                       // InputError with vLLM's message
//   while (scheduler.has_unfinished_requests()) {
//     SchedulerOutput out = scheduler.schedule();
//     ... one model forward over out.scheduled (tokens, start_pos, block_tables) ...
//     ... sample a token for each chunk with `samples`, run stop checks ...
//     for (const FinishedRequest& f : scheduler.update(results)) ...;
//   }
// Every non-empty schedule() must be followed by update() before the next schedule(); abort()
// may come at any time and frees the request's blocks at once.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/block_hash.h"
#include "engine/kv_cache_manager.h"

namespace gemmaserve {

struct SchedulerConfig {
  int max_num_seqs = 256;
  int max_num_batched_tokens = 8192;
  int max_model_len = 0;  // required
  // vLLM's --long-prefill-token-threshold: when > 0, no request computes more tokens than this
  // in one step, so long prompts are chunked even when the step budget has room.
  int long_prefill_token_threshold = 0;
  // Whether image `image` (index into hash_extras.multimodal) of a request may be computed;
  // unset: always. Called during schedule().
  std::function<bool(const std::string& request_id, size_t image)> image_ready;
};

enum class RequestStatus { kWaiting, kRunning, kPreempted, kFinished };
enum class FinishReason { kStopped, kLengthCapped, kAborted };

struct NewRequest {
  std::string request_id;
  std::vector<int32_t> prompt_token_ids;
  std::optional<int> max_tokens;   // nullopt: until max_model_len
  int priority = 0;                // lower values run first (vLLM's convention)
  BlockHashExtras hash_extras;     // cache_salt, multimodal placeholders
  bool skip_prefix_cache = false;  // e.g. prompt logprobs need every prompt position computed
};

// The scheduler's record of one request.
struct SchedulerRequest {
  std::string request_id;
  std::vector<int32_t> token_ids;  // prompt, then every generated token
  int num_prompt_tokens = 0;
  int max_tokens = 0;
  int priority = 0;
  uint64_t arrival = 0;  // order of add_request calls
  int num_computed_tokens = 0;
  RequestStatus status = RequestStatus::kWaiting;
  BlockHashExtras hash_extras;
  bool skip_prefix_cache = false;
  std::vector<BlockHash> block_hashes;  // of the full blocks of token_ids (prefix caching)
  int num_preemptions = 0;
  int num_cached_tokens = -1;  // prefix-cache hit at first admission; -1 before it
  // Speculative decoding: tokens drafted after the last one, verified by the next decode.
  std::vector<int32_t> draft_token_ids;

  int num_tokens() const { return static_cast<int>(token_ids.size()); }
  int num_output_tokens() const { return num_tokens() - num_prompt_tokens; }
};

// One request's share of a step. Spans stay valid until the next add_request(), schedule(),
// update() or abort().
struct ScheduledChunk {
  std::string request_id;
  std::span<const int32_t> tokens;  // to compute now, at positions start_pos ...
  int32_t start_pos = 0;            // tokens already in the cache
  BlockTables block_tables;
  // The chunk ends at the request's last token: its logits give the next token, and update()
  // expects a StepResult for it.
  bool samples = false;
  // Speculative decoding: drafted tokens computed after `tokens` (at start_pos + tokens.size()
  // ...) in the same chunk; the StepResult says how many were accepted.
  std::span<const int32_t> draft_tokens;
};

struct SchedulerOutput {
  std::vector<ScheduledChunk> scheduled;  // running requests first, then newly admitted ones
  std::vector<std::string> preempted;     // sent back to waiting in this step
  // (request id, image index) of images not ready that stopped a request's chunk this step.
  std::vector<std::pair<std::string, size_t>> waiting_for_images;
  int num_scheduled_tokens = 0;
  bool empty() const { return scheduled.empty(); }
};

// What the engine learnt for one sampling chunk.
struct StepResult {
  std::string request_id;
  int32_t token = 0;  // the sampled token, appended to the request
  bool stop = false;  // the engine's stop checks (EOS, stop ids/strings) ended the request
  // Drafts of the chunk accepted before `token` (a prefix of ScheduledChunk::draft_tokens): the
  // request grows by these and `token`; the K/V of the rejected ones is dropped (recomputed).
  std::vector<int32_t> accepted_drafts = {};
};

struct FinishedRequest {
  std::string request_id;
  FinishReason reason = FinishReason::kStopped;
};

struct SchedulerStats {
  uint64_t steps = 0;             // non-empty schedule() calls
  uint64_t scheduled_tokens = 0;  // tokens sent to the model, recomputation included
  uint64_t preemptions = 0;
  uint64_t prefix_cache_requests = 0;  // from the KV cache manager
  uint64_t prefix_cache_queries = 0;   // tokens
  uint64_t prefix_cache_hits = 0;      // tokens
};

// Throws InputError with vLLM's OpenAI-server message when a prompt leaves no room for output
// ("This model's maximum context length is N tokens. However, your request has M input tokens.
// Please reduce the length of the input messages.") or prompt + max_tokens exceeds
// max_model_len ("'max_tokens' or 'max_completion_tokens' is too large: T. This model's
// maximum context length is N tokens and your request has M input tokens (T > N - M).").
void check_request_length(int num_prompt_tokens, std::optional<int> max_tokens, int max_model_len);

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, KvCacheManager kv_cache);

  // Queues a request. Throws InputError for an empty or duplicate id, an empty prompt,
  // max_tokens < 1, a length over max_model_len (check_request_length), bad multimodal
  // placeholders, or a request that could not fit in the KV cache even alone.
  void add_request(NewRequest request);

  SchedulerOutput schedule();

  // Applies a step's results: commits computed K/V (prefix caching, sliding-window release),
  // appends sampled tokens and finishes requests that stopped or reached max_tokens /
  // max_model_len, freeing their blocks. Results for aborted requests are ignored; every other
  // sampling chunk of the last schedule() needs exactly one result. Finished requests are
  // forgotten after this call.
  std::vector<FinishedRequest> update(std::span<const StepResult> results);

  // Speculative decoding: tokens drafted to follow the request's last token. The next
  // schedule() computes them with it when the request is decoding (capped by the step budget,
  // max_tokens and max_model_len); any update() of the request drops them. Ignored for unknown
  // requests.
  void set_draft_tokens(const std::string& request_id, std::vector<int32_t> drafts);

  // Drops a request wherever it is and frees its blocks now. False when unknown (or finished).
  bool abort(const std::string& request_id);

  bool has_unfinished_requests() const { return !requests_.empty(); }
  int num_waiting() const { return static_cast<int>(waiting_.size()); }
  int num_running() const { return static_cast<int>(running_.size()); }
  // nullptr when unknown or finished.
  const SchedulerRequest* request(const std::string& request_id) const;
  // Running request ids in admission order.
  std::vector<std::string> running_ids() const;
  // Waiting request ids in the order they would be admitted.
  std::vector<std::string> waiting_ids() const;

  const SchedulerConfig& config() const { return config_; }
  const KvCacheManager& kv_cache() const { return kv_; }
  SchedulerStats stats() const;

 private:
  using WaitingKey = std::pair<int, uint64_t>;  // (priority, arrival)

  void update_block_hashes(SchedulerRequest* r);
  // Drafts of r to compute this step with `budget` tokens left (0 unless it is decoding).
  int draft_budget(const SchedulerRequest& r, int budget) const;
  // A chunk of num_new tokens of r from `start`, moved so it does not end inside an image and
  // stops before an image that is not ready (then named in `out`).
  int fit_chunk_to_images(const SchedulerRequest& r, int start, int num_new,
                          SchedulerOutput* out) const;
  // The request's longest prefix-cache hit that does not end inside an image.
  PrefixHit find_prefix_hit(const SchedulerRequest& r) const;
  // Frees the request's blocks and sends it back to waiting.
  void preempt(SchedulerRequest* r);
  void remove_running(SchedulerRequest* r);
  void finish(SchedulerRequest* r, FinishReason reason, std::vector<FinishedRequest>* out);

  SchedulerConfig config_;
  KvCacheManager kv_;
  std::unordered_map<std::string, SchedulerRequest> requests_;  // node-stable: pointers below
  std::map<WaitingKey, SchedulerRequest*> waiting_;
  std::vector<SchedulerRequest*> running_;  // admission order
  uint64_t next_arrival_ = 0;
  // The last schedule()'s chunks, committed by update().
  struct InFlight {
    std::string request_id;
    bool samples = false;
    int num_drafts = 0;
  };
  std::vector<InFlight> in_flight_;
  bool awaiting_update_ = false;
  SchedulerStats stats_;
};

}  // namespace gemmaserve
