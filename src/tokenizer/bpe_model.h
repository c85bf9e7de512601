// Byte-pair-encoding model with Hugging Face tokenizers semantics (byte fallback, unk fusing).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/piece_index.h"
#include "tokenizer/tokenizer_spec.h"

namespace gemmaserve {

class BpeModel {
 public:
  // `merges` are token-id pairs in rank order; throws InputError naming `source` when a merged
  // piece is missing from the vocabulary or an id is out of range.
  BpeModel(std::vector<std::string> vocab, const std::vector<std::pair<int32_t, int32_t>>& merges,
           BpeOptions options, const std::string& source);
  BpeModel(const BpeModel&) = delete;
  BpeModel& operator=(const BpeModel&) = delete;
  BpeModel(BpeModel&&) = default;
  BpeModel& operator=(BpeModel&&) = default;

  // Appends the ids of one pre-tokenized word. Runs in O(n log n) in the word's length.
  void tokenize(std::string_view word, std::vector<int32_t>& out) const;

  std::optional<int32_t> piece_to_id(std::string_view piece) const;
  const std::vector<std::string>& pieces() const { return pieces_; }

 private:
  struct MergeTarget {
    uint32_t rank;
    int32_t new_id;
  };
  // Open-addressing map from an id pair to its merge; half a million entries stay compact.
  class MergeTable {
   public:
    void reserve(size_t n);
    void insert(int32_t a, int32_t b, MergeTarget target);  // a later duplicate wins, as in HF
    const MergeTarget* find(int32_t a, int32_t b) const;
    void prefetch(int32_t a, int32_t b) const;  // asks for the line insert(a, b) starts at

   private:
    struct Slot {
      uint64_t key = kEmpty;
      MergeTarget target{};
    };
    static constexpr uint64_t kEmpty = ~uint64_t{0};
    size_t home_of(uint64_t key) const;
    size_t slot_of(uint64_t key) const;
    std::vector<Slot> slots_;
    size_t mask_ = 0;
  };

  int32_t unk_id() const;

  std::vector<std::string> pieces_;
  PieceIndex ids_;  // over pieces_; a repeated piece keeps its first id
  MergeTable merges_;
  std::array<int32_t, 256> byte_ids_{};  // id of "<0xNN>", -1 when absent
  BpeOptions options_;
  std::optional<int32_t> unk_id_;
  std::string source_;
};

}  // namespace gemmaserve
