#include "engine/block_pool.h"

#include <stdexcept>
#include <string>

namespace gemmaserve {

KvBlockPool::KvBlockPool(int num_blocks) {
  if (num_blocks < 0) {
    throw std::invalid_argument("KV block pool size must not be negative, got " +
                                std::to_string(num_blocks));
  }
  blocks_.resize(static_cast<size_t>(num_blocks));
  for (BlockId b = 0; b < num_blocks; ++b) queue_push_back(b);
}

void KvBlockPool::check_id(BlockId block) const {
  if (block < 0 || block >= num_blocks()) {
    throw std::out_of_range("KV block id " + std::to_string(block) + " is outside the pool of " +
                            std::to_string(num_blocks()) + " blocks");
  }
}

void KvBlockPool::queue_push_back(BlockId block) {
  Block& b = blocks_[static_cast<size_t>(block)];
  b.prev = tail_;
  b.next = kNullBlock;
  b.queued = true;
  if (tail_ != kNullBlock) {
    blocks_[static_cast<size_t>(tail_)].next = block;
  } else {
    head_ = block;
  }
  tail_ = block;
  ++num_free_;
}

void KvBlockPool::queue_remove(BlockId block) {
  Block& b = blocks_[static_cast<size_t>(block)];
  if (b.prev != kNullBlock) {
    blocks_[static_cast<size_t>(b.prev)].next = b.next;
  } else {
    head_ = b.next;
  }
  if (b.next != kNullBlock) {
    blocks_[static_cast<size_t>(b.next)].prev = b.prev;
  } else {
    tail_ = b.prev;
  }
  b.prev = b.next = kNullBlock;
  b.queued = false;
  --num_free_;
}

double KvBlockPool::usage() const {
  if (blocks_.empty()) return 0.0;
  return 1.0 - static_cast<double>(num_free_) / static_cast<double>(blocks_.size());
}

std::vector<BlockId> KvBlockPool::allocate(int n) {
  if (n < 0 || n > num_free_) {
    throw std::logic_error("KV block pool asked for " + std::to_string(n) + " blocks with " +
                           std::to_string(num_free_) + " free");
  }
  std::vector<BlockId> out;
  out.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const BlockId id = head_;
    queue_remove(id);
    Block& b = blocks_[static_cast<size_t>(id)];
    if (b.hash) {
      cached_.erase(*b.hash);
      b.hash.reset();
      --num_cached_free_;
      ++counters_.evicted_blocks;
    }
    b.ref_count = 1;
    out.push_back(id);
  }
  counters_.allocated_blocks += static_cast<uint64_t>(n);
  return out;
}

void KvBlockPool::touch(std::span<const BlockId> blocks) {
  for (BlockId id : blocks) {
    if (id == kNullBlock) continue;
    check_id(id);
    Block& b = blocks_[static_cast<size_t>(id)];
    if (b.ref_count == 0) {
      queue_remove(id);
      if (b.hash) --num_cached_free_;
    }
    ++b.ref_count;
    ++counters_.touched_blocks;
  }
}

void KvBlockPool::free(std::span<const BlockId> blocks) {
  for (BlockId id : blocks) {
    if (id == kNullBlock) continue;
    check_id(id);
    Block& b = blocks_[static_cast<size_t>(id)];
    if (b.ref_count <= 0) {
      throw std::logic_error("KV block " + std::to_string(id) + " freed more often than taken");
    }
    if (--b.ref_count == 0) {
      queue_push_back(id);
      if (b.hash) ++num_cached_free_;
    }
  }
}

std::optional<BlockId> KvBlockPool::cached_block(const BlockHash& hash) const {
  auto it = cached_.find(hash);
  if (it == cached_.end()) return std::nullopt;
  return it->second;
}

bool KvBlockPool::cache_block(BlockId block, const BlockHash& hash) {
  check_id(block);
  Block& b = blocks_[static_cast<size_t>(block)];
  if (b.hash) return false;
  if (!cached_.emplace(hash, block).second) return false;
  b.hash = hash;
  if (b.ref_count == 0) ++num_cached_free_;
  return true;
}

bool KvBlockPool::reset_prefix_cache() {
  if (num_free_ != num_blocks()) return false;
  for (Block& b : blocks_) b.hash.reset();
  cached_.clear();
  num_cached_free_ = 0;
  return true;
}

int KvBlockPool::ref_count(BlockId block) const {
  check_id(block);
  return blocks_[static_cast<size_t>(block)].ref_count;
}

std::optional<BlockHash> KvBlockPool::block_hash(BlockId block) const {
  check_id(block);
  return blocks_[static_cast<size_t>(block)].hash;
}

bool KvBlockPool::in_free_queue(BlockId block) const {
  check_id(block);
  return blocks_[static_cast<size_t>(block)].queued;
}

std::vector<BlockId> KvBlockPool::free_queue() const {
  std::vector<BlockId> out;
  out.reserve(static_cast<size_t>(num_free_));
  for (BlockId b = head_; b != kNullBlock; b = blocks_[static_cast<size_t>(b)].next) {
    out.push_back(b);
  }
  return out;
}

}  // namespace gemmaserve
