#include "engine/encoder_cache.h"

namespace gemmaserve {

EncodedImage EncoderCache::find(const std::string& hash) {
  const EncodedImage* hit = lru_.find(hash);
  return hit ? *hit : nullptr;
}

void EncoderCache::insert(const std::string& hash, EncodedImage rows) {
  if (!rows) return;
  // The rows' capacity, their vector and the shared_ptr block around it.
  const uint64_t bytes = heap_bytes(*rows) + sizeof(*rows) + kSharedControlBytes;
  lru_.put(hash, std::move(rows), bytes);
  bytes_.store(lru_.bytes(), std::memory_order_relaxed);
  entries_.store(lru_.size(), std::memory_order_relaxed);
}

}  // namespace gemmaserve
