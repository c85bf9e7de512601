// Paged key/value storage for the layers that own a cache (KV-shared layers own none).
// Each attention type has its own block pool size; a block holds `block_size` token slots.
// The model writes and reads slots through per-sequence block tables; who owns which block is
// the engine's business.
#pragma once

#include <array>
#include <cstddef>
#include <memory>
#include <vector>

#include "model/config.h"

namespace gemmaserve {

class KvCache {
 public:
  // num_blocks[t]: blocks for layers of AttentionType t.
  KvCache(const TextConfig& config, std::array<int, kNumAttentionTypes> num_blocks,
          int block_size);

  int block_size() const { return block_size_; }
  int num_blocks(AttentionType t) const { return num_blocks_[static_cast<int>(t)]; }

  // Pointer to the slot (block, offset) of layer `layer` (must own a cache): [num_kv_heads,
  // head_dim] floats for K and for V.
  float* key(int layer, int block, int offset);
  float* value(int layer, int block, int offset);
  const float* key(int layer, int block, int offset) const;
  const float* value(int layer, int block, int offset) const;

  // Bytes of K+V for one token across all cache-owning layers of type t.
  static size_t bytes_per_token(const TextConfig& config, AttentionType t);
  size_t total_bytes() const;

 private:
  struct LayerStore {
    int slot_floats = 0;  // num_kv_heads * head_dim
    int type = 0;
    size_t floats = 0;  // per K and per V
    // Uninitialised on purpose: pages are only touched when a slot is written, so a large
    // cache costs nothing at start-up (attention never reads a slot before it is written).
    std::unique_ptr<float[]> k, v;
  };
  int block_size_;
  std::array<int, kNumAttentionTypes> num_blocks_;
  std::vector<LayerStore> layers_;  // indexed by layer; empty for KV-shared layers
};

}  // namespace gemmaserve
