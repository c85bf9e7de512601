#include "model/kv_cache.h"

#include <string>

#include "core/aligned.h"
#include "core/error.h"
#include "core/huge_pages.h"

namespace gemmaserve {

KvCache::KvCache(const TextConfig& config, std::array<int, kNumAttentionTypes> num_blocks,
                 int block_size, cpu::KvDtype dtype)
    : block_size_(block_size), num_blocks_(num_blocks), dtype_(dtype) {
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
  size_t arena_bytes = 0;
  const auto line_up = [](size_t n) {
    return (n + kCacheLineBytes - 1) / kCacheLineBytes * kCacheLineBytes;
  };
  for (size_t i = 0; i < config.layers.size(); ++i) {
    const LayerSpec& spec = config.layers[i];
    if (spec.kv_shared()) continue;
    LayerStore& store = layers_[i];
    store.num_kv_heads = spec.num_kv_heads;
    store.head_dim = spec.head_dim;
    store.slot_bytes = static_cast<size_t>(spec.num_kv_heads) * kv_row_bytes(dtype, spec.head_dim);
    store.type = static_cast<int>(spec.type);
    store.bytes = static_cast<size_t>(num_blocks[store.type]) * static_cast<size_t>(block_size) *
                  store.slot_bytes;
    arena_bytes += 2 * line_up(store.bytes);
  }
  arena_ = allocate_huge_page_buffer(arena_bytes);
  auto* next = reinterpret_cast<uint8_t*>(arena_.get());
  for (LayerStore& store : layers_) {
    if (store.slot_bytes == 0) continue;
    store.k = next;
    store.v = next + line_up(store.bytes);
    next += 2 * line_up(store.bytes);
  }
}

void KvCache::write(int layer, int block, int offset, const float* k, const float* v) {
  LayerStore& s = layers_[static_cast<size_t>(layer)];
  const size_t row_bytes = cpu::kv_row_bytes(dtype_, s.head_dim);
  uint8_t* kdst = s.k + slot_index(block, offset) * s.slot_bytes;
  uint8_t* vdst = s.v + slot_index(block, offset) * s.slot_bytes;
  for (int h = 0; h < s.num_kv_heads; ++h) {
    const size_t src = static_cast<size_t>(h) * s.head_dim;
    cpu::encode_kv_row(dtype_, k + src, s.head_dim, kdst + h * row_bytes);
    cpu::encode_kv_row(dtype_, v + src, s.head_dim, vdst + h * row_bytes);
  }
}

void KvCache::read(int layer, int block, int offset, float* k, float* v) const {
  const LayerStore& s = layers_[static_cast<size_t>(layer)];
  const size_t row_bytes = cpu::kv_row_bytes(dtype_, s.head_dim);
  const uint8_t* ksrc = key_bytes(layer, block, offset);
  const uint8_t* vsrc = value_bytes(layer, block, offset);
  for (int h = 0; h < s.num_kv_heads; ++h) {
    const size_t dst = static_cast<size_t>(h) * s.head_dim;
    cpu::decode_kv_row(dtype_, ksrc + h * row_bytes, s.head_dim, k + dst);
    cpu::decode_kv_row(dtype_, vsrc + h * row_bytes, s.head_dim, v + dst);
  }
}

const uint8_t* KvCache::key_bytes(int layer, int block, int offset) const {
  const LayerStore& s = layers_[static_cast<size_t>(layer)];
  return s.k + slot_index(block, offset) * s.slot_bytes;
}

const uint8_t* KvCache::value_bytes(int layer, int block, int offset) const {
  const LayerStore& s = layers_[static_cast<size_t>(layer)];
  return s.v + slot_index(block, offset) * s.slot_bytes;
}

cpu::PagedKv KvCache::paged(int layer) const {
  const LayerStore& s = layers_[static_cast<size_t>(layer)];
  cpu::PagedKv kv;
  kv.k = s.k;
  kv.v = s.v;
  kv.block_size = block_size_;
  kv.slot_bytes = static_cast<int64_t>(s.slot_bytes);
  kv.num_blocks = num_blocks_[static_cast<size_t>(s.type)];
  kv.dtype = dtype_;
  return kv;
}

size_t KvCache::slot_bytes(int layer) const {
  return 2 * layers_[static_cast<size_t>(layer)].slot_bytes;
}

size_t KvCache::bytes_per_token(const TextConfig& config, AttentionType t, cpu::KvDtype dtype) {
  size_t bytes = 0;
  for (const LayerSpec& spec : config.layers) {
    if (spec.kv_shared() || spec.type != t) continue;
    bytes += 2 * static_cast<size_t>(spec.num_kv_heads) * cpu::kv_row_bytes(dtype, spec.head_dim);
  }
  return bytes;
}

size_t KvCache::total_bytes() const {
  size_t bytes = 0;
  for (const LayerStore& s : layers_) bytes += 2 * s.bytes;
  return bytes;
}

}  // namespace gemmaserve
