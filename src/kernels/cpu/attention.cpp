#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace gemmaserve::cpu {
namespace {

constexpr int kChunk = 32;  // keys scored before one softmax rescale
constexpr int kTile = 16;   // accumulator floats kept in registers while summing a chunk

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

// One work item: every query head of one KV-head group for one query token. Heads of a group
// share each loaded key; each head's arithmetic is the same as if it ran alone.
struct Item {
  int32_t seq;
  int32_t query;
  int32_t kv_head;
};

struct Workspace {
  std::vector<float> scores;  // [group, kChunk]
  std::vector<float> acc;     // [group, head_dim]
  std::vector<float> max, sum;
};

inline const float* slot(const float* base, const PagedKv& kv, std::span<const int32_t> table,
                         int32_t pos) {
  const int64_t block = table[static_cast<size_t>(pos / kv.block_size)];
  const int64_t offset = pos % kv.block_size;
  return base + (block * kv.block_size + offset) * kv.slot_stride;
}

void run_item(const float* q, size_t ldq, const PagedKv& kv, const AttentionShape& shape,
              const AttentionSeq& seq, const Item& item, float* out, size_t ldo, Workspace& ws) {
  const int group = shape.num_heads / shape.num_kv_heads;
  const int hd = shape.head_dim;
  const KeyRange range = attention_key_range(seq, shape, item.query);
  const size_t row = static_cast<size_t>(seq.q_row + item.query);
  const int first_head = item.kv_head * group;
  const float* qrow = q + row * ldq + static_cast<size_t>(first_head) * hd;
  float* orow = out + row * ldo + static_cast<size_t>(first_head) * hd;
  const int64_t kv_off = static_cast<int64_t>(item.kv_head) * hd;

  std::fill(ws.acc.begin(), ws.acc.begin() + static_cast<size_t>(group) * hd, 0.0f);
  std::fill(ws.max.begin(), ws.max.begin() + group, -std::numeric_limits<float>::infinity());
  std::fill(ws.sum.begin(), ws.sum.begin() + group, 0.0f);

  for (int32_t c0 = range.begin; c0 < range.end; c0 += kChunk) {
    const int n = std::min<int32_t>(kChunk, range.end - c0);
    for (int j = 0; j < n; ++j) {
      const float* key = slot(kv.k, kv, seq.block_table, c0 + j) + kv_off;
      for (int g = 0; g < group; ++g) {
        ws.scores[g * kChunk + j] = dot16(qrow + g * hd, key, hd) * shape.scale;
      }
    }
    for (int g = 0; g < group; ++g) {
      float* s = &ws.scores[g * kChunk];
      float cmax = ws.max[g];
      for (int j = 0; j < n; ++j) cmax = std::max(cmax, s[j]);
      float* acc = &ws.acc[static_cast<size_t>(g) * hd];
      if (cmax > ws.max[g]) {
        // exp(-inf) = 0 on the first chunk, so the empty accumulators stay zero.
        const float corr = std::exp(ws.max[g] - cmax);
        for (int d = 0; d < hd; ++d) acc[d] *= corr;
        ws.sum[g] *= corr;
        ws.max[g] = cmax;
      }
      for (int j = 0; j < n; ++j) {
        s[j] = std::exp(s[j] - cmax);
        ws.sum[g] += s[j];
      }
    }
    const float* vals[kChunk];
    for (int j = 0; j < n; ++j) vals[j] = slot(kv.v, kv, seq.block_table, c0 + j) + kv_off;
    for (int g = 0; g < group; ++g) {
      const float* p = &ws.scores[g * kChunk];
      float* acc = &ws.acc[static_cast<size_t>(g) * hd];
      // Register tiles of the accumulator; each element still sums keys in order.
      int d0 = 0;
      for (; d0 + kTile <= hd; d0 += kTile) {
        float t[kTile];
        for (int d = 0; d < kTile; ++d) t[d] = acc[d0 + d];
        for (int j = 0; j < n; ++j) {
          const float* v = vals[j] + d0;
          for (int d = 0; d < kTile; ++d) t[d] += p[j] * v[d];
        }
        for (int d = 0; d < kTile; ++d) acc[d0 + d] = t[d];
      }
      for (int j = 0; j < n; ++j) {
        for (int d = d0; d < hd; ++d) acc[d] += p[j] * vals[j][d];
      }
    }
  }
  for (int g = 0; g < group; ++g) {
    const float l = ws.sum[g];
    const float* acc = &ws.acc[static_cast<size_t>(g) * hd];
    float* o = orow + static_cast<size_t>(g) * hd;
    if (l > 0.0f) {
      for (int d = 0; d < hd; ++d) o[d] = acc[d] / l;
    } else {
      std::fill(o, o + hd, 0.0f);
    }
  }
}

}  // namespace

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
                     std::span<const AttentionSeq> seqs, float* out, size_t ldo, ThreadPool* pool) {
  const int group = shape.num_heads / shape.num_kv_heads;
  // Items ordered sequence -> KV head -> query, so neighbouring items reuse cached keys.
  std::vector<Item> items;
  std::vector<int64_t> cost_prefix{0};
  for (size_t s = 0; s < seqs.size(); ++s) {
    for (int32_t h = 0; h < shape.num_kv_heads; ++h) {
      for (int32_t i = 0; i < seqs[s].num_queries; ++i) {
        items.push_back({static_cast<int32_t>(s), i, h});
        const KeyRange r = attention_key_range(seqs[s], shape, i);
        cost_prefix.push_back(cost_prefix.back() + 1 + (r.end - r.begin));
      }
    }
  }
  if (items.empty()) return;
  auto run_range = [&](size_t begin, size_t end) {
    Workspace ws;
    ws.scores.resize(static_cast<size_t>(group) * kChunk);
    ws.acc.resize(static_cast<size_t>(group) * shape.head_dim);
    ws.max.resize(group);
    ws.sum.resize(group);
    for (size_t i = begin; i < end; ++i) {
      run_item(q, ldq, kv, shape, seqs[static_cast<size_t>(items[i].seq)], items[i], out, ldo, ws);
    }
  };
  const size_t parts = pool == nullptr ? 1 : pool->size();
  if (parts == 1 || items.size() == 1) {
    run_range(0, items.size());
    return;
  }
  // Split by key count, not item count: causal rows differ widely in cost.
  std::vector<size_t> bounds(parts + 1, items.size());
  bounds[0] = 0;
  const int64_t total = cost_prefix.back();
  for (size_t p = 1; p < parts; ++p) {
    const int64_t target = total * static_cast<int64_t>(p) / static_cast<int64_t>(parts);
    bounds[p] = static_cast<size_t>(
        std::lower_bound(cost_prefix.begin(), cost_prefix.end(), target) - cost_prefix.begin());
    bounds[p] = std::clamp(bounds[p], bounds[p - 1], items.size());
  }
  pool->parallel_for(parts, [&](size_t b, size_t e) {
    for (size_t p = b; p < e; ++p) run_range(bounds[p], bounds[p + 1]);
  });
}

}  // namespace gemmaserve::cpu
