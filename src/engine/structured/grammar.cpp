#include "engine/structured/grammar.h"

#include <algorithm>
#include <array>
#include <string>

#include "core/byte_lru_cache.h"
#include "core/error.h"

namespace gemmaserve::structured {

namespace {

int utf8_length(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

std::array<uint8_t, 4> utf8_encode(uint32_t cp) {
  switch (utf8_length(cp)) {
    case 1:
      return {static_cast<uint8_t>(cp), 0, 0, 0};
    case 2:
      return {static_cast<uint8_t>(0xC0 | (cp >> 6)), static_cast<uint8_t>(0x80 | (cp & 0x3F)), 0,
              0};
    case 3:
      return {static_cast<uint8_t>(0xE0 | (cp >> 12)),
              static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F)),
              static_cast<uint8_t>(0x80 | (cp & 0x3F)), 0};
    default:
      return {static_cast<uint8_t>(0xF0 | (cp >> 18)),
              static_cast<uint8_t>(0x80 | ((cp >> 12) & 0x3F)),
              static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F)),
              static_cast<uint8_t>(0x80 | (cp & 0x3F))};
  }
}

// Byte-range sequences encoding exactly [lo, hi] (one encoded length, no surrogates): split
// until every byte position below the first spans a whole range.
void utf8_sequences(uint32_t lo, uint32_t hi,
                    std::vector<std::vector<std::pair<uint8_t, uint8_t>>>* out) {
  const int n = utf8_length(lo);
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_sequences(lo, lo | m, out);
        utf8_sequences((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        utf8_sequences(lo, (hi & ~m) - 1, out);
        utf8_sequences(hi & ~m, hi, out);
        return;
      }
    }
  }
  const auto a = utf8_encode(lo), b = utf8_encode(hi);
  std::vector<std::pair<uint8_t, uint8_t>> seq;
  for (int k = 0; k < n; ++k)
    seq.emplace_back(a[static_cast<size_t>(k)], b[static_cast<size_t>(k)]);
  out->push_back(std::move(seq));
}

}  // namespace

void Grammar::charge(size_t symbols) {
  symbols_ += symbols;
  if (symbols_ > kMaxSymbols || names_.size() > kMaxRules) {
    throw InputError("the structured output grammar is too large (over " +
                     std::to_string(kMaxSymbols) + " symbols or " + std::to_string(kMaxRules) +
                     " rules); use smaller repetition counts or a smaller schema");
  }
}

uint32_t Grammar::add_rule(std::string name) {
  names_.push_back(std::move(name));
  rules_.emplace_back();
  charge(1);
  return static_cast<uint32_t>(names_.size() - 1);
}

void Grammar::set_alternatives(uint32_t rule, std::vector<Sequence> alternatives) {
  size_t n = alternatives.size();
  for (const Sequence& s : alternatives) n += s.size();
  charge(n);
  rules_[rule] = std::move(alternatives);
}

Grammar::Symbol Grammar::bytes(const ByteSet& set) {
  for (size_t i = byte_sets_.size(); i-- > 0 && i + 64 >= byte_sets_.size();) {
    if (byte_sets_[i] == set) return {false, static_cast<uint32_t>(i)};  // recent sets repeat
  }
  byte_sets_.push_back(set);
  return {false, static_cast<uint32_t>(byte_sets_.size() - 1)};
}

Grammar::Symbol Grammar::byte(uint8_t b) {
  ByteSet s;
  s.set(b);
  return bytes(s);
}

Grammar::Sequence Grammar::literal(std::string_view text) {
  Sequence seq;
  for (char c : text) seq.push_back(byte(static_cast<uint8_t>(c)));
  return seq;
}

Grammar::Symbol Grammar::choice(std::vector<Sequence> alternatives, std::string name) {
  const uint32_t r = add_rule(std::move(name));
  set_alternatives(r, std::move(alternatives));
  return ref(r);
}

Grammar::Symbol Grammar::star(Sequence body) {
  const uint32_t r = add_rule("star");
  body.push_back(ref(r));  // a tail call: matching never grows the stack
  set_alternatives(r, {std::move(body), {}});
  return ref(r);
}

Grammar::Symbol Grammar::plus(Sequence body) {
  Sequence once = body;
  once.push_back(star(std::move(body)));
  return choice({std::move(once)}, "plus");
}

Grammar::Symbol Grammar::optional(Sequence body) { return choice({std::move(body), {}}, "opt"); }

