#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "kernels/cpu/attention_internal.h"

namespace gemmaserve::cpu {
namespace detail {
namespace {

constexpr int kTile = 16;  // accumulator floats kept in registers while summing a chunk

// q·k with 16 partial sums: enough independent add chains to hide latency.
inline float dot16(const float* __restrict a, const float* __restrict b, int n) {
  float acc[16] = {};
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int j = 0; j < 16; ++j) acc[j] += a[i + j] * b[i + j];
  }
  for (int j = 0; j < 8; ++j) acc[j] += acc[j + 8];
  float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

}  // namespace

// Reads each chunk's K rows, then its V rows, decoded to f32 in ws.rows.
void attend_group_portable(const PagedKv& kv, const AttentionShape& shape,
                           const AttentionGroupTask& task, AttentionScratch& ws) {
  constexpr int kChunk = kAttentionKeyChunk;
  const int group = task.group;
  const int hd = shape.head_dim;
  const int64_t row_bytes = static_cast<int64_t>(kv_row_bytes(kv.dtype, hd));
  const int64_t head_offset = task.kv_head * row_bytes;
  const auto* kbase = static_cast<const uint8_t*>(kv.k);
  const auto* vbase = static_cast<const uint8_t*>(kv.v);
  int64_t slots[kChunk];

  std::fill(ws.acc.begin(), ws.acc.begin() + static_cast<size_t>(group) * hd, 0.0f);
  std::fill(ws.max.begin(), ws.max.begin() + group, -std::numeric_limits<float>::infinity());
  std::fill(ws.sum.begin(), ws.sum.begin() + group, 0.0f);

  for (int32_t c0 = task.range.begin; c0 < task.range.end; c0 += kChunk) {
    const int n = std::min<int32_t>(kChunk, task.range.end - c0);
    for (int j = 0; j < n; ++j) {
      const int32_t pos = c0 + j;
      const int64_t block = task.block_table[static_cast<size_t>(pos / kv.block_size)];
      slots[j] = (block * kv.block_size + pos % kv.block_size) * kv.slot_bytes + head_offset;
      decode_kv_row(kv.dtype, kbase + slots[j], hd, &ws.rows[static_cast<size_t>(j) * hd]);
    }
    for (int j = 0; j < n; ++j) {
      const float* key = &ws.rows[static_cast<size_t>(j) * hd];
      for (int g = 0; g < group; ++g) {
        ws.scores[g * kChunk + j] = dot16(task.q + g * hd, key, hd) * shape.scale;
      }
    }
    for (int g = 0; g < group; ++g) {
      float* s = &ws.scores[g * kChunk];
      const int seen = task.keys_for_head(g, c0, n);  // later keys are masked (weight 0)
      float cmax = ws.max[g];
      for (int j = 0; j < seen; ++j) cmax = std::max(cmax, s[j]);
      float* acc = &ws.acc[static_cast<size_t>(g) * hd];
      if (cmax > ws.max[g]) {
        // exp(-inf) = 0 on the first chunk, so the empty accumulators stay zero.
        const float corr = std::exp(ws.max[g] - cmax);
        for (int d = 0; d < hd; ++d) acc[d] *= corr;
        ws.sum[g] *= corr;
        ws.max[g] = cmax;
      }
      for (int j = 0; j < n; ++j) {
        s[j] = j < seen ? std::exp(s[j] - cmax) : 0.0f;
        ws.sum[g] += s[j];
      }
    }
    for (int j = 0; j < n; ++j) {
      decode_kv_row(kv.dtype, vbase + slots[j], hd, &ws.rows[static_cast<size_t>(j) * hd]);
    }
    for (int g = 0; g < group; ++g) {
      const float* p = &ws.scores[g * kChunk];
      float* acc = &ws.acc[static_cast<size_t>(g) * hd];
      // Register tiles of the accumulator; each element still sums keys in order.
      int d0 = 0;
      for (; d0 + kTile <= hd; d0 += kTile) {
        float t[kTile];
        for (int d = 0; d < kTile; ++d) t[d] = acc[d0 + d];
        for (int j = 0; j < n; ++j) {
          const float* v = &ws.rows[static_cast<size_t>(j) * hd + d0];
          for (int d = 0; d < kTile; ++d) t[d] += p[j] * v[d];
        }
        for (int d = 0; d < kTile; ++d) acc[d0 + d] = t[d];
      }
      for (int j = 0; j < n; ++j) {
        const float* v = &ws.rows[static_cast<size_t>(j) * hd];
        for (int d = d0; d < hd; ++d) acc[d] += p[j] * v[d];
      }
    }
  }
}

}  // namespace detail

