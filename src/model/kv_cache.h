// Paged key/value storage for the layers that own a cache (KV-shared layers own none).
// Each attention type has its own block pool size; a block holds `block_size` token slots.
// The model writes and reads slots through per-sequence block tables; who owns which block is
// the engine's business. K and V are stored in one KvDtype (kernels/cpu/kv_format.h): a slot
// of a layer is num_kv_heads rows of kv_row_bytes(dtype, head_dim) bytes.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/kv_format.h"
#include "model/config.h"

namespace gemmaserve {

class KvCache {
 public:
  // num_blocks[t]: blocks for layers of AttentionType t.
  KvCache(const TextConfig& config, std::array<int, kNumAttentionTypes> num_blocks, int block_size,
          cpu::KvDtype dtype = cpu::KvDtype::kF32);

  int block_size() const { return block_size_; }
  int num_blocks(AttentionType t) const { return num_blocks_[static_cast<int>(t)]; }
  cpu::KvDtype dtype() const { return dtype_; }

  // Converts K and V of one token ([num_kv_heads, head_dim] floats each) into the slot
  // (block, offset) of layer `layer` (must own a cache). Distinct slots may be written
  // concurrently.
  void write(int layer, int block, int offset, const float* k, const float* v);
  // The slot's K and V as floats (what attention reads, up to rounding order).
  void read(int layer, int block, int offset, float* k, float* v) const;
  // Raw bytes of a slot (num_kv_heads rows); for tests.
  const uint8_t* key_bytes(int layer, int block, int offset) const;
  const uint8_t* value_bytes(int layer, int block, int offset) const;
  // What the attention kernel reads for `layer` (must own a cache).
  cpu::PagedKv paged(int layer) const;

  // Bytes of one token's slot in layer `layer` (K and V together).
  size_t slot_bytes(int layer) const;
  // Bytes of K+V for one token across all cache-owning layers of type t.
  static size_t bytes_per_token(const TextConfig& config, AttentionType t,
                                cpu::KvDtype dtype = cpu::KvDtype::kF32);
  size_t total_bytes() const;

 private:
  struct LayerStore {
    int num_kv_heads = 0;
    int head_dim = 0;
    size_t slot_bytes = 0;  // of K (V has the same)
    int type = 0;
    size_t bytes = 0;      // per K and per V
    uint8_t* k = nullptr;  // in arena_
    uint8_t* v = nullptr;
  };
  size_t slot_index(int block, int offset) const {
    return static_cast<size_t>(block) * static_cast<size_t>(block_size_) +
           static_cast<size_t>(offset);
  }
  int block_size_;
  std::array<int, kNumAttentionTypes> num_blocks_;
  cpu::KvDtype dtype_;
  std::vector<LayerStore> layers_;  // indexed by layer; empty for KV-shared layers
  // Every layer's K and V, uninitialised on purpose: pages are only touched when a slot is
  // written, so a large cache costs nothing at start-up (attention never reads a slot before
  // it is written). On huge pages: decode attention reads blocks scattered over the pool, and
  // with 4 KiB pages nearly every 8 KiB block cost TLB misses (bench attention: -24 % time).
  // Each store starts on a cache line, so a row's vector loads never straddle two lines.
  std::shared_ptr<std::byte> arena_;
};

}  // namespace gemmaserve
