// Chained content hashes of full KV blocks, the keys of automatic prefix caching.
//
// Block i's hash covers (hash of block i-1, the block's token ids, its extra keys), so equal
// hashes mean equal whole prefixes, not just equal blocks. Extra keys keep apart blocks whose
// token ids agree but whose K/V differ: the request's cache_salt (first block only, which
// isolates tenants for the whole chain) and the content hash of every multimodal item whose
// placeholder tokens overlap the block. SHA-256 (written here from FIPS 180-4) makes crafted
// collisions between tenants infeasible, which is why vLLM also defaults to SHA-256.
#pragma once

#include <array>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace gemmaserve {

// Incremental SHA-256.
class Sha256 {
 public:
  using Digest = std::array<uint8_t, 32>;
  Sha256();
  void update(std::span<const uint8_t> bytes);
  void update(std::string_view text);
  Digest finish();  // the object must not be used afterwards
  static Digest of(std::string_view text);

 private:
  void compress(const uint8_t* chunk);
  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_{};
  size_t buffered_ = 0;
  uint64_t total_bytes_ = 0;
};

struct BlockHash {
  Sha256::Digest bytes{};
  auto operator<=>(const BlockHash&) const = default;
  std::string hex() const;
};

// For unordered containers: the digest is uniform, so its first 8 bytes are a good hash.
struct BlockHashHasher {
  size_t operator()(const BlockHash& h) const;
};

// Placeholder tokens [offset, offset + length) of a prompt stand for a multimodal item whose
// content hashes to `content_hash` (e.g. the hex digest of the image bytes).
struct MultimodalPlaceholder {
  int64_t offset = 0;
  int64_t length = 0;
  std::string content_hash;
  // A chunk or a prefix-cache hit may end inside it: its tokens attend causally (audio), so
  // computing it in pieces gives the same K/V. Images are whole.
  bool splittable = false;
};

// Everything besides token ids that decides a request's K/V.
struct BlockHashExtras {
  std::optional<std::string> cache_salt;
  std::vector<MultimodalPlaceholder> multimodal;  // sorted by offset, non-overlapping
};

// Throws InputError when placeholders are negative, empty, unsorted or overlapping.
void validate_block_hash_extras(const BlockHashExtras& extras);

// Hash of one full block starting at token `block_start`: `parent` is nullopt for block 0.
BlockHash hash_block(const std::optional<BlockHash>& parent, std::span<const int32_t> block_tokens,
                     int64_t block_start, const BlockHashExtras& extras);

// Appends to `hashes` the hash of every full block of `tokens` (block_size tokens each) that it
// does not hold yet, so calling it again after tokens grow costs only the new blocks.
void append_block_hashes(std::span<const int32_t> tokens, int block_size,
                         const BlockHashExtras& extras, std::vector<BlockHash>* hashes);

}  // namespace gemmaserve
