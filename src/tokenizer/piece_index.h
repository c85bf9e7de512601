// Piece -> id over a vocabulary's strings: one flat open-addressing table of (id, hash tag) slots,
// so a lookup reads one slot and, only on a tag match, one piece. Loading a 262,144-piece
// vocabulary with 514,906 merges is about a million lookups, which a node-based map made slow.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace gemmaserve {

class PieceIndex {
 public:
  PieceIndex() = default;
  // Indexes no piece yet; `pieces` must outlive the index, and its buffer must stay where it is
  // (moving the vector keeps it; growing it does not).
  explicit PieceIndex(const std::vector<std::string>& pieces);

  // Adds pieces[id]; false (and the first id kept) when an equal piece is already indexed.
  bool insert(int32_t id);
  // The id of `piece`, or -1.
  int32_t find(std::string_view piece) const;
  // ids[i] = find(pieces[i]) for all i, with the memory reads of all of them in flight together
  // (a table this size is out of cache: one lookup at a time waits on two misses in a row).
  void find_all(std::span<const std::string_view> pieces, std::span<int32_t> ids) const;

 private:
  struct Slot {
    int32_t id = -1;
    uint32_t tag = 0;
  };
  // The first slot of `h`'s probe sequence.
  size_t home(size_t h) const { return h & mask_; }
  static uint32_t tag_of(size_t h) { return static_cast<uint32_t>(h >> 32); }

  const std::string* pieces_ = nullptr;
  std::vector<Slot> slots_;
  size_t mask_ = 0;
};

}  // namespace gemmaserve
