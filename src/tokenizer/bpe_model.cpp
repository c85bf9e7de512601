#include "tokenizer/bpe_model.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <queue>
#include <span>

#include "core/error.h"
#include "core/utf8.h"

namespace gemmaserve {

namespace {

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

// One symbol of the word being merged, in a doubly linked list over a vector (as in HF's Word).
struct Symbol {
  int32_t id;
  int32_t prev;
  int32_t next;
  uint32_t len;  // bytes covered; 0 marks a symbol merged into its left neighbour
};

struct Candidate {
  uint32_t rank;
  uint32_t pos;
  int32_t new_id;
};

// Lowest rank first, then leftmost: the order HF's merge heap pops in.
struct CandidateAfter {
  bool operator()(const Candidate& x, const Candidate& y) const {
    return x.rank != y.rank ? x.rank > y.rank : x.pos > y.pos;
  }
};

}  // namespace

void BpeModel::MergeTable::reserve(size_t n) {
  size_t capacity = std::bit_ceil(std::max<size_t>(16, n * 2));
  slots_.assign(capacity, Slot{});
  mask_ = capacity - 1;
}

size_t BpeModel::MergeTable::home_of(uint64_t key) const {
  // splitmix64 finalizer: spreads the packed id pair over the table.
  uint64_t h = key + 0x9E3779B97F4A7C15ull;
  h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ull;
  h = (h ^ (h >> 27)) * 0x94D049BB133111EBull;
  h ^= h >> 31;
  return static_cast<size_t>(h) & mask_;
}

void BpeModel::MergeTable::prefetch(int32_t a, int32_t b) const {
  __builtin_prefetch(&slots_[home_of(pair_key(a, b))]);
}

size_t BpeModel::MergeTable::slot_of(uint64_t key) const {
  size_t i = home_of(key);
  while (slots_[i].key != kEmpty && slots_[i].key != key) i = (i + 1) & mask_;
  return i;
}

void BpeModel::MergeTable::insert(int32_t a, int32_t b, MergeTarget target) {
  uint64_t key = pair_key(a, b);
  Slot& slot = slots_[slot_of(key)];
  slot.key = key;
  slot.target = target;
}

const BpeModel::MergeTarget* BpeModel::MergeTable::find(int32_t a, int32_t b) const {
  if (slots_.empty()) return nullptr;
  const Slot& slot = slots_[slot_of(pair_key(a, b))];
  return slot.key == kEmpty ? nullptr : &slot.target;
}

BpeModel::BpeModel(std::vector<std::string> vocab,
                   const std::vector<std::pair<int32_t, int32_t>>& merges, BpeOptions options,
                   const std::string& source)
    : pieces_(std::move(vocab)), ids_(pieces_), options_(std::move(options)), source_(source) {
  for (size_t i = 0; i < pieces_.size(); ++i) ids_.insert(static_cast<int32_t>(i));
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    byte_ids_[static_cast<size_t>(b)] = ids_.find(name);
  }
  if (options_.unk_token) {
    if (const int32_t id = ids_.find(*options_.unk_token); id >= 0) unk_id_ = id;
  }

  merges_.reserve(merges.size());
  // A batch of merges at a time, so that the table lookups of a batch overlap in memory, and each
  // loop asks for the lines it reads kAhead merges ahead.
  constexpr size_t kBatch = 512;
  constexpr size_t kAhead = 16;
  const auto n = static_cast<int32_t>(pieces_.size());
  std::string joined;
  std::vector<size_t> ends;
  std::vector<std::string_view> merged;
  std::vector<int32_t> merged_ids(kBatch);
  for (size_t begin = 0; begin < merges.size(); begin += kBatch) {
    size_t count = std::min(kBatch, merges.size() - begin);
    std::optional<size_t> out_of_range;
    joined.clear();
    ends.clear();
    for (size_t k = 0; k < count; ++k) {
      if (k + kAhead < count) {
        auto [next_a, next_b] = merges[begin + k + kAhead];
        if (next_a >= 0 && next_a < n) __builtin_prefetch(&pieces_[static_cast<size_t>(next_a)]);
        if (next_b >= 0 && next_b < n) __builtin_prefetch(&pieces_[static_cast<size_t>(next_b)]);
      }
      auto [a, b] = merges[begin + k];
      if (a < 0 || a >= n || b < 0 || b >= n) {
        out_of_range = begin + k;
        count = k;
        break;
      }
      joined.append(pieces_[static_cast<size_t>(a)]).append(pieces_[static_cast<size_t>(b)]);
      ends.push_back(joined.size());
    }
    merged.clear();
    for (size_t k = 0, start = 0; k < count; start = ends[k++]) {
      merged.push_back(std::string_view(joined).substr(start, ends[k] - start));
    }
    ids_.find_all(merged, std::span(merged_ids).first(count));
    for (size_t k = 0; k < count; ++k) {
      if (k + kAhead < count) {
        merges_.prefetch(merges[begin + k + kAhead].first, merges[begin + k + kAhead].second);
      }
      const size_t rank = begin + k;
      auto [a, b] = merges[rank];
      if (merged_ids[k] < 0) {
        throw InputError(source_ + ": merge " + std::to_string(rank) + " ('" +
                         pieces_[static_cast<size_t>(a)] + "' + '" +
                         pieces_[static_cast<size_t>(b)] +
                         "') makes a piece that is not in the vocabulary");
      }
      merges_.insert(a, b, MergeTarget{static_cast<uint32_t>(rank), merged_ids[k]});
    }
    if (out_of_range) {
      throw InputError(source_ + ": merge " + std::to_string(*out_of_range) +
                       " uses a token id outside the vocabulary");
    }
  }
}

