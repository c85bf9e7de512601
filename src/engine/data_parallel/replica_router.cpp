#include "engine/data_parallel/replica_router.h"

namespace gemmaserve {

int replica_load_score(const ReplicaProbe& probe) {
  return probe.num_waiting * 4 + probe.num_running;
}

size_t choose_replica(std::span<const ReplicaProbe> probes) {
  size_t best = 0;
  for (size_t i = 1; i < probes.size(); ++i) {
    const ReplicaProbe& p = probes[i];
    const ReplicaProbe& b = probes[best];
    if (p.cached_tokens != b.cached_tokens) {
      if (p.cached_tokens > b.cached_tokens) best = i;
    } else if (replica_load_score(p) < replica_load_score(b)) {
      best = i;
    }
  }
  return best;
}

}  // namespace gemmaserve
