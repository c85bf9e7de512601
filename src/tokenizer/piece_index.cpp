#include "tokenizer/piece_index.h"

#include <algorithm>
#include <bit>
#include <functional>

namespace gemmaserve {

PieceIndex::PieceIndex(const std::vector<std::string>& pieces) : pieces_(pieces.data()) {
  // At most half full, so a miss ends within a few slots.
  const size_t capacity = std::bit_ceil(std::max<size_t>(16, pieces.size() * 2));
  slots_.assign(capacity, Slot{});
  mask_ = capacity - 1;
}

bool PieceIndex::insert(int32_t id) {
  const std::string_view piece = pieces_[static_cast<size_t>(id)];
  const size_t h = std::hash<std::string_view>{}(piece);
  const uint32_t tag = tag_of(h);
  for (size_t i = home(h);; i = (i + 1) & mask_) {
    Slot& slot = slots_[i];
    if (slot.id < 0) {
      slot = Slot{id, tag};
      return true;
    }
    if (slot.tag == tag && pieces_[static_cast<size_t>(slot.id)] == piece) return false;
  }
}

int32_t PieceIndex::find(std::string_view piece) const {
  if (slots_.empty()) return -1;
  const size_t h = std::hash<std::string_view>{}(piece);
  const uint32_t tag = tag_of(h);
  for (size_t i = home(h);; i = (i + 1) & mask_) {
    const Slot& slot = slots_[i];
    if (slot.id < 0) return -1;
    if (slot.tag == tag && pieces_[static_cast<size_t>(slot.id)] == piece) return slot.id;
  }
}

void PieceIndex::find_all(std::span<const std::string_view> pieces, std::span<int32_t> ids) const {
  if (slots_.empty()) {
    std::fill(ids.begin(), ids.end(), -1);
    return;
  }
  constexpr size_t kGroup = 32;
  size_t hashes[kGroup];
  int32_t candidates[kGroup];
  for (size_t begin = 0; begin < pieces.size(); begin += kGroup) {
    const size_t n = std::min(kGroup, pieces.size() - begin);
    // Three passes over the group, each asking for what the next one reads.
    for (size_t k = 0; k < n; ++k) {
      hashes[k] = std::hash<std::string_view>{}(pieces[begin + k]);
      __builtin_prefetch(&slots_[home(hashes[k])]);
    }
    for (size_t k = 0; k < n; ++k) {
      // The first slot with the piece's tag (-1: an empty slot came first, so it is absent).
      size_t i = home(hashes[k]);
      while (slots_[i].id >= 0 && slots_[i].tag != tag_of(hashes[k])) i = (i + 1) & mask_;
      candidates[k] = slots_[i].id;
      if (candidates[k] >= 0) __builtin_prefetch(&pieces_[static_cast<size_t>(candidates[k])]);
    }
    for (size_t k = 0; k < n; ++k) {
      const std::string_view piece = pieces[begin + k];
      const int32_t c = candidates[k];
      // A tag shared by another piece (rare) goes the slow way.
      ids[begin + k] = c < 0 || pieces_[static_cast<size_t>(c)] == piece ? c : find(piece);
    }
  }
}

}  // namespace gemmaserve
