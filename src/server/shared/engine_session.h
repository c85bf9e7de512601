// The engine requests of one HTTP request: submits them, queues the engine's streaming callbacks
// for the HTTP thread, measures latencies for the metrics, and aborts whatever is unfinished when
// the session ends early (client gone, error), so KV blocks come back at once.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/data_parallel/engine_replicas.h"
#include "engine/engine.h"
#include "server/shared/metrics.h"

namespace gemmaserve {

struct SessionEvent {
  size_t prompt_index = 0;
  RequestOutputDelta delta;
  std::optional<RequestOutput> final_output;  // with the last delta of the request
  int num_cached_tokens = -1;
};

// Why a session was ended from outside before its requests finished.
enum class AbortReason { kNone, kClientGone, kDeadline, kShutdown };

class EngineSession {
 public:
  EngineSession(EngineReplicas& engines, ServerMetrics& metrics);
  // Aborts the requests that have not finished.
  ~EngineSession();
  EngineSession(const EngineSession&) = delete;
  EngineSession& operator=(const EngineSession&) = delete;

  // Submits all requests together (all or none), each to the replica the router picks; the
  // engine's InputError propagates.
  void submit(std::vector<EngineRequest> requests);
  // Moves queued events into `out`, waiting up to `timeout` when none are queued. Returns false
  // once every request has finished and its events were taken.
  bool next_events(std::vector<SessionEvent>* out, std::chrono::milliseconds timeout);
  // Aborts every unfinished request now.
  void abort();
  // Aborts for `reason` (any thread); the first reason given is kept.
  void abort(AbortReason reason);
  AbortReason abort_reason() const;
  // The failure of an engine that aborted one of this session's requests, if any: a request
  // that finished before its replica (or another one) failed keeps its answer.
  std::optional<std::string> engine_failure() const;
  // The error of the first of this session's requests that a step failed alone, if any.
  std::optional<RequestError> request_error() const;
  const EngineReplicas& engines() const { return engines_; }

 private:
  struct State;
  EngineReplicas& engines_;
  ServerMetrics& metrics_;
  std::shared_ptr<State> state_;
  std::vector<std::string> request_ids_;
};

// A fresh request id: prefix + 32 random hex digits (vLLM's random_uuid).
std::string random_request_id(const std::string& prefix);

}  // namespace gemmaserve