Grammar::Symbol Grammar::repeat(Sequence body, int min, int max) {
  if (min < 0 || (max >= 0 && max < min)) throw InputError("bad repetition bounds");
  charge(body.size() * static_cast<size_t>(std::max(min, max)));  // refuse before building
  Sequence seq;
  for (int i = 0; i < min; ++i) seq.insert(seq.end(), body.begin(), body.end());
  if (max < 0) {
    seq.push_back(star(body));
  } else if (max > min) {
    // body (body (body)?)?: nested optionals, each a tail call.
    Symbol tail = optional(body);
    for (int i = min + 1; i < max; ++i) {
      Sequence s = body;
      s.push_back(tail);
      tail = optional(std::move(s));
    }
    seq.push_back(tail);
  }
  return choice({std::move(seq)}, "repeat");
}

Grammar::Symbol Grammar::one_of(std::vector<std::string> texts) {
  std::sort(texts.begin(), texts.end());
  texts.erase(std::unique(texts.begin(), texts.end()), texts.end());
  // Each task: the rule for the texts in [begin, end), all sharing their first `depth` bytes
  // (a loop, not recursion: one long text must not exhaust the stack).
  struct Task {
    uint32_t rule;
    size_t begin, end, depth;
  };
  const uint32_t root = add_rule("choice");
  std::vector<Task> todo = {{root, 0, texts.size(), 0}};
  while (!todo.empty()) {
    const Task t = todo.back();
    todo.pop_back();
    std::vector<Sequence> alts;
    size_t i = t.begin;
    if (texts[i].size() == t.depth) {  // sorted: the text that ends here comes first
      alts.emplace_back();
      ++i;
    }
    while (i < t.end) {
      const char b = texts[i][t.depth];
      size_t j = i;
      while (j < t.end && texts[j][t.depth] == b) ++j;
      const uint32_t child = add_rule("choice");
      alts.push_back({byte(static_cast<uint8_t>(b)), ref(child)});
      todo.push_back({child, i, j, t.depth + 1});
      i = j;
    }
    set_alternatives(t.rule, std::move(alts));
  }
  return ref(root);
}

Grammar::Symbol Grammar::codepoints(const CodepointRanges& ranges) {
  std::vector<Sequence> alts;
  ByteSet ascii;
  std::vector<std::vector<std::pair<uint8_t, uint8_t>>> seqs;
  for (auto [lo, hi] : ranges) {
    hi = std::min<uint32_t>(hi, 0x10FFFF);
    // Cut at the encoded-length boundaries and around the surrogates.
    for (auto [a, b] : {std::pair<uint32_t, uint32_t>{0, 0x7F},
                        {0x80, 0x7FF},
                        {0x800, 0xD7FF},
                        {0xE000, 0xFFFF},
                        {0x10000, 0x10FFFF}}) {
      const uint32_t l = std::max(lo, a), h = std::min(hi, b);
      if (l > h) continue;
      if (b == 0x7F) {
        for (uint32_t c = l; c <= h; ++c) ascii.set(c);
      } else {
        utf8_sequences(l, h, &seqs);
      }
    }
  }
  if (ascii.any()) alts.push_back({bytes(ascii)});
  for (const auto& s : seqs) {
    Sequence seq;
    for (auto [a, b] : s) {
      ByteSet set;
      for (uint32_t c = a; c <= b; ++c) set.set(c);
      seq.push_back(bytes(set));
    }
    alts.push_back(std::move(seq));
  }
  if (alts.size() == 1 && alts[0].size() == 1) return alts[0][0];
  return choice(std::move(alts), "char");
}

uint8_t Grammar::private_byte(int32_t token) {
  for (const auto& [id, bytes] : private_tokens_) {
    if (id == token) return static_cast<uint8_t>(bytes[0]);
  }
  const size_t n = private_tokens_.size();
  if (kFirstPrivateByte + n > 0xFF) throw InputError("a grammar takes at most 8 private tokens");
  const auto byte = static_cast<uint8_t>(kFirstPrivateByte + n);
  private_tokens_.emplace_back(token, std::string(1, static_cast<char>(byte)));
  return byte;
}

uint64_t Grammar::memory_bytes() const {
  uint64_t bytes = sizeof(Grammar) + heap_bytes(names_) + heap_bytes(rules_) +
                   heap_bytes(byte_sets_) + heap_bytes(private_tokens_) + heap_bytes(elements_) +
                   heap_bytes(starts_);
  for (const std::string& name : names_) bytes += heap_bytes(name);
  for (const auto& alternatives : rules_) {
    bytes += heap_bytes(alternatives);
    for (const Sequence& sequence : alternatives) bytes += heap_bytes(sequence);
  }
  for (const auto& [token, text] : private_tokens_) bytes += heap_bytes(text);
  for (const auto& starts : starts_) bytes += heap_bytes(starts);
  return bytes;
}

