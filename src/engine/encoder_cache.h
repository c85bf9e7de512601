// Encoded images (soft-token rows) by content hash, least recently used out, within a byte
// budget (--mm-processor-cache-gb). Repeated images skip the vision tower, and a preempted or
// later request finds the rows again. Engine thread only: not thread-safe.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace gemmaserve {

using EncodedImage = std::shared_ptr<const std::vector<float>>;

class EncoderCache {
 public:
  explicit EncoderCache(uint64_t capacity_bytes) : capacity_(capacity_bytes) {}

  bool enabled() const { return capacity_ > 0; }
  // The rows stored under `hash` (now the most recently used), or null.
  EncodedImage find(const std::string& hash);
  // Stores `rows` under `hash`, evicting the least recently used until it fits; rows larger
  // than the whole budget are not stored. Users of evicted rows keep their shared_ptr.
  void insert(const std::string& hash, EncodedImage rows);

  uint64_t bytes() const { return bytes_; }
  size_t size() const { return index_.size(); }

 private:
  using Entry = std::pair<std::string, EncodedImage>;
  static uint64_t bytes_of(const EncodedImage& rows) { return rows->size() * sizeof(float); }

  uint64_t capacity_;
  uint64_t bytes_ = 0;
  std::list<Entry> lru_;  // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
};

}  // namespace gemmaserve
