#include "engine/data_parallel/engine_replicas.h"

#include <algorithm>
#include <condition_variable>
#include <stdexcept>

#include "core/error.h"
#include "core/logging.h"
#include "engine/block_hash.h"
#include "parallel/rank_launch.h"

namespace gemmaserve {

void check_data_parallel_args(const EngineArgs& args) {
  const int n = args.data_parallel_size;
  if (n < 1) throw InputError("--data-parallel-size must be at least 1, got " + std::to_string(n));
  if (n > 1 && args.tensor_parallel_size > 1) {
    throw InputError("--data-parallel-size " + std::to_string(n) + " with --tensor-parallel-size " +
                     std::to_string(args.tensor_parallel_size) +
                     " is not supported: data-parallel replicas run in one process and cannot "
                     "each lead their own tensor-parallel ranks yet");
  }
}

EngineArgs replica_engine_args(const EngineArgs& args, int rank, int total_threads) {
  EngineArgs a = args;
  a.data_parallel_rank = rank;
  a.threads = std::max(1, total_threads / std::max(1, args.data_parallel_size));
  return a;
}

// Holds a batch's callbacks until every replica has queued its share: then they run (open), or,
// when a replica refused, never (closed). A callback that comes early waits on the engine thread
// for the few microseconds the other shares take, so no partial batch is ever seen.
struct EngineReplicas::Gate {
  enum class State { kPending, kOpen, kClosed };
  std::mutex mutex;
  std::condition_variable decided;
  State state = State::kPending;
  void decide(State s) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      state = s;
    }
    decided.notify_all();
  }
};

EngineReplicas::EngineReplicas(const EngineArgs& args) {
  check_data_parallel_args(args);
  const int n = args.data_parallel_size;
  if (n == 1) {
    engines_.push_back(std::make_unique<Engine>(args));
    return;
  }
  const int total = args.threads > 0 ? args.threads : allowed_cpu_count();
  const EngineArgs first = replica_engine_args(args, 0, total);
  GS_LOG_INFO << n << " data-parallel engine replicas, " << first.threads << " of " << total
              << " threads each";
  for (int r = 0; r < n; ++r) {
    engines_.push_back(std::make_unique<Engine>(replica_engine_args(args, r, total)));
  }
}

EngineReplicas::~EngineReplicas() = default;

std::vector<int32_t> EngineReplicas::routed_prefix(const EngineRequest& request,
                                                   bool* truncated) const {
  std::vector<int32_t> ids = front().prompt_with_bos(request.prompt_token_ids);
  *truncated = false;
  // Blocks from the first image on also hash the image's content: the text before it decides.
  if (const auto image = front().model_config().image_token_id) {
    const auto it = std::find(ids.begin(), ids.end(), *image);
    *truncated = it != ids.end();
    ids.erase(it, ids.end());
  }
  return ids;
}

void EngineReplicas::add_cached_tokens(const EngineRequest& request,
                                       std::vector<ReplicaProbe>* probes) const {
  const EngineArgs& args = front().args();
  if (size() == 1 || !args.enable_prefix_caching) return;
  bool truncated = false;
  const std::vector<int32_t> ids = routed_prefix(request, &truncated);
  BlockHashExtras extras;
  extras.cache_salt = request.cache_salt;
  std::vector<BlockHash> hashes;
  append_block_hashes(ids, args.block_size, extras, &hashes);
  if (hashes.empty()) return;
  // A hit never covers a prompt's last token; past a cut at an image, every block may hit.
  const int num_tokens = static_cast<int>(ids.size()) + (truncated ? 1 : 0);
  for (size_t i = 0; i < size(); ++i) {
    (*probes)[i].cached_tokens = engines_[i]->cached_prefix_tokens(hashes, num_tokens);
  }
}

std::vector<ReplicaProbe> EngineReplicas::loads() const {
  std::vector<ReplicaProbe> out(size());
  for (size_t i = 0; i < size(); ++i) {
    const EngineStats st = engines_[i]->stats();
    out[i].num_running = st.num_running;
    out[i].num_waiting = st.num_waiting;
  }
  return out;
}

std::vector<ReplicaProbe> EngineReplicas::probe(const EngineRequest& request) const {
  std::vector<ReplicaProbe> probes = loads();
  add_cached_tokens(request, &probes);
  return probes;
}

