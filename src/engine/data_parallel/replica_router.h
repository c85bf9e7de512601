// Which data-parallel replica takes a request: the one whose prefix cache holds the longest
// prefix of its prompt, else the least loaded by vLLM's DP score (DPLBAsyncMPClient: waiting
// requests weigh 4x running ones, since they hold back time to first token). Pure decisions
// over probes, so they are unit-tested without engines.
#pragma once

#include <cstddef>
#include <span>

namespace gemmaserve {

// What a replica reports for one request.
struct ReplicaProbe {
  int cached_tokens = 0;  // prompt tokens its prefix cache would hit
  int num_running = 0;    // sequences
  int num_waiting = 0;    // sequences, including ones routed to it but not yet queued there
};

// vLLM's DP load score: waiting * 4 + running.
int replica_load_score(const ReplicaProbe& probe);

// The replica with the most cached tokens; among equals (no hit anywhere included) the lowest
// load score; among those the lowest index. `probes` must not be empty.
size_t choose_replica(std::span<const ReplicaProbe> probes);

}  // namespace gemmaserve
