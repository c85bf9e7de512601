#include "engine/scheduler.h"

#include <algorithm>
#include <stdexcept>
#include <unordered_set>

#include "core/error.h"

namespace gemmaserve {

void check_request_length(int num_prompt_tokens, std::optional<int> max_tokens, int max_model_len) {
  const std::string n = std::to_string(max_model_len);
  const std::string m = std::to_string(num_prompt_tokens);
  // A prompt may use up to max_model_len - 1 tokens: one must be left to generate.
  if (num_prompt_tokens >= max_model_len) {
    throw InputError("This model's maximum context length is " + n +
                     " tokens. However, your request has " + m +
                     " input tokens. Please reduce the length of the input messages.");
  }
  if (max_tokens && int64_t{num_prompt_tokens} + *max_tokens > max_model_len) {
    const std::string t = std::to_string(*max_tokens);
    throw InputError("'max_tokens' or 'max_completion_tokens' is too large: " + t +
                     ". This model's maximum context length is " + n +
                     " tokens and your request has " + m + " input tokens (" + t + " > " + n +
                     " - " + m + ").");
  }
}

Scheduler::Scheduler(const SchedulerConfig& config, KvCacheManager kv_cache)
    : config_(config), kv_(std::move(kv_cache)) {
  if (config.max_num_seqs <= 0) {
    throw InputError("--max-num-seqs must be positive, got " + std::to_string(config.max_num_seqs));
  }
  if (config.max_num_batched_tokens <= 0) {
    throw InputError("--max-num-batched-tokens must be positive, got " +
                     std::to_string(config.max_num_batched_tokens));
  }
  if (config.max_model_len <= 0) {
    throw InputError("--max-model-len must be positive, got " +
                     std::to_string(config.max_model_len));
  }
}

void Scheduler::add_request(NewRequest request) {
  if (request.request_id.empty()) throw InputError("request id must not be empty");
  if (requests_.count(request.request_id) > 0) {
    throw InputError("request id '" + request.request_id + "' is already in use");
  }
  if (request.prompt_token_ids.empty()) throw InputError("The decoder prompt cannot be empty");
  if (request.max_tokens && *request.max_tokens < 1) {
    throw InputError("max_tokens must be at least 1, got " + std::to_string(*request.max_tokens) +
                     ".");
  }
  const int prompt_len = static_cast<int>(request.prompt_token_ids.size());
  check_request_length(prompt_len, request.max_tokens, config_.max_model_len);
  validate_block_hash_extras(request.hash_extras);
  const int max_tokens = request.max_tokens.value_or(config_.max_model_len - prompt_len);
  const int max_len = std::min(config_.max_model_len, prompt_len + max_tokens);
  int max_chunk =
      config_.long_prefill_token_threshold > 0
          ? std::min(config_.long_prefill_token_threshold, config_.max_num_batched_tokens)
          : config_.max_num_batched_tokens;
  // A chunk reaching an image takes all of it, past the budget if need be.
  for (const MultimodalPlaceholder& p : request.hash_extras.multimodal) {
    if (p.offset + p.length > prompt_len) {
      throw InputError("multimodal placeholder at " + std::to_string(p.offset) +
                       " runs past the prompt's " + std::to_string(prompt_len) + " tokens");
    }
    max_chunk = std::max(max_chunk, static_cast<int>(p.length));
  }
  if (!kv_.fits_alone(max_len, max_chunk)) {
    throw InputError("request '" + request.request_id + "' may grow to " + std::to_string(max_len) +
                     " tokens, more than the whole KV cache holds; raise "
                     "--kv-cache-memory-bytes or lower --max-model-len");
  }

  SchedulerRequest r;
  r.request_id = request.request_id;
  r.token_ids = std::move(request.prompt_token_ids);
  r.num_prompt_tokens = prompt_len;
  r.max_tokens = max_tokens;
  r.priority = request.priority;
  r.arrival = next_arrival_++;
  r.hash_extras = std::move(request.hash_extras);
  r.skip_prefix_cache = request.skip_prefix_cache;
  auto [it, inserted] = requests_.emplace(r.request_id, std::move(r));
  SchedulerRequest* stored = &it->second;
  update_block_hashes(stored);
  waiting_.emplace(WaitingKey{stored->priority, stored->arrival}, stored);
}

void Scheduler::update_block_hashes(SchedulerRequest* r) {
  if (!kv_.prefix_caching_enabled()) return;
  append_block_hashes(r->token_ids, kv_.block_size(), r->hash_extras, &r->block_hashes);
}

int Scheduler::fit_chunk_to_images(const SchedulerRequest& r, int start, int num_new,
                                   SchedulerOutput* out) const {
  const int64_t end = start + num_new;
  const auto& images = r.hash_extras.multimodal;
  for (size_t k = 0; k < images.size(); ++k) {
    const MultimodalPlaceholder& p = images[k];
    const int64_t image_end = p.offset + p.length;
    if (p.offset >= end) break;
    if (image_end <= start) continue;
    if (config_.image_ready && !config_.image_ready(r.request_id, k)) {
      out->waiting_for_images.emplace_back(r.request_id, k);
      return static_cast<int>(std::max<int64_t>(0, p.offset - start));
    }
    if (image_end <= end || p.splittable) continue;
    // The chunk would end inside this image: stop before it, or take all of it.
    return static_cast<int>(p.offset > start ? p.offset - start : image_end - start);
  }
  return num_new;
}

PrefixHit Scheduler::find_prefix_hit(const SchedulerRequest& r) const {
  PrefixHit hit = kv_.find_prefix_hit(r.block_hashes, r.num_tokens());
  // While the hit ends inside an image, end it at the last block boundary before that image;
  // the cut may land inside an earlier image (a video's frames are a few tokens apart).
  for (;;) {
    const MultimodalPlaceholder* inside = nullptr;
    for (const MultimodalPlaceholder& p : r.hash_extras.multimodal) {
      if (p.offset >= hit.num_tokens) break;
      if (p.offset + p.length <= hit.num_tokens || p.splittable) continue;
      inside = &p;
      break;
    }
    if (inside == nullptr) return hit;
    const size_t blocks = static_cast<size_t>(inside->offset / kv_.block_size());
    hit = kv_.find_prefix_hit(std::span<const BlockHash>(r.block_hashes).first(blocks),
                              r.num_tokens());
  }
}

void Scheduler::remove_running(SchedulerRequest* r) {
  running_.erase(std::remove(running_.begin(), running_.end(), r), running_.end());
}

void Scheduler::preempt(SchedulerRequest* r) {
  kv_.free(r->request_id);
  remove_running(r);
  r->status = RequestStatus::kPreempted;
  r->num_computed_tokens = 0;
  r->draft_token_ids.clear();
  ++r->num_preemptions;
  ++stats_.preemptions;
  waiting_.emplace(WaitingKey{r->priority, r->arrival}, r);
}

void Scheduler::finish(SchedulerRequest* r, FinishReason reason,
                       std::vector<FinishedRequest>* out) {
  const std::string id = r->request_id;  // erase() must not read the dying element's key
  kv_.free(id);
  remove_running(r);
  out->push_back(FinishedRequest{id, reason});
  requests_.erase(id);
}

SchedulerOutput Scheduler::schedule() {
  if (awaiting_update_) {
    throw std::logic_error("Scheduler::schedule called twice without update");
  }
  SchedulerOutput out;
  int budget = config_.max_num_batched_tokens;
  // (request, tokens this step), in output order.
  std::vector<std::pair<SchedulerRequest*, int>> chosen;
  std::unordered_map<const SchedulerRequest*, int> drafts_of;  // drafts among those tokens
  const int threshold = config_.long_prefill_token_threshold;
  const auto chunk_cap = [&](int remaining, int left) {
    const int n = std::min(remaining, left);
    return threshold > 0 ? std::min(n, threshold) : n;
  };

  // Running requests first, in admission order: decodes and unfinished prefills.
  const std::vector<SchedulerRequest*> running_snapshot = running_;
  for (SchedulerRequest* r : running_snapshot) {
    if (budget <= 0) break;
    if (r->status != RequestStatus::kRunning) continue;  // preempted earlier in this step
    int num_new =
        fit_chunk_to_images(*r, r->num_computed_tokens,
                            chunk_cap(r->num_tokens() - r->num_computed_tokens, budget), &out);
    if (num_new <= 0) continue;
    const int num_drafts = draft_budget(*r, budget);
    num_new += num_drafts;
    bool allocated = false;
    while (true) {
      if (kv_.allocate_slots(r->request_id, r->num_computed_tokens, num_new)) {
        allocated = true;
        break;
      }
      // Out of blocks: preempt the lowest-priority, latest-arrived running request.
      SchedulerRequest* victim = *std::max_element(
          running_.begin(), running_.end(),
          [](const SchedulerRequest* a, const SchedulerRequest* b) {
            return WaitingKey{a->priority, a->arrival} < WaitingKey{b->priority, b->arrival};
          });
      auto scheduled = std::find_if(chosen.begin(), chosen.end(),
                                    [&](const auto& c) { return c.first == victim; });
      if (scheduled != chosen.end()) {
        budget += scheduled->second;
        chosen.erase(scheduled);
      }
      preempt(victim);
      out.preempted.push_back(victim->request_id);
      if (victim == r) break;
    }
    if (!allocated) continue;
    if (num_drafts > 0) drafts_of[r] = num_drafts;
    chosen.emplace_back(r, num_new);
    budget -= num_new;
  }

  // Then waiting requests by (priority, arrival), unless this step had to preempt.
  if (out.preempted.empty()) {
    while (!waiting_.empty() && budget > 0 &&
           static_cast<int>(running_.size()) < config_.max_num_seqs) {
      SchedulerRequest* r = waiting_.begin()->second;
      PrefixHit hit;
      const bool lookup = kv_.prefix_caching_enabled() && !r->skip_prefix_cache;
      if (lookup) hit = find_prefix_hit(*r);
      const int num_new = fit_chunk_to_images(
          *r, hit.num_tokens, chunk_cap(r->num_tokens() - hit.num_tokens, budget), &out);
      if (num_new <= 0) break;  // its next image is being encoded; FCFS behind it
      if (!kv_.allocate_slots(r->request_id, hit.num_tokens, num_new, lookup ? &hit : nullptr)) {
        break;  // FCFS: later requests wait behind this one
      }
      waiting_.erase(waiting_.begin());
      r->status = RequestStatus::kRunning;
      r->num_computed_tokens = hit.num_tokens;
      if (r->num_cached_tokens < 0) r->num_cached_tokens = hit.num_tokens;
      running_.push_back(r);
      chosen.emplace_back(r, num_new);
      budget -= num_new;
    }
  }

  // Spans are taken last: a preemption above may have freed an earlier request's table.
  for (auto& [r, num_new] : chosen) {
    const auto drafted = drafts_of.find(r);
    const int num_drafts = drafted == drafts_of.end() ? 0 : drafted->second;
    ScheduledChunk chunk;
    chunk.request_id = r->request_id;
    chunk.tokens = std::span<const int32_t>(r->token_ids)
                       .subspan(static_cast<size_t>(r->num_computed_tokens),
                                static_cast<size_t>(num_new - num_drafts));
    chunk.draft_tokens =
        std::span<const int32_t>(r->draft_token_ids).first(static_cast<size_t>(num_drafts));
    chunk.start_pos = r->num_computed_tokens;
    chunk.block_tables = kv_.block_tables(r->request_id);
    chunk.samples = r->num_computed_tokens + num_new - num_drafts == r->num_tokens();
    r->num_computed_tokens += num_new;
    in_flight_.push_back(InFlight{r->request_id, chunk.samples, num_drafts});
    out.num_scheduled_tokens += num_new;
    out.scheduled.push_back(std::move(chunk));
  }
  if (!out.scheduled.empty()) {
    ++stats_.steps;
    stats_.scheduled_tokens += static_cast<uint64_t>(out.num_scheduled_tokens);
    awaiting_update_ = true;
  }
  return out;
}

std::vector<FinishedRequest> Scheduler::update(std::span<const StepResult> results) {
  // Validate everything before changing anything.
  std::unordered_set<std::string> sampling, seen;
  std::unordered_map<std::string, int> drafted;
  for (const InFlight& f : in_flight_) {
    if (f.samples && requests_.count(f.request_id) > 0) sampling.insert(f.request_id);
    if (f.num_drafts > 0) drafted[f.request_id] = f.num_drafts;
  }
  for (const StepResult& res : results) {
    if (requests_.count(res.request_id) == 0) continue;  // aborted during the step
    if (sampling.count(res.request_id) == 0) {
      throw std::logic_error("update: request " + res.request_id +
                             " did not end a sampling chunk in the last step");
    }
    if (!seen.insert(res.request_id).second) {
      throw std::logic_error("update: two results for request " + res.request_id);
    }
    const auto d = drafted.find(res.request_id);
    if (static_cast<int>(res.accepted_drafts.size()) > (d == drafted.end() ? 0 : d->second)) {
      throw std::logic_error("update: request " + res.request_id +
                             " accepted more drafts than it had");
    }
  }
  if (seen.size() != sampling.size()) {
    throw std::logic_error("update: a sampling chunk of the last step got no result");
  }

  for (const InFlight& f : in_flight_) {
    auto it = requests_.find(f.request_id);
    if (it == requests_.end() || f.num_drafts > 0) continue;  // drafts: once the result is in
    kv_.commit(f.request_id, it->second.block_hashes, it->second.num_computed_tokens);
  }
  in_flight_.clear();
  awaiting_update_ = false;

  std::vector<FinishedRequest> finished;
  for (const StepResult& res : results) {
    auto it = requests_.find(res.request_id);
    if (it == requests_.end()) continue;
    SchedulerRequest* r = &it->second;
    r->token_ids.insert(r->token_ids.end(), res.accepted_drafts.begin(), res.accepted_drafts.end());
    r->token_ids.push_back(res.token);
    r->draft_token_ids.clear();
    update_block_hashes(r);
    if (drafted.count(res.request_id) > 0) {
      // The rejected drafts' K/V is garbage from here on: it is computed again when reached, and
      // neither cached nor counted in the sliding window's release.
      r->num_computed_tokens = r->num_tokens() - 1;
      kv_.commit(r->request_id, r->block_hashes, r->num_computed_tokens);
    }
    if (res.stop) {
      finish(r, FinishReason::kStopped, &finished);
    } else if (r->num_output_tokens() >= r->max_tokens ||
               r->num_tokens() >= config_.max_model_len) {
      finish(r, FinishReason::kLengthCapped, &finished);
    }
  }
  return finished;
}

int Scheduler::draft_budget(const SchedulerRequest& r, int budget) const {
  if (r.draft_token_ids.empty() || r.num_computed_tokens != r.num_tokens() - 1) return 0;
  // Every accepted draft and the token after it must fit max_tokens and max_model_len.
  const int room = std::min({budget - 1, r.max_tokens - r.num_output_tokens() - 1,
                             config_.max_model_len - r.num_tokens() - 1});
  return std::clamp(static_cast<int>(r.draft_token_ids.size()), 0, std::max(0, room));
}

void Scheduler::set_draft_tokens(const std::string& request_id, std::vector<int32_t> drafts) {
  auto it = requests_.find(request_id);
  if (it != requests_.end()) it->second.draft_token_ids = std::move(drafts);
}

bool Scheduler::abort(const std::string& request_id) {
  auto it = requests_.find(request_id);
  if (it == requests_.end()) return false;
  SchedulerRequest* r = &it->second;
  waiting_.erase(WaitingKey{r->priority, r->arrival});
  kv_.free(r->request_id);
  remove_running(r);
  requests_.erase(it);  // by iterator: `request_id` may alias the record's own id
  return true;
}

const SchedulerRequest* Scheduler::request(const std::string& request_id) const {
  auto it = requests_.find(request_id);
  return it == requests_.end() ? nullptr : &it->second;
}

std::vector<std::string> Scheduler::running_ids() const {
  std::vector<std::string> ids;
  for (const SchedulerRequest* r : running_) ids.push_back(r->request_id);
  return ids;
}

std::vector<std::string> Scheduler::waiting_ids() const {
  std::vector<std::string> ids;
  for (const auto& [key, r] : waiting_) ids.push_back(r->request_id);
  return ids;
}

SchedulerStats Scheduler::stats() const {
  SchedulerStats s = stats_;
  const PrefixCacheStats& p = kv_.prefix_cache_stats();
  s.prefix_cache_requests = p.requests;
  s.prefix_cache_queries = p.queries;
  s.prefix_cache_hits = p.hits;
  return s;
}

}  // namespace gemmaserve