std::vector<size_t> EngineReplicas::route_each(
    const std::vector<const EngineRequest*>& requests) const {
  std::vector<size_t> out(requests.size(), 0);
  if (size() == 1) return out;
  std::vector<ReplicaProbe> load = loads();
  for (size_t k = 0; k < requests.size(); ++k) {
    std::vector<ReplicaProbe> probes = load;
    add_cached_tokens(*requests[k], &probes);
    out[k] = choose_replica(probes);
    load[out[k]].num_waiting += requests[k]->params.n;
  }
  return out;
}

std::vector<size_t> EngineReplicas::route(std::span<const EngineRequest> requests) const {
  std::vector<const EngineRequest*> refs;
  for (const EngineRequest& r : requests) refs.push_back(&r);
  return route_each(refs);
}

void EngineReplicas::forget(const std::string& request_id, uint64_t serial) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = in_flight_.find(request_id);
  if (it != in_flight_.end() && it->second.serial == serial) in_flight_.erase(it);
}

void EngineReplicas::add_requests(std::vector<Submission> submissions,
                                  std::vector<size_t> replicas) {
  if (size() == 1) {
    engines_[0]->add_requests(std::move(submissions));
    return;
  }
  if (replicas.empty()) {
    std::vector<const EngineRequest*> refs;
    for (const Submission& s : submissions) refs.push_back(&s.request);
    replicas = route_each(refs);
  }
  if (replicas.size() != submissions.size() ||
      std::any_of(replicas.begin(), replicas.end(), [&](size_t r) { return r >= size(); })) {
    throw std::logic_error("EngineReplicas::add_requests: one existing replica per submission");
  }
  auto gate = std::make_shared<Gate>();
  std::vector<std::vector<Submission>> shares(size());
  std::vector<std::vector<std::string>> tracked(size());  // ids this call added to in_flight_
  {
    std::lock_guard<std::mutex> lock(mutex_);
    std::unordered_map<std::string, size_t> batch;
    for (size_t i = 0; i < submissions.size(); ++i) {
      Submission& s = submissions[i];
      const std::string& id = s.request.request_id;
      size_t r = replicas[i];
      // A repeated id goes where its namesake is, whose engine refuses it with its message.
      const uint64_t serial = next_serial_++;
      if (auto it = in_flight_.find(id); it != in_flight_.end()) {
        r = it->second.replica;
      } else if (auto b = batch.find(id); b != batch.end()) {
        r = b->second;
      } else {
        batch.emplace(id, r);
        in_flight_.emplace(id, InFlight{r, serial});
        tracked[r].push_back(id);
      }
      s.callback = [this, gate, id, serial, cb = std::move(s.callback)](
                       const RequestOutput& output, const RequestOutputDelta& delta) {
        if (delta.finished) forget(id, serial);
        std::unique_lock<std::mutex> lock(gate->mutex);
        gate->decided.wait(lock, [&] { return gate->state != Gate::State::kPending; });
        if (gate->state == Gate::State::kOpen) cb(output, delta);
      };
      shares[r].push_back(std::move(s));
    }
  }
  std::vector<size_t> queued;
  for (size_t r = 0; r < size(); ++r) {
    if (shares[r].empty()) continue;
    try {
      engines_[r]->add_requests(std::move(shares[r]));
      queued.push_back(r);
    } catch (...) {
      gate->decide(Gate::State::kClosed);
      for (size_t q : queued) {
        for (const std::string& id : tracked[q]) engines_[q]->abort(id);
      }
      std::lock_guard<std::mutex> lock(mutex_);
      for (const std::vector<std::string>& ids : tracked) {
        for (const std::string& id : ids) in_flight_.erase(id);
      }
      throw;
    }
  }
  gate->decide(Gate::State::kOpen);
}

bool EngineReplicas::abort(const std::string& request_id) {
  if (size() == 1) return engines_[0]->abort(request_id);
  size_t r = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = in_flight_.find(request_id);
    if (it == in_flight_.end()) return false;
    r = it->second.replica;
  }
  return engines_[r]->abort(request_id);
}

std::vector<EngineStats> EngineReplicas::stats() const {
  std::vector<EngineStats> out;
  for (const auto& e : engines_) out.push_back(e->stats());
  return out;
}

std::optional<std::string> EngineReplicas::failure() const {
  for (size_t r = 0; r < size(); ++r) {
    if (auto f = failure(r)) return f;
  }
  return std::nullopt;
}

std::optional<std::string> EngineReplicas::failure(size_t replica) const {
  auto f = engines_.at(replica)->failure();
  if (!f) return std::nullopt;
  // One engine needs no name; among replicas the message says which stopped.
  return size() == 1 ? *f : "engine " + std::to_string(replica) + ": " + *f;
}

}  // namespace gemmaserve