namespace {

using detail::kAttentionKeySegment;
using detail::SoftmaxState;

// One work item: every query head of one KV-head group for `queries` consecutive query tokens
// that share their first key, over the key segments [first_segment, end_segment) of their
// ranges (all of them unless the item is split).
struct Item {
  int32_t seq;
  int32_t query;
  int32_t kv_head;
  int32_t first_segment;
  int32_t end_segment;
  int32_t queries = 1;
};

// Keys of segment `s` that `range` covers.
KeyRange segment_keys(KeyRange range, int32_t s) {
  return {std::max(range.begin, s * kAttentionKeySegment),
          std::min(range.end, (s + 1) * kAttentionKeySegment)};
}

int32_t first_segment(KeyRange r) { return r.begin / kAttentionKeySegment; }
int32_t end_segment(KeyRange r) {
  return r.end > r.begin ? (r.end - 1) / kAttentionKeySegment + 1 : first_segment(r);
}

// Keys of `range` inside segments [first, end).
int64_t keys_in_segments(KeyRange range, int32_t first, int32_t end) {
  return std::max(0, std::min(range.end, end * kAttentionKeySegment) -
                         std::max(range.begin, first * kAttentionKeySegment));
}

// to <- to then from: both states rescaled to their common maximum. Segments are never
// empty, so both maxima are finite.
void fold_state(const SoftmaxState& from, const SoftmaxState& to, int group, int hd) {
  for (int g = 0; g < group; ++g) {
    const float m = std::max(to.max[g], from.max[g]);
    const float ct = std::exp(to.max[g] - m), cf = std::exp(from.max[g] - m);
    float* t = to.acc + static_cast<size_t>(g) * hd;
    const float* f = from.acc + static_cast<size_t>(g) * hd;
    for (int d = 0; d < hd; ++d) t[d] = t[d] * ct + f[d] * cf;
    to.sum[g] = to.sum[g] * ct + from.sum[g] * cf;
    to.max[g] = m;
  }
}

void copy_state(const SoftmaxState& from, const SoftmaxState& to, int group, int hd) {
  std::copy(from.acc, from.acc + static_cast<size_t>(group) * hd, to.acc);
  std::copy(from.max, from.max + group, to.max);
  std::copy(from.sum, from.sum + group, to.sum);
}

// out = acc / sum per head (zero for a query that sees no key).
void finish_state(const SoftmaxState& st, int group, int hd, float* out) {
  for (int g = 0; g < group; ++g) {
    const float l = st.sum[g];
    const float* a = st.acc + static_cast<size_t>(g) * hd;
    float* o = out + static_cast<size_t>(g) * hd;
    if (l > 0.0f) {
      for (int d = 0; d < hd; ++d) o[d] = a[d] / l;
    } else {
      std::fill(o, o + hd, 0.0f);
    }
  }
}

// The state of query i's heads inside a state of several queries' heads.
SoftmaxState query_state(const SoftmaxState& st, int i, int group, int hd) {
  const size_t heads = static_cast<size_t>(i) * group;
  return {st.acc + heads * hd, st.max + heads, st.sum + heads};
}

// `count` group states laid out in `data` (resized to hold them).
struct StateBuffer {
  std::vector<float>& data;
  int group = 0, hd = 0;
  StateBuffer(std::vector<float>& d, size_t count, int g, int h) : data(d), group(g), hd(h) {
    data.resize(count * static_cast<size_t>(g) * (h + 2));
  }
  SoftmaxState at(size_t i) {
    float* base = data.data() + i * static_cast<size_t>(group) * (hd + 2);
    return {base, base + static_cast<size_t>(group) * hd,
            base + static_cast<size_t>(group) * hd + group};
  }
};

detail::AttendGroupFn attend_fn(SimdIsa isa, int head_dim) {
  if (head_dim % 16 != 0) return detail::attend_group_portable;
#if defined(__x86_64__)
  if (isa == SimdIsa::kAvx512) return detail::attend_group_avx512;
  if (isa == SimdIsa::kAvx2 || isa == SimdIsa::kAvxVnni) return detail::attend_group_avx2;
#else
  (void)isa;
#endif
  return detail::attend_group_portable;
}

}  // namespace

