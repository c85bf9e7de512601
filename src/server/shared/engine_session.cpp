#include "server/shared/engine_session.h"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <random>

namespace gemmaserve {

using Clock = std::chrono::steady_clock;

struct EngineSession::State {
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<SessionEvent> events;
  std::vector<bool> finished;
  size_t remaining = 0;
  Clock::time_point arrival;
  // Per prompt, per completion index: when its last token arrived (nullopt before the first).
  std::vector<std::vector<std::optional<Clock::time_point>>> last_token;
  AbortReason abort_reason = AbortReason::kNone;
  std::vector<size_t> aborted_on;  // replicas that ended a request of this session by "abort"
  std::optional<RequestError> request_error;  // the first request a step failed alone
};

std::string random_request_id(const std::string& prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* kHex = "0123456789abcdef";
  std::string id = prefix;
  for (int i = 0; i < 2; ++i) {
    uint64_t x = rng();
    for (int k = 0; k < 16; ++k, x >>= 4) id.push_back(kHex[x & 15]);
  }
  return id;
}

EngineSession::EngineSession(EngineReplicas& engines, ServerMetrics& metrics)
    : engines_(engines), metrics_(metrics), state_(std::make_shared<State>()) {}

EngineSession::~EngineSession() { abort(); }

void EngineSession::submit(std::vector<EngineRequest> requests) {
  const size_t count = requests.size();
  state_->finished.assign(count, false);
  state_->remaining = count;
  state_->arrival = Clock::now();
  state_->last_token.assign(count, {});
  std::vector<size_t> replicas = engines_.route(requests);
  std::vector<Submission> submissions;
  for (size_t i = 0; i < count; ++i) {
    state_->last_token[i].assign(static_cast<size_t>(requests[i].params.n), std::nullopt);
    request_ids_.push_back(requests[i].request_id);
    Submission s;
    s.request = std::move(requests[i]);
    std::shared_ptr<State> state = state_;
    ServerMetrics* metrics = &metrics_;
    // Runs on the engine thread: only records and queues, never blocks.
    const size_t engine = replicas[i];  // its metrics carry engine="R"
    s.callback = [state, metrics, i, engine](const RequestOutput& output,
                                             const RequestOutputDelta& delta) {
      const Clock::time_point now = Clock::now();
      SessionEvent e;
      e.prompt_index = i;
      e.delta = delta;
      e.num_cached_tokens = output.num_cached_tokens;
      if (delta.finished) e.final_output = output;
      {
        std::lock_guard<std::mutex> lock(state->mutex);
        for (const CompletionDelta& c : delta.outputs) {
          if (c.token_ids.empty()) continue;
          auto& last = state->last_token[i][static_cast<size_t>(c.index)];
          if (!last) {
            metrics->observe_time_to_first_token(
                std::chrono::duration<double>(now - state->arrival).count(), engine);
          } else {
            metrics->observe_inter_token_latency(std::chrono::duration<double>(now - *last).count(),
                                                 engine);
          }
          last = now;
        }
        if (delta.finished) {
          metrics->observe_e2e_latency(std::chrono::duration<double>(now - state->arrival).count(),
                                       engine);
          int generated = 0;
          bool aborted = false;
          for (const CompletionOutput& o : output.outputs) {
            generated += static_cast<int>(o.token_ids.size());
            metrics->count_finished(o.finish_reason.value_or("abort"), engine);
            aborted = aborted || o.finish_reason.value_or("abort") == "abort";
          }
          if (aborted) state->aborted_on.push_back(engine);
          if (output.error && !state->request_error) state->request_error = output.error;
          metrics->observe_request_tokens(static_cast<int>(output.prompt_token_ids.size()),
                                          generated, engine);
          if (!state->finished[i]) {
            state->finished[i] = true;
            --state->remaining;
          }
        }
        state->events.push_back(std::move(e));
      }
      state->changed.notify_all();
    };
    submissions.push_back(std::move(s));
  }
  try {
    engines_.add_requests(std::move(submissions), std::move(replicas));
  } catch (...) {
    request_ids_.clear();  // nothing was queued
    state_->remaining = 0;
    throw;
  }
}

bool EngineSession::next_events(std::vector<SessionEvent>* out, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(state_->mutex);
  if (state_->events.empty() && state_->remaining > 0) {
    state_->changed.wait_for(lock, timeout,
                             [&] { return !state_->events.empty() || state_->remaining == 0; });
  }
  while (!state_->events.empty()) {
    out->push_back(std::move(state_->events.front()));
    state_->events.pop_front();
  }
  return state_->remaining > 0 || !out->empty();
}

void EngineSession::abort() {
  std::vector<std::string> unfinished;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    for (size_t i = 0; i < request_ids_.size(); ++i) {
      if (!state_->finished[i]) unfinished.push_back(request_ids_[i]);
    }
  }
  for (const std::string& id : unfinished) engines_.abort(id);
}

}  // namespace gemmaserve

namespace gemmaserve {

void EngineSession::abort(AbortReason reason) {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    // A session whose requests all finished keeps its answer.
    if (state_->remaining == 0) return;
    if (state_->abort_reason == AbortReason::kNone) state_->abort_reason = reason;
  }
  abort();
}

AbortReason EngineSession::abort_reason() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->abort_reason;
}

std::optional<RequestError> EngineSession::request_error() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->request_error;
}

std::optional<std::string> EngineSession::engine_failure() const {
  std::vector<size_t> replicas;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    replicas = state_->aborted_on;
  }
  for (size_t r : replicas) {
    if (auto f = engines_.failure(r)) return f;
  }
  return std::nullopt;
}

}  // namespace gemmaserve
