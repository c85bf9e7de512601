// Data parallelism in one process (--data-parallel-size N): N engines, each with its own copy of
// the weights, KV cache, scheduler, engine thread and a share of the CPUs, behind one server or
// offline LLM. Each request goes to one replica for its whole life (replica_router.h decides);
// the ids of unfinished requests remember their replica, so abort() reaches the right one.
// With N = 1 it is a plain pass-through to the one engine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/data_parallel/replica_router.h"
#include "engine/engine.h"
#include "gemmaserve/llm.h"

namespace gemmaserve {

// InputError for a data_parallel_size below 1, or above 1 together with tensor parallelism
// (each replica would need its own group of ranks, which gemmaserve does not start yet).
void check_data_parallel_args(const EngineArgs& args);

// Replica `rank`'s arguments: threads = its share of `total_threads` (the request's --threads,
// else every allowed CPU), at least 1, and its data_parallel_rank, which places its pinned
// threads on the CPUs after those of the replicas before it.
EngineArgs replica_engine_args(const EngineArgs& args, int rank, int total_threads);

class EngineReplicas {
 public:
  // Starts args.data_parallel_size engines one after the other (InputError as Engine's).
  explicit EngineReplicas(const EngineArgs& args);
  ~EngineReplicas();
  EngineReplicas(const EngineReplicas&) = delete;
  EngineReplicas& operator=(const EngineReplicas&) = delete;

  size_t size() const { return engines_.size(); }
  Engine& replica(size_t i) { return *engines_[i]; }
  const Engine& replica(size_t i) const { return *engines_[i]; }
  // Replica 0: tokenizer, config and prompt rules are the same in every replica.
  Engine& front() { return *engines_.front(); }
  const Engine& front() const { return *engines_.front(); }

  // What each replica reports for `request` (cached prompt tokens and load), changing nothing.
  std::vector<ReplicaProbe> probe(const EngineRequest& request) const;
  // A replica for each of requests submitted together: the router's choice, each request
  // counting as waiting on its replica for those after it.
  std::vector<size_t> route(std::span<const EngineRequest> requests) const;
  // Submits submission i to replicas[i] (to route()'s choices when `replicas` is empty). All or
  // none: callbacks wait until every share is queued; when a replica refuses its share, the
  // shares queued elsewhere are aborted without their callbacks ever running, and the error
  // propagates.
  void add_requests(std::vector<Submission> submissions, std::vector<size_t> replicas = {});
  // Aborts an unfinished request on its replica; false if unknown or finished.
  bool abort(const std::string& request_id);

  // Each replica's stats, in replica order.
  std::vector<EngineStats> stats() const;
  // "engine R: ERROR" for the first replica whose engine thread stopped, if any.
  std::optional<std::string> failure() const;
  // The same for replica `replica` alone.
  std::optional<std::string> failure(size_t replica) const;

 private:
  struct Gate;
  struct InFlight {
    size_t replica = 0;
    uint64_t serial = 0;  // tells a reused id's entry from an earlier request's
  };
  void forget(const std::string& request_id, uint64_t serial);
  // The prompt ids whose block hashes a replica's cache is probed with: after the BOS rule, up
  // to the first image token (*truncated tells whether one was found).
  std::vector<int32_t> routed_prefix(const EngineRequest& request, bool* truncated) const;
  // Fills each probe's cached_tokens (left at 0 with one replica or prefix caching off).
  void add_cached_tokens(const EngineRequest& request, std::vector<ReplicaProbe>* probes) const;
  std::vector<ReplicaProbe> loads() const;  // running and waiting of each replica
  std::vector<size_t> route_each(const std::vector<const EngineRequest*>& requests) const;

  mutable std::mutex mutex_;
  std::unordered_map<std::string, InFlight> in_flight_;  // by request id
  uint64_t next_serial_ = 0;
  std::vector<std::unique_ptr<Engine>> engines_;  // last: their callbacks use the above
};

}  // namespace gemmaserve