struct AttentionWorkspace::Buffers {
  std::vector<Item> items, rebuilt;  // rebuilt: the next list of items, then swapped in
  std::vector<float> piece_states;
  std::vector<int64_t> cost_prefix;
  std::vector<size_t> bounds;
  std::vector<detail::AttentionScratch> scratch;  // one per part
};

AttentionWorkspace::AttentionWorkspace() : buffers_(std::make_unique<Buffers>()) {}
AttentionWorkspace::~AttentionWorkspace() = default;
AttentionWorkspace::AttentionWorkspace(AttentionWorkspace&&) noexcept = default;
AttentionWorkspace& AttentionWorkspace::operator=(AttentionWorkspace&&) noexcept = default;

KeyRange attention_key_range(const AttentionSeq& seq, const AttentionShape& shape, int32_t i) {
  if (!seq.key_ranges.empty()) return seq.key_ranges[static_cast<size_t>(i)];
  const int32_t pos = seq.first_pos + i;
  const int32_t begin = shape.window > 0 ? std::max(0, pos - shape.window + 1) : 0;
  return {begin, pos + 1};
}

bool attention_blocks_valid(const PagedKv& kv, const AttentionShape& shape,
                            std::span<const AttentionSeq> seqs) {
  if (kv.block_size <= 0) return false;
  for (const AttentionSeq& seq : seqs) {
    int32_t checked_lo = 0, checked_hi = -1;  // logical blocks already known valid
    for (int32_t i = 0; i < seq.num_queries; ++i) {
      const KeyRange r = attention_key_range(seq, shape, i);
      if (r.begin < 0 || r.end < r.begin) return false;
      if (r.end == r.begin) continue;
      const int32_t lo = r.begin / kv.block_size, hi = (r.end - 1) / kv.block_size;
      if (lo >= checked_lo && hi <= checked_hi) continue;
      for (int32_t b = lo; b <= hi; ++b) {
        if (static_cast<size_t>(b) >= seq.block_table.size()) return false;
        const int32_t phys = seq.block_table[static_cast<size_t>(b)];
        if (phys < 0 || phys >= kv.num_blocks) return false;
      }
      checked_lo = lo;
      checked_hi = hi;
    }
  }
  return true;
}

void paged_attention(const float* q, size_t ldq, const PagedKv& kv, const AttentionShape& shape,
                     std::span<const AttentionSeq> seqs, float* out, size_t ldo, ThreadPool* pool,
                     AttentionWorkspace* workspace) {
  paged_attention(q, ldq, kv, shape, seqs, out, ldo, pool, best_simd_isa(), workspace);
}

