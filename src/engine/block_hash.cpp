#include "engine/block_hash.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "core/error.h"

namespace gemmaserve {
namespace {

constexpr std::array<uint32_t, 64> kRoundConstants = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

uint32_t load_be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// Fixed-width little-endian field encodings keep the serialization unambiguous.
void put_u64(Sha256* h, uint64_t v) {
  uint8_t b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(v >> (8 * i));
  h->update(std::span<const uint8_t>(b, 8));
}

void put_u8(Sha256* h, uint8_t v) { h->update(std::span<const uint8_t>(&v, 1)); }

void put_bytes(Sha256* h, std::string_view s) {
  put_u64(h, s.size());
  h->update(s);
}

constexpr uint8_t kExtraCacheSalt = 1;
constexpr uint8_t kExtraMultimodal = 2;

}  // namespace

Sha256::Sha256()
    : state_{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
             0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19} {}

void Sha256::compress(const uint8_t* chunk) {
  uint32_t w[64];
  for (int i = 0; i < 16; ++i) w[i] = load_be32(chunk + 4 * i);
  for (int i = 16; i < 64; ++i) {
    const uint32_t s0 = std::rotr(w[i - 15], 7) ^ std::rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    const uint32_t s1 = std::rotr(w[i - 2], 17) ^ std::rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = state_[0], b = state_[1], c = state_[2], d = state_[3];
  uint32_t e = state_[4], f = state_[5], g = state_[6], h = state_[7];
  for (int i = 0; i < 64; ++i) {
    const uint32_t s1 = std::rotr(e, 6) ^ std::rotr(e, 11) ^ std::rotr(e, 25);
    const uint32_t ch = (e & f) ^ (~e & g);
    const uint32_t t1 = h + s1 + ch + kRoundConstants[i] + w[i];
    const uint32_t s0 = std::rotr(a, 2) ^ std::rotr(a, 13) ^ std::rotr(a, 22);
    const uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
    const uint32_t t2 = s0 + maj;
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  state_[0] += a;
  state_[1] += b;
  state_[2] += c;
  state_[3] += d;
  state_[4] += e;
  state_[5] += f;
  state_[6] += g;
  state_[7] += h;
}

void Sha256::update(std::span<const uint8_t> bytes) {
  total_bytes_ += bytes.size();
  size_t i = 0;
  if (buffered_ > 0) {
    const size_t take = std::min(bytes.size(), buffer_.size() - buffered_);
    std::memcpy(buffer_.data() + buffered_, bytes.data(), take);
    buffered_ += take;
    i = take;
    if (buffered_ < buffer_.size()) return;
    compress(buffer_.data());
    buffered_ = 0;
  }
  for (; i + 64 <= bytes.size(); i += 64) compress(bytes.data() + i);
  const size_t rest = bytes.size() - i;
  if (rest > 0) std::memcpy(buffer_.data(), bytes.data() + i, rest);
  buffered_ = rest;
}

void Sha256::update(std::string_view text) {
  update(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
}

Sha256::Digest Sha256::finish() {
  const uint64_t bit_length = total_bytes_ * 8;
  uint8_t pad[72] = {0x80};
  const size_t pad_len = (buffered_ < 56 ? 56 - buffered_ : 120 - buffered_);
  update(std::span<const uint8_t>(pad, pad_len));
  uint8_t length_be[8];
  for (int i = 0; i < 8; ++i) length_be[i] = static_cast<uint8_t>(bit_length >> (56 - 8 * i));
  update(std::span<const uint8_t>(length_be, 8));
  Digest out;
  for (int i = 0; i < 8; ++i) {
    for (int j = 0; j < 4; ++j) out[4 * i + j] = static_cast<uint8_t>(state_[i] >> (24 - 8 * j));
  }
  return out;
}

Sha256::Digest Sha256::of(std::string_view text) {
  Sha256 h;
  h.update(text);
  return h.finish();
}

std::string BlockHash::hex() const {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  s.reserve(bytes.size() * 2);
  for (uint8_t b : bytes) {
    s.push_back(kDigits[b >> 4]);
    s.push_back(kDigits[b & 15]);
  }
  return s;
}

size_t BlockHashHasher::operator()(const BlockHash& h) const {
  uint64_t v = 0;
  std::memcpy(&v, h.bytes.data(), sizeof(v));
  return static_cast<size_t>(v);
}

void validate_block_hash_extras(const BlockHashExtras& extras) {
  int64_t previous_end = 0;
  for (size_t i = 0; i < extras.multimodal.size(); ++i) {
    const MultimodalPlaceholder& p = extras.multimodal[i];
    if (p.offset < 0 || p.length <= 0) {
      throw InputError("multimodal placeholder " + std::to_string(i) + " has offset " +
                       std::to_string(p.offset) + " and length " + std::to_string(p.length) +
                       "; the offset must be >= 0 and the length > 0");
    }
    if (p.offset < previous_end) {
      throw InputError("multimodal placeholder " + std::to_string(i) +
                       " overlaps or precedes the previous one; placeholders must be sorted by "
                       "offset and must not overlap");
    }
    previous_end = p.offset + p.length;
  }
}

BlockHash hash_block(const std::optional<BlockHash>& parent, std::span<const int32_t> block_tokens,
                     int64_t block_start, const BlockHashExtras& extras) {
  Sha256 h;
  put_u8(&h, parent ? 1 : 0);
  if (parent) h.update(std::span<const uint8_t>(parent->bytes));
  put_u64(&h, block_tokens.size());
  for (int32_t t : block_tokens) {
    const uint32_t u = static_cast<uint32_t>(t);
    const uint8_t b[4] = {static_cast<uint8_t>(u), static_cast<uint8_t>(u >> 8),
                          static_cast<uint8_t>(u >> 16), static_cast<uint8_t>(u >> 24)};
    h.update(std::span<const uint8_t>(b, 4));
  }

  const int64_t block_end = block_start + static_cast<int64_t>(block_tokens.size());
  const bool salted = block_start == 0 && extras.cache_salt.has_value();
  // Placeholders are sorted and disjoint, so their ends are sorted too.
  auto first = std::partition_point(
      extras.multimodal.begin(), extras.multimodal.end(),
      [&](const MultimodalPlaceholder& p) { return p.offset + p.length <= block_start; });
  auto last = first;
  while (last != extras.multimodal.end() && last->offset < block_end) ++last;

  put_u64(&h, static_cast<uint64_t>(last - first) + (salted ? 1 : 0));
  if (salted) {
    put_u8(&h, kExtraCacheSalt);
    put_bytes(&h, *extras.cache_salt);
  }
  for (auto it = first; it != last; ++it) {
    put_u8(&h, kExtraMultimodal);
    put_u64(&h, static_cast<uint64_t>(it->offset - block_start));  // two's complement if < 0
    put_bytes(&h, it->content_hash);
  }
  return BlockHash{h.finish()};
}

void append_block_hashes(std::span<const int32_t> tokens, int block_size,
                         const BlockHashExtras& extras, std::vector<BlockHash>* hashes) {
  const size_t num_full = tokens.size() / static_cast<size_t>(block_size);
  for (size_t i = hashes->size(); i < num_full; ++i) {
    std::optional<BlockHash> parent;
    if (i > 0) parent = (*hashes)[i - 1];
    const size_t start = i * static_cast<size_t>(block_size);
    hashes->push_back(hash_block(parent, tokens.subspan(start, static_cast<size_t>(block_size)),
                                 static_cast<int64_t>(start), extras));
  }
}

}  // namespace gemmaserve
