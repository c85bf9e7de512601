#include "engine/structured/grammar_matcher.h"

#include <algorithm>

#include "engine/json_object_grammar.h"

namespace gemmaserve::structured {

namespace {

uint64_t hash_words(std::span<const uint32_t> w) {
  uint64_t h = 0xcbf29ce484222325ull ^ w.size();
  for (uint32_t x : w) h = (h ^ x) * 0x100000001b3ull;
  return h ^ (h >> 29);
}

}  // namespace

bool GrammarState::accepting() const {
  for (size_t i = 0; i < words.size(); i += words[i] + 1) {
    if (words[i] == 0) return true;
  }
  return false;
}

bool GrammarState::can_continue() const {
  for (size_t i = 0; i < words.size(); i += words[i] + 1) {
    if (words[i] != 0) return true;
  }
  return false;
}

void GrammarMatcher::push(std::span<const uint32_t> stack) {
  if (stack.size() > kMaxStackDepth) return;  // deeper nesting than any answer needs
  if (seen_table_.size() < 2 * (seen_count_ + 1)) {
    // Grow and rehash.
    std::vector<uint64_t> old = std::move(seen_table_);
    seen_table_.assign(std::max<size_t>(64, old.size() * 2), 0);
    seen_slots_.clear();
    for (uint64_t slot : old) {
      if (slot == 0) continue;
      const size_t off = slot - 1;
      const std::span<const uint32_t> s(seen_words_.data() + off + 1, seen_words_[off]);
      size_t i = hash_words(s) & (seen_table_.size() - 1);
      while (seen_table_[i] != 0) i = (i + 1) & (seen_table_.size() - 1);
      seen_table_[i] = slot;
      seen_slots_.push_back(i);
    }
  }
  size_t i = hash_words(stack) & (seen_table_.size() - 1);
  while (seen_table_[i] != 0) {
    const size_t off = seen_table_[i] - 1;
    if (seen_words_[off] == stack.size() &&
        std::equal(stack.begin(), stack.end(), seen_words_.begin() + static_cast<long>(off) + 1)) {
      return;  // already expanded in this closure
    }
    i = (i + 1) & (seen_table_.size() - 1);
  }
  seen_table_[i] = seen_words_.size() + 1;
  seen_slots_.push_back(i);
  ++seen_count_;
  seen_words_.push_back(static_cast<uint32_t>(stack.size()));
  seen_words_.insert(seen_words_.end(), stack.begin(), stack.end());
  pending_.push_back(pending_words_.size());
  pending_words_.push_back(static_cast<uint32_t>(stack.size()));
  pending_words_.insert(pending_words_.end(), stack.begin(), stack.end());
}

void GrammarMatcher::close(GrammarState* to) {
  const std::vector<uint32_t>& el = g_.elements();
  size_t stacks = 0;
  while (!pending_.empty()) {
    const size_t off = pending_.back();
    pending_.pop_back();
    current_.assign(pending_words_.begin() + static_cast<long>(off) + 1,
                    pending_words_.begin() + static_cast<long>(off) + 1 + pending_words_[off]);
    pending_words_.resize(off);
    if (current_.empty()) {  // the whole grammar matched along this path
      if (stacks++ < kMaxStacks) to->words.push_back(0);
      continue;
    }
    const uint32_t p = current_.back();
    if (p >= kCutBase) {  // the kept frames are done: what follows lies below the cut
      if (stacks++ < kMaxStacks) {
        to->words.push_back(static_cast<uint32_t>(current_.size()));
        to->words.insert(to->words.end(), current_.begin(), current_.end());
      }
      continue;
    }
    const uint32_t e = el[p];
    switch (e & Grammar::kTagMask) {
      case Grammar::kEndTag:
        current_.pop_back();
        push(current_);
        break;
      case Grammar::kRuleTag: {
        current_.pop_back();
        if ((el[p + 1] & Grammar::kTagMask) != Grammar::kEndTag) current_.push_back(p + 1);
        for (uint32_t start : g_.rule_starts(e & ~Grammar::kTagMask)) {
          current_.push_back(start);
          push(current_);
          current_.pop_back();
        }
        break;
      }
      default:
        if (stacks++ < kMaxStacks) {
          to->words.push_back(static_cast<uint32_t>(current_.size()));
          to->words.insert(to->words.end(), current_.begin(), current_.end());
        }
    }
  }
  // Reset the seen set for the next closure.
  for (size_t slot : seen_slots_) seen_table_[slot] = 0;
  seen_slots_.clear();
  seen_words_.clear();
  seen_count_ = 0;
}

GrammarState GrammarMatcher::initial() {
  GrammarState s;
  for (uint32_t start : g_.rule_starts(g_.root())) {
    const uint32_t one[] = {start};
    push(one);
  }
  close(&s);
  return s;
}

bool GrammarMatcher::advance(const GrammarState& from, uint8_t byte, GrammarState* to) {
  to->words.clear();
  const std::vector<uint32_t>& el = g_.elements();
  for (size_t i = 0; i < from.words.size(); i += from.words[i] + 1) {
    const uint32_t len = from.words[i];
    if (len == 0) continue;
    const uint32_t top = from.words[i + len];
    if (top >= kCutBase) continue;
    if (!g_.byte_set(el[top] & ~Grammar::kTagMask).test(byte)) continue;
    current_.assign(from.words.begin() + static_cast<long>(i) + 1,
                    from.words.begin() + static_cast<long>(i + len) + 1);
    current_.back() = top + 1;
    push(current_);
  }
  close(to);
  return !to->dead();
}

bool GrammarMatcher::feed(GrammarState* state, std::string_view text) {
  GrammarState next;
  for (char c : text) {
    if (!advance(*state, static_cast<uint8_t>(c), &next)) {
      state->words.clear();
      return false;
    }
    std::swap(*state, next);
  }
  return true;
}

void GrammarMatcher::reset_dfa_if_large() {
  if (interned_.size() < kMaxInterned && dfa_bytes_ < kMaxDfaBytes) return;
  interned_.clear();
  ids_.clear();
  transitions_.clear();
  cut_of_.clear();
  dfa_bytes_ = 0;
}

uint32_t GrammarMatcher::intern(const GrammarState& s) {
  const auto [it, added] = ids_.try_emplace(std::string(s.key()), interned_.size());
  if (!added) return it->second;
  interned_.push_back(s);
  transitions_.emplace_back();
  std::vector<uint32_t> cut;
  for (size_t i = 0; i < s.words.size(); i += s.words[i] + 1) {
    if (s.words[i] == 1 && s.words[i + 1] >= kCutBase) cut.push_back(s.words[i + 1] - kCutBase);
  }
  // The state twice (interned, and the key), its cut stacks, the hash node and vector slots.
  dfa_bytes_ += 2 * s.key().size() + cut.capacity() * sizeof(uint32_t) + sizeof(GrammarState) +
                sizeof(std::string) + sizeof(cut) + 64;
  cut_of_.push_back(std::move(cut));
  return it->second;
}

uint32_t GrammarMatcher::step(uint32_t state, uint8_t byte) {
  if (!transitions_[state]) {
    transitions_[state] = std::make_unique<std::array<uint32_t, 256>>();
    transitions_[state]->fill(0);
    dfa_bytes_ += sizeof(std::array<uint32_t, 256>);
  }
  const uint32_t known = (*transitions_[state])[byte];
  if (known != 0) return known == 1 ? kDead : known - 2;
  const uint32_t next = advance(interned_[state], byte, &scratch_) ? intern(scratch_) : kDead;
  (*transitions_[state])[byte] = next == kDead ? 1 : next + 2;
  return next;
}

void GrammarMatcher::allowed_tokens(const JsonTokenTrie& trie, const GrammarState& state,
                                    std::vector<int32_t>* out) {
  reset_dfa_if_large();
  walk(trie, JsonTokenTrie::kRoot, intern(state), out, nullptr);
}

void GrammarMatcher::walk(const JsonTokenTrie& trie, uint32_t node, uint32_t state,
                          std::vector<int32_t>* out, std::vector<EscapeNode>* escapes) {
  for (uint32_t c = trie.first_child(node); c != 0; c = trie.next_sibling(c)) {
    const uint32_t next = step(state, trie.node_byte(c));
    if (next == kDead) continue;
    const std::span<const int32_t> ids = trie.node_tokens(c);
    out->insert(out->end(), ids.begin(), ids.end());
    if (escapes != nullptr && !cut_of_[next].empty()) escapes->push_back({c, cut_of_[next]});
    walk(trie, c, next, out, escapes);
  }
}

GrammarState GrammarMatcher::truncate(const GrammarState& full, size_t keep) {
  GrammarState t;
  uint32_t index = 0;
  for (size_t i = 0; i < full.words.size(); i += full.words[i] + 1, ++index) {
    const uint32_t len = full.words[i];
    const auto top = full.words.begin() + static_cast<long>(i + 1 + len);
    if (len <= keep) {
      t.words.insert(t.words.end(), full.words.begin() + static_cast<long>(i), top);
      continue;
    }
    t.words.push_back(static_cast<uint32_t>(keep + 1));
    t.words.push_back(kCutBase + index);
    t.words.insert(t.words.end(), top - static_cast<long>(keep), top);
  }
  return t;
}

void GrammarMatcher::walk_truncated(const JsonTokenTrie& trie, const GrammarState& truncated,
                                    std::vector<int32_t>* certain,
                                    std::vector<EscapeNode>* escapes) {
  reset_dfa_if_large();
  walk(trie, JsonTokenTrie::kRoot, intern(truncated), certain, escapes);
}

void GrammarMatcher::walk_escape(const JsonTokenTrie& trie, const GrammarState& full, size_t keep,
                                 const EscapeNode& escape, std::vector<int32_t>* out) {
  // The cut stacks' frames below the kept ones, expanded: the full context at this node.
  std::vector<uint32_t> index_of;  // word offset of each full stack
  for (size_t i = 0; i < full.words.size(); i += full.words[i] + 1) index_of.push_back(i);
  for (uint32_t s : escape.stacks) {
    const size_t off = index_of[s];
    const uint32_t len = full.words[off];
    const std::span<const uint32_t> below(full.words.data() + off + 1, len - keep);
    push(below);
  }
  scratch_.words.clear();
  close(&scratch_);
  if (scratch_.dead()) return;
  reset_dfa_if_large();
  walk(trie, escape.node, intern(scratch_), out, nullptr);
}

}  // namespace gemmaserve::structured
