// A least-recently-used map bounded by the bytes its entries hold, for the caches a client can
// fill (structured outputs' grammars and masks, encoded images): many distinct large entries
// evict the oldest instead of growing the process. Not thread-safe; owners lock.
#pragma once

#include <cstdint>
#include <list>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace gemmaserve {

// Heap bytes a string holds beyond its object (none while it fits the small-string buffer).
inline uint64_t heap_bytes(const std::string& s) {
  return s.capacity() > std::string().capacity() ? s.capacity() + 1 : 0;
}
template <class T>
uint64_t heap_bytes(const std::vector<T>& v) {
  return v.capacity() * sizeof(T);
}
// The control block std::make_shared allocates beside the object (two counts, a vtable).
inline constexpr uint64_t kSharedControlBytes = 3 * sizeof(void*);

template <class V>
class ByteLruCache {
 public:
  explicit ByteLruCache(uint64_t capacity_bytes) : capacity_(capacity_bytes) {}

  // The value stored under `key` (now the most recently used), or null.
  const V* find(std::string_view key) {
    const auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    order_.splice(order_.begin(), order_, it->second);
    return &it->second->value;
  }
  // Stores `value`, whose own allocations the caller counts as `value_bytes`, evicting the least
  // recently used until the whole fits. An entry larger than the budget is not stored (false).
  bool put(std::string key, V value, uint64_t value_bytes) {
    if (find(key) != nullptr) return true;
    const uint64_t bytes = value_bytes + heap_bytes(key) + kEntryOverhead;
    if (bytes > capacity_) return false;
    while (bytes_ + bytes > capacity_) evict_oldest();
    order_.push_front({std::move(key), std::move(value), bytes});
    index_.emplace(order_.front().key, order_.begin());
    bytes_ += bytes;
    return true;
  }

  uint64_t bytes() const { return bytes_; }
  uint64_t capacity() const { return capacity_; }
  size_t size() const { return order_.size(); }

 private:
  struct Entry {
    std::string key;  // the index's string_view points here: list nodes never move
    V value;
    uint64_t bytes;  // value_bytes + key + kEntryOverhead
  };
  using Iterator = typename std::list<Entry>::iterator;
  // Per entry beyond the value's and key's own allocations: the list node (two links), the hash
  // node (next link, cached hash, key view, iterator), a bucket, two allocator headers.
  static constexpr uint64_t kEntryOverhead = sizeof(Entry) + 2 * sizeof(void*) + 3 * sizeof(void*) +
                                             sizeof(std::string_view) + sizeof(Iterator) + 32;

  void evict_oldest() {
    bytes_ -= order_.back().bytes;
    index_.erase(order_.back().key);
    order_.pop_back();
  }

  uint64_t capacity_;
  uint64_t bytes_ = 0;
  std::list<Entry> order_;  // most recently used first
  std::unordered_map<std::string_view, Iterator> index_;
};

}  // namespace gemmaserve
