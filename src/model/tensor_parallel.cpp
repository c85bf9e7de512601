#include "model/tensor_parallel.h"

#include <cstring>
#include <memory>
#include <string>

#include "core/error.h"
#include "model/weights.h"

namespace gemmaserve {
namespace {

size_t row_bytes(const WeightMatrix& m) { return dtype_row_bytes(m.dtype, m.cols); }

// Rows [begin, begin + count) as a view of the same memory.
void keep_rows(WeightMatrix& m, int64_t begin, int64_t count) {
  if (!m) return;
  m.data = static_cast<const std::byte*>(m.data) + static_cast<size_t>(begin) * row_bytes(m);
  m.rows = count;
}

void check_block_aligned(const WeightMatrix& m, int64_t col) {
  if (col % dtype_block_elems(m.dtype) != 0) {
    throw InputError(m.name + ": column " + std::to_string(col) +
                     " of a tensor-parallel slice does not start a quantization block");
  }
}

// Columns [begin, begin + count) of every row, copied into a buffer `w` keeps alive.
void keep_columns(ModelWeights& w, WeightMatrix& m, int64_t begin, int64_t count) {
  if (!m) return;
  if (m.input_perm) {
    throw InputError(m.name +
                     ": an act-order module (columns sorted by group) cannot be split "
                     "along its input for tensor parallelism; run it without -tp");
  }
  check_block_aligned(m, begin);
  check_block_aligned(m, count);
  const size_t src_row = row_bytes(m);
  const size_t offset = dtype_row_bytes(m.dtype, begin);
  const size_t dst_row = dtype_row_bytes(m.dtype, count);
  auto buf = std::make_unique_for_overwrite<std::byte[]>(dst_row * static_cast<size_t>(m.rows));
  const auto* src = static_cast<const std::byte*>(m.data);
  for (int64_t r = 0; r < m.rows; ++r) {
    std::memcpy(buf.get() + static_cast<size_t>(r) * dst_row,
                src + static_cast<size_t>(r) * src_row + offset, dst_row);
  }
  m.data = buf.get();
  m.cols = count;
  w.owned_buffers.push_back(std::shared_ptr<std::byte[]>(std::move(buf)));
}

// Of every expert's [gate rows | up rows] (Ie each), rows [begin, begin + count) of both halves.
void keep_expert_gate_up(ModelWeights& w, WeightMatrix& m, int64_t experts, int64_t Ie,
                         int64_t begin, int64_t count) {
  if (!m) return;
  const size_t rb = row_bytes(m);
  auto buf =
      std::make_unique_for_overwrite<std::byte[]>(static_cast<size_t>(experts * 2 * count) * rb);
  const auto* src = static_cast<const std::byte*>(m.data);
  std::byte* dst = buf.get();
  for (int64_t e = 0; e < experts; ++e) {
    for (int64_t half = 0; half < 2; ++half) {
      const size_t n = static_cast<size_t>(count) * rb;
      std::memcpy(dst, src + static_cast<size_t>(e * 2 * Ie + half * Ie + begin) * rb, n);
      dst += n;
    }
  }
  m.data = buf.get();
  m.rows = experts * 2 * count;
  w.owned_buffers.push_back(std::shared_ptr<std::byte[]>(std::move(buf)));
}

int64_t split_size(int64_t total, int size, const std::string& what) {
  if (total % size != 0) {
    throw InputError("--tensor-parallel-size " + std::to_string(size) + " does not divide " + what +
                     " (" + std::to_string(total) + ")");
  }
  return total / size;
}

}  // namespace

void shard_for_tensor_parallel(ModelWeights& w, int rank, int size, bool expert_parallel) {
  TextConfig& c = w.config.text;
  TensorParallelShard& s = w.tensor_parallel;
  s.rank = rank;
  s.size = size;
  const int64_t V = c.vocab_size;
  s.vocab_counts.clear();
  // Vocabulary slices of whole 16-row groups, so each can be regrouped for the kernels.
  const int64_t per_rank = ((V + size - 1) / size + 15) / 16 * 16;
  for (int r = 0; r < size; ++r) {
    const int64_t b = std::min<int64_t>(V, r * per_rank);
    s.vocab_counts.push_back(std::min<int64_t>(V, b + per_rank) - b);
  }
  s.vocab_begin = std::min<int64_t>(V, rank * per_rank);
  if (size == 1) return;
  const bool tied = w.lm_head.data == w.embed_tokens.data;
  keep_rows(w.embed_tokens, s.vocab_begin, s.vocab_counts[static_cast<size_t>(rank)]);
  if (tied) {
    w.lm_head = w.embed_tokens;
  } else {
    keep_rows(w.lm_head, s.vocab_begin, s.vocab_counts[static_cast<size_t>(rank)]);
  }

  const int64_t nH = c.num_attention_heads;
  const int64_t heads = split_size(nH, size, "num_attention_heads");
  for (size_t i = 0; i < w.layers.size(); ++i) {
    LayerSpec& spec = c.layers[i];
    LayerWeights& lw = w.layers[i];
    const std::string layer = "layer " + std::to_string(i) + " ";
    const int64_t hd = spec.head_dim;
    keep_rows(lw.q_proj, rank * heads * hd, heads * hd);
    keep_columns(w, lw.o_proj, rank * heads * hd, heads * hd);
    const int64_t kv = spec.num_kv_heads;
    int64_t kv_first = 0, kv_count = 0;
    if (kv >= size) {
      kv_count = split_size(kv, size, layer + "KV heads");
      kv_first = rank * kv_count;
    } else {
      if (kv <= 0 || size % kv != 0) {
        throw InputError("--tensor-parallel-size " + std::to_string(size) + ": " + layer + "has " +
                         std::to_string(kv) +
                         " KV heads (the size must divide them or be a multiple of them)");
      }
      kv_count = 1;  // replicated: the one KV head this rank's query heads read
      kv_first = rank * kv / size;
    }
    keep_rows(lw.k_proj, kv_first * hd, kv_count * hd);
    keep_rows(lw.v_proj, kv_first * hd, kv_count * hd);
    spec.num_kv_heads = static_cast<int>(kv_count);
    const int64_t I = split_size(spec.intermediate_size, size, layer + "intermediate_size");
    keep_rows(lw.gate_proj, rank * I, I);
    keep_rows(lw.up_proj, rank * I, I);
    keep_columns(w, lw.down_proj, rank * I, I);
    spec.intermediate_size = static_cast<int>(I);
    if (c.enable_moe_block && expert_parallel) {
      const int64_t part = split_size(c.num_experts, size, "num_experts");
      const int64_t Ie = c.moe_intermediate_size;
      keep_rows(lw.experts_gate_up, rank * part * 2 * Ie, part * 2 * Ie);
      keep_rows(lw.experts_down, rank * part * c.hidden_size, part * c.hidden_size);
      s.expert_begin = static_cast<int>(rank * part);
      s.expert_end = static_cast<int>((rank + 1) * part);
    } else if (c.enable_moe_block) {
      const int64_t Ie = c.moe_intermediate_size;
      const int64_t part = split_size(Ie, size, "moe_intermediate_size");
      keep_expert_gate_up(w, lw.experts_gate_up, c.num_experts, Ie, rank * part, part);
      keep_columns(w, lw.experts_down, rank * part, part);
    }
  }
  c.num_attention_heads = static_cast<int>(heads);
  c.intermediate_size /= size;
  if (c.enable_moe_block && !expert_parallel) c.moe_intermediate_size /= size;
  if (!c.layers.empty()) {
    c.num_key_value_heads = c.layers.front().num_kv_heads;
    for (const LayerSpec& spec : c.layers) {
      if (spec.type == AttentionType::kFull && c.num_global_key_value_heads) {
        c.num_global_key_value_heads = spec.num_kv_heads;
      }
    }
  }
}

std::vector<const WeightMatrix*> held_matrices(const ModelWeights& w) {
  std::vector<const WeightMatrix*> out = {&w.embed_tokens, &w.embed_tokens_per_layer,
                                          &w.per_layer_model_projection};
  if (w.lm_head.data != w.embed_tokens.data) out.push_back(&w.lm_head);
  for (const LayerWeights& l : w.layers) {
    for (const WeightMatrix* m :
         {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.gate_proj, &l.up_proj, &l.down_proj,
          &l.per_layer_input_gate, &l.per_layer_projection, &l.router_proj, &l.experts_gate_up,
          &l.experts_down}) {
      out.push_back(m);
    }
  }
  std::erase_if(out, [](const WeightMatrix* m) { return !*m; });
  return out;
}

uint64_t held_weight_bytes(const ModelWeights& w) {
  uint64_t total = 0;
  for (const WeightMatrix* m : held_matrices(w)) {
    total += static_cast<uint64_t>(m->rows) * dtype_row_bytes(m->dtype, m->cols);
  }
  return total;
}

}  // namespace gemmaserve
