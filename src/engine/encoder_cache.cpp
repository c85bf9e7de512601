#include "engine/encoder_cache.h"

namespace gemmaserve {

EncodedImage EncoderCache::find(const std::string& hash) {
  const auto it = index_.find(hash);
  if (it == index_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->second;
}

void EncoderCache::insert(const std::string& hash, EncodedImage rows) {
  if (!rows || bytes_of(rows) > capacity_ || index_.count(hash) > 0) return;
  while (bytes_ + bytes_of(rows) > capacity_) {
    bytes_ -= bytes_of(lru_.back().second);
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  bytes_ += bytes_of(rows);
  lru_.emplace_front(hash, std::move(rows));
  index_[hash] = lru_.begin();
}

}  // namespace gemmaserve
