#include "model/kv_cache.h"

#include <string>

#include "core/error.h"

namespace gemmaserve {

KvCache::KvCache(const TextConfig& config, std::array<int, kNumAttentionTypes> num_blocks,
                 int block_size)
    : block_size_(block_size), num_blocks_(num_blocks) {
  if (block_size <= 0) {
    throw InputError("KV cache block size must be positive, got " + std::to_string(block_size));
  }
  for (int t = 0; t < kNumAttentionTypes; ++t) {
    if (num_blocks[t] < 0) {
      throw InputError("KV cache block count must not be negative, got " +
                       std::to_string(num_blocks[t]));
    }
  }
  layers_.resize(config.layers.size());
  for (size_t i = 0; i < config.layers.size(); ++i) {
    const LayerSpec& spec = config.layers[i];
    if (spec.kv_shared()) continue;
    LayerStore& store = layers_[i];
    store.slot_floats = spec.num_kv_heads * spec.head_dim;
    store.type = static_cast<int>(spec.type);
    const size_t floats = static_cast<size_t>(num_blocks[store.type]) *
                          static_cast<size_t>(block_size) * static_cast<size_t>(store.slot_floats);
    store.floats = floats;
    store.k = std::make_unique_for_overwrite<float[]>(floats);
    store.v = std::make_unique_for_overwrite<float[]>(floats);
  }
}

float* KvCache::key(int layer, int block, int offset) {
  LayerStore& s = layers_[static_cast<size_t>(layer)];
  return s.k.get() + (static_cast<size_t>(block) * block_size_ + offset) * s.slot_floats;
}

float* KvCache::value(int layer, int block, int offset) {
  LayerStore& s = layers_[static_cast<size_t>(layer)];
  return s.v.get() + (static_cast<size_t>(block) * block_size_ + offset) * s.slot_floats;
}

const float* KvCache::key(int layer, int block, int offset) const {
  const LayerStore& s = layers_[static_cast<size_t>(layer)];
  return s.k.get() + (static_cast<size_t>(block) * block_size_ + offset) * s.slot_floats;
}

const float* KvCache::value(int layer, int block, int offset) const {
  const LayerStore& s = layers_[static_cast<size_t>(layer)];
  return s.v.get() + (static_cast<size_t>(block) * block_size_ + offset) * s.slot_floats;
}

size_t KvCache::bytes_per_token(const TextConfig& config, AttentionType t) {
  size_t bytes = 0;
  for (const LayerSpec& spec : config.layers) {
    if (spec.kv_shared() || spec.type != t) continue;
    bytes += 2 * sizeof(float) * static_cast<size_t>(spec.num_kv_heads) * spec.head_dim;
  }
  return bytes;
}

size_t KvCache::total_bytes() const {
  size_t bytes = 0;
  for (const LayerStore& s : layers_) bytes += 2 * s.floats * sizeof(float);
  return bytes;
}

}  // namespace gemmaserve
