// Engine query of the data-parallel router (engine/data_parallel/): read-only, under the lock.
#include "engine/engine.h"
#include "engine/scheduler.h"

namespace gemmaserve {

int Engine::cached_prefix_tokens(std::span<const BlockHash> block_hashes, int num_tokens) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return scheduler_->kv_cache().find_prefix_hit(block_hashes, num_tokens).num_tokens;
}

}  // namespace gemmaserve
