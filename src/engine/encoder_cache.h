// Encoded images (soft-token rows) by content hash, least recently used out, within a byte
// budget (--mm-processor-cache-gb). Repeated images skip the vision tower, and a preempted or
// later request finds the rows again. Engine thread only, but for bytes().
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/byte_lru_cache.h"

namespace gemmaserve {

using EncodedImage = std::shared_ptr<const std::vector<float>>;

class EncoderCache {
 public:
  explicit EncoderCache(uint64_t capacity_bytes) : lru_(capacity_bytes) {}

  bool enabled() const { return lru_.capacity() > 0; }
  // The rows stored under `hash` (now the most recently used), or null.
  EncodedImage find(const std::string& hash);
  // Stores `rows` under `hash`, evicting the least recently used until it fits; rows larger
  // than the whole budget are not stored. Users of evicted rows keep their shared_ptr.
  void insert(const std::string& hash, EncodedImage rows);

  // What the entries hold (rows, keys, nodes) and how many; readable from any thread (/metrics).
  uint64_t bytes() const { return bytes_.load(std::memory_order_relaxed); }
  size_t size() const { return entries_.load(std::memory_order_relaxed); }

 private:
  ByteLruCache<EncodedImage> lru_;
  std::atomic<uint64_t> bytes_{0};
  std::atomic<size_t> entries_{0};
};

}  // namespace gemmaserve