void Grammar::finish() {
  if (root_ >= names_.size()) throw InputError("the grammar has no root rule");
  // Nullable rules, to a fixed point.
  const size_t n = rules_.size();
  std::vector<char> nullable(n, 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; ++r) {
      if (nullable[r]) continue;
      for (const Sequence& s : rules_[r]) {
        if (std::all_of(s.begin(), s.end(),
                        [&](const Symbol& x) { return x.is_rule && nullable[x.index]; })) {
          nullable[r] = changed = true;
          break;
        }
      }
    }
  }
  // Productive rules (some finite text matches them), to a fixed point: a rule that never
  // finishes would leave the matcher alive with no way to end.
  std::vector<char> productive(n, 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; ++r) {
      if (productive[r]) continue;
      for (const Sequence& s : rules_[r]) {
        if (std::all_of(s.begin(), s.end(),
                        [&](const Symbol& x) { return !x.is_rule || productive[x.index]; })) {
          productive[r] = changed = true;
          break;
        }
      }
    }
  }
  for (size_t r = 0; r < n; ++r) {
    if (!productive[r] && !rules_[r].empty()) {
      throw InputError("the grammar's rule '" + names_[r] + "' can never finish (every " +
                       "alternative needs the rule again)");
    }
  }
  // Left edges: r reaches rule t before any byte. An edge grows the stack unless t is the last
  // symbol (a tail call). A cycle through a growing edge would expand forever.
  struct Edge {
    uint32_t to;
    bool grows;
  };
  std::vector<std::vector<Edge>> edges(n);
  for (size_t r = 0; r < n; ++r) {
    if (rules_[r].empty()) {
      throw InputError("the grammar's rule '" + names_[r] + "' has no alternatives");
    }
    for (const Sequence& s : rules_[r]) {
      for (size_t i = 0; i < s.size(); ++i) {
        if (!s[i].is_rule) break;
        edges[r].push_back({s[i].index, i + 1 < s.size()});
        if (!nullable[s[i].index]) break;
      }
    }
  }
  // Tarjan's strongly connected components (iterative).
  std::vector<int> index(n, -1), low(n, 0), comp(n, -1);
  std::vector<char> on_stack(n, 0);
  std::vector<uint32_t> stack;
  int counter = 0, comps = 0;
  for (uint32_t start = 0; start < n; ++start) {
    if (index[start] >= 0) continue;
    std::vector<std::pair<uint32_t, size_t>> call = {{start, 0}};
    index[start] = low[start] = counter++;
    stack.push_back(start);
    on_stack[start] = 1;
    while (!call.empty()) {
      auto& [v, next] = call.back();
      if (next < edges[v].size()) {
        const uint32_t w = edges[v][next++].to;
        if (index[w] < 0) {
          index[w] = low[w] = counter++;
          stack.push_back(w);
          on_stack[w] = 1;
          call.emplace_back(w, 0);
        } else if (on_stack[w]) {
          low[v] = std::min(low[v], index[w]);
        }
        continue;
      }
      if (low[v] == index[v]) {
        uint32_t w;
        do {
          w = stack.back();
          stack.pop_back();
          on_stack[w] = 0;
          comp[w] = comps;
        } while (w != v);
        ++comps;
      }
      const uint32_t done = v;
      call.pop_back();
      if (!call.empty()) low[call.back().first] = std::min(low[call.back().first], low[done]);
    }
  }
  for (size_t r = 0; r < n; ++r) {
    for (const Edge& e : edges[r]) {
      if (e.grows && comp[e.to] == comp[r]) {
        throw InputError("the grammar is left-recursive at rule '" + names_[r] +
                         "' (a rule reaches itself before any character)");
      }
    }
  }
  elements_.clear();
  starts_.assign(n, {});
  for (size_t r = 0; r < n; ++r) {
    for (const Sequence& s : rules_[r]) {
      starts_[r].push_back(static_cast<uint32_t>(elements_.size()));
      for (const Symbol& x : s) elements_.push_back((x.is_rule ? kRuleTag : kBytesTag) | x.index);
      elements_.push_back(kEndTag);
    }
  }
}

}  // namespace gemmaserve::structured