std::optional<int32_t> BpeModel::piece_to_id(std::string_view piece) const {
  const int32_t id = ids_.find(piece);
  if (id < 0) return std::nullopt;
  return id;
}

int32_t BpeModel::unk_id() const {
  if (!unk_id_) {
    throw InputError(source_ + ": the unknown token '" + *options_.unk_token +
                     "' is not in the vocabulary");
  }
  return *unk_id_;
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (options_.ignore_merges) {
    if (auto id = piece_to_id(word)) {
      out.push_back(*id);
      return;
    }
  }

  // Split into characters, mapping each to its token, its byte tokens, or <unk>.
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  auto add = [&symbols](int32_t id, size_t len) {
    auto index = static_cast<int32_t>(symbols.size());
    if (!symbols.empty()) symbols.back().next = index;
    symbols.push_back(Symbol{id, index - 1, -1, static_cast<uint32_t>(len)});
  };
  // An <unk> not yet added, so that consecutive unknown characters can fuse into one.
  bool unk_pending = false;
  size_t unk_len = 0;
  auto flush_unk = [&] {
    if (unk_pending) add(unk_id(), unk_len);
    unk_pending = false;
  };
  for (size_t pos = 0; pos < word.size();) {
    const size_t len = utf8::char_length(word, pos);
    const std::string_view ch = word.substr(pos, len);
    pos += len;
    if (auto id = piece_to_id(ch)) {
      flush_unk();
      add(*id, len);
      continue;
    }
    if (options_.byte_fallback) {
      bool all = true;
      for (char c : ch) all = all && byte_ids_[static_cast<uint8_t>(c)] >= 0;
      if (all) {
        // Like HF, byte tokens go in before a still-pending <unk> is flushed.
        for (char c : ch) add(byte_ids_[static_cast<uint8_t>(c)], 1);
        continue;
      }
    }
    if (!options_.unk_token) continue;  // HF drops the character when there is no unk token
    if (unk_pending && options_.fuse_unk) {
      unk_len += len;
    } else {
      flush_unk();
      unk_id();  // fails early when the unk token is missing
      unk_pending = true;
      unk_len = len;
    }
  }
  flush_unk();

  // Merge the best-ranked adjacent pair until none is left (tokenizers' Word::merge_all).
  std::priority_queue<Candidate, std::vector<Candidate>, CandidateAfter> queue;
  for (size_t i = 0; i + 1 < symbols.size(); ++i) {
    if (const MergeTarget* m = merges_.find(symbols[i].id, symbols[i + 1].id)) {
      queue.push(Candidate{m->rank, static_cast<uint32_t>(i), m->new_id});
    }
  }
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (left.len == 0 || left.next == -1) continue;
    const Symbol right = symbols[static_cast<size_t>(left.next)];
    // A stale entry: the pair at this position no longer merges into the same token.
    const MergeTarget* current = merges_.find(left.id, right.id);
    if (current == nullptr || current->new_id != top.new_id) continue;

    symbols[static_cast<size_t>(left.next)].len = 0;
    left.id = top.new_id;
    left.len += right.len;
    left.next = right.next;
    if (right.next >= 0)
      symbols[static_cast<size_t>(right.next)].prev = static_cast<int32_t>(top.pos);

    if (left.prev >= 0) {
      const Symbol& prev = symbols[static_cast<size_t>(left.prev)];
      if (const MergeTarget* m = merges_.find(prev.id, left.id)) {
        queue.push(Candidate{m->rank, static_cast<uint32_t>(left.prev), m->new_id});
      }
    }
    if (left.next >= 0) {
      const Symbol& next = symbols[static_cast<size_t>(left.next)];
      if (const MergeTarget* m = merges_.find(left.id, next.id)) {
        queue.push(Candidate{m->rank, top.pos, m->new_id});
      }
    }
  }
  for (const Symbol& s : symbols) {
    if (s.len != 0) out.push_back(s.id);
  }
}

}  // namespace gemmaserve