void paged_attention(const float* q, size_t ldq, const PagedKv& kv, const AttentionShape& shape,
                     std::span<const AttentionSeq> seqs, float* out, size_t ldo, ThreadPool* pool,
                     SimdIsa isa, AttentionWorkspace* workspace) {
  std::optional<AttentionWorkspace> own;
  if (workspace == nullptr) workspace = &own.emplace();
  AttentionWorkspace::Buffers& buf = workspace->buffers();
  const int group = shape.num_heads / shape.num_kv_heads;
  const int hd = shape.head_dim;
  const detail::AttendGroupFn attend = attend_fn(isa, hd);
  const size_t parts = pool == nullptr ? 1 : pool->size();
  // Items ordered sequence -> KV head -> query, so neighbouring items reuse cached keys.
  std::vector<Item>& items = buf.items;
  items.clear();
  for (size_t s = 0; s < seqs.size(); ++s) {
    for (int32_t h = 0; h < shape.num_kv_heads; ++h) {
      for (int32_t i = 0; i < seqs[s].num_queries; ++i) {
        const KeyRange r = attention_key_range(seqs[s], shape, i);
        items.push_back({static_cast<int32_t>(s), i, h, first_segment(r), end_segment(r)});
      }
    }
  }
  if (items.empty()) return;
  const size_t group_floats = static_cast<size_t>(group) * hd;
  auto item_row = [&](const Item& item, int i = 0) {
    return static_cast<size_t>(seqs[static_cast<size_t>(item.seq)].q_row + item.query + i);
  };
  auto item_out = [&](const Item& item, int i = 0) {
    return out + item_row(item, i) * ldo + static_cast<size_t>(item.kv_head) * group_floats;
  };
  // Too few items to share out evenly (decode of few sequences with few KV heads): one piece
  // per key segment, whose states are folded once all are done.
  const bool split = parts > 1 && items.size() < 4 * parts;
  if (split) {
    std::vector<Item>& pieces = buf.rebuilt;
    pieces.clear();
    for (const Item& item : items) {
      if (item.first_segment == item.end_segment) std::fill_n(item_out(item), group_floats, 0.0f);
      for (int32_t s = item.first_segment; s < item.end_segment; ++s) {
        pieces.push_back({item.seq, item.query, item.kv_head, s, s + 1});
      }
    }
    items.swap(pieces);
  }
  // Consecutive queries of one KV head with the same first key share an item while their heads
  // fit (prefill): each K/V row is then read once for all of them. Each query keeps its own
  // chunks (they start at the shared first key) and masks the keys past its end, so its bits
  // are those of a query alone.
  const int max_queries = std::max(1, detail::kAttentionItemHeads / group);
  if (!split && max_queries > 1) {
    auto first_key = [&](const Item& item, int i) {
      return attention_key_range(seqs[static_cast<size_t>(item.seq)], shape, item.query + i).begin;
    };
    std::vector<Item>& merged = buf.rebuilt;
    merged.clear();
    for (const Item& item : items) {
      if (!merged.empty()) {
        Item& last = merged.back();
        if (last.seq == item.seq && last.kv_head == item.kv_head &&
            last.query + last.queries == item.query && last.queries < max_queries &&
            last.first_segment < last.end_segment && item.first_segment < item.end_segment &&
            first_key(last, 0) == first_key(item, 0)) {
          ++last.queries;
          last.end_segment = std::max(last.end_segment, item.end_segment);
          continue;
        }
      }
      merged.push_back(item);
    }
    items.swap(merged);
  }
  StateBuffer piece_states(buf.piece_states, split ? items.size() : 0, group, hd);
  if (buf.scratch.size() < parts) buf.scratch.resize(parts);

  auto run_range = [&](size_t part, size_t begin, size_t end) {
    detail::AttentionScratch& ws = buf.scratch[part];
    ws.prepare(group * max_queries, hd);
    const SoftmaxState total = ws.total();
    KeyRange ranges[detail::kAttentionItemHeads];
    int32_t ends[detail::kAttentionItemHeads];
    for (size_t i = begin; i < end; ++i) {
      const Item& item = items[i];
      const AttentionSeq& seq = seqs[static_cast<size_t>(item.seq)];
      const size_t first_head = static_cast<size_t>(item.kv_head) * group;
      const int nq = item.queries;
      KeyRange range{0, 0};
      for (int k = 0; k < nq; ++k) {
        ranges[k] = attention_key_range(seq, shape, item.query + k);
        ends[k] = ranges[k].end;
        range = k == 0 ? ranges[0] : KeyRange{range.begin, std::max(range.end, ranges[k].end)};
      }
      detail::AttentionGroupTask task;
      // Copied even for one query: the kernel then loads q from aligned lines.
      for (int k = 0; k < nq; ++k) {
        const float* src = q + item_row(item, k) * ldq + first_head * hd;
        std::copy(src, src + group_floats, ws.queries.data() + k * group_floats);
      }
      task.q = ws.queries.data();
      if (nq > 1) {
        task.query_ends = ends;
        task.heads_per_query = group;
      }
      task.block_table = seq.block_table;
      task.kv_head = item.kv_head;
      task.group = group * nq;
      // A split item's next segment is another piece's: requested only if this thread runs
      // it next (otherwise each segment's first chunk waited on memory).
      const bool next_piece_here = split && i + 1 < end && items[i + 1].seq == item.seq &&
                                   items[i + 1].query == item.query &&
                                   items[i + 1].kv_head == item.kv_head;
      task.prefetch_end = !split || next_piece_here ? range.end : 0;
      // Several segments, or several queries (the state is overwritten by segments a query
      // does not reach): each query's segments are folded into `total`.
      const bool folded = nq > 1 || item.end_segment - item.first_segment > 1;
      for (int32_t s = item.first_segment; s < item.end_segment; ++s) {
        task.range = segment_keys(range, s);
        attend(kv, shape, task, ws);
        if (!folded) continue;
        for (int k = 0; k < nq; ++k) {
          if (s >= end_segment(ranges[k])) continue;
          const SoftmaxState part = query_state(ws.state(), k, group, hd);
          const SoftmaxState sum = query_state(total, k, group, hd);
          if (s == item.first_segment) {
            copy_state(part, sum, group, hd);
          } else {
            fold_state(part, sum, group, hd);
          }
        }
      }
      if (split) {
        copy_state(ws.state(), piece_states.at(i), group, hd);
        continue;
      }
      for (int k = 0; k < nq; ++k) {
        if (item.end_segment == item.first_segment) {
          std::fill_n(item_out(item, k), group_floats, 0.0f);
        } else {
          finish_state(query_state(folded ? total : ws.state(), k, group, hd), group, hd,
                       item_out(item, k));
        }
      }
    }
  };
  if (parts == 1 || items.size() == 1) {
    run_range(0, 0, items.size());
  } else {
    // Split by key count, not item count: causal rows differ widely in cost.
    std::vector<int64_t>& cost_prefix = buf.cost_prefix;
    cost_prefix.assign(1, 0);
    for (const Item& item : items) {
      int64_t cost = 0;
      for (int k = 0; k < item.queries; ++k) {
        const KeyRange r =
            attention_key_range(seqs[static_cast<size_t>(item.seq)], shape, item.query + k);
        cost += 1 + keys_in_segments(r, item.first_segment, item.end_segment);
      }
      cost_prefix.push_back(cost_prefix.back() + cost);
    }
    std::vector<size_t>& bounds = buf.bounds;
    bounds.assign(parts + 1, items.size());
    bounds[0] = 0;
    const int64_t total = cost_prefix.back();
    for (size_t p = 1; p < parts; ++p) {
      const int64_t target = total * static_cast<int64_t>(p) / static_cast<int64_t>(parts);
      size_t at = static_cast<size_t>(
          std::lower_bound(cost_prefix.begin(), cost_prefix.end(), target) - cost_prefix.begin());
      // The nearer boundary, the earlier one on a tie: part 0 runs on the calling thread, which
      // folds the pieces afterwards (decode of one sequence has only a few segments to share).
      if (at > 0 && at < cost_prefix.size() &&
          target - cost_prefix[at - 1] <= cost_prefix[at] - target) {
        --at;
      }
      bounds[p] = std::clamp(at, bounds[p - 1], items.size());
    }
    pool->parallel_for(parts, [&](size_t b, size_t e) {
      for (size_t p = b; p < e; ++p) run_range(p, bounds[p], bounds[p + 1]);
    });
  }
  if (!split) return;
  // Pieces of one item are consecutive, in segment order: the same fold as a whole item.
  for (size_t i = 0; i < items.size();) {
    size_t j = i + 1;
    while (j < items.size() && items[j].seq == items[i].seq && items[j].query == items[i].query &&
           items[j].kv_head == items[i].kv_head) {
      fold_state(piece_states.at(j), piece_states.at(i), group, hd);
      ++j;
    }
    finish_state(piece_states.at(i), group, hd, item_out(items[i]));
    i = j;
  }
}

}  // namespace gemmaserve::cpu
