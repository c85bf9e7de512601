// Gemma 4's mixture of experts beside the dense MLP: route each row to its top-k experts, run
// only the chosen experts, and sum their outputs per row in ascending expert id.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/ops.h"
#include "model/gemma4_forward.h"

namespace gemmaserve::detail {
namespace {

// Most rows one work item takes from an expert: small enough to share a prefill's experts out
// over the threads, large enough that the item's weights are reused across rows.
constexpr int64_t kMoeItemRows = 64;

}  // namespace

void Gemma4Forward::moe_block(int l, int64_t R) {
  const LayerWeights& lw = w_.layers[static_cast<size_t>(l)];
  const int64_t H = cfg_.hidden_size;
  const int64_t K = cfg_.top_k_experts;
  moe_route(l, R);
  // Experts see RMSNorm(residual; pre_feedforward_layernorm_2).
  ws_.normed.resize(static_cast<size_t>(R * H));
  cpu::rms_norm_rows(ws_.x.data(), H, lw.pre_feedforward_layernorm_2.data(), ws_.normed.data(), H,
                     R, H, plan_.eps);
  ws_.expert_sum.assign(static_cast<size_t>(R * H), 0.0f);
  // Passes of rows bound the per-slot outputs held at once (Gemma4ModelOptions).
  const int64_t pass = std::max<int64_t>(1, moe_slot_floats_ / (K * H));
  for (int64_t r0 = 0; r0 < R; r0 += pass) moe_pass(l, r0, std::min(pass, R - r0));
}

// Router on the un-normed residual: RMSNorm (no weight) * scale * H^-0.5 -> proj -> softmax,
// then the top-k probabilities (ties to the lower expert id), renormalised and scaled per expert.
void Gemma4Forward::moe_route(int l, int64_t R) {
  const LayerWeights& lw = w_.layers[static_cast<size_t>(l)];
  const int64_t H = cfg_.hidden_size;
  const int E = cfg_.num_experts;
  const int K = cfg_.top_k_experts;
  const float root = static_cast<float>(1.0 / std::sqrt(static_cast<double>(H)));
  ws_.router_in.resize(static_cast<size_t>(R * H));
  ws_.router_probs.resize(static_cast<size_t>(R * E));
  cpu::rms_norm_rows(ws_.x.data(), H, nullptr, ws_.router_in.data(), H, R, H, plan_.eps);
  const float* scale = lw.router_scale.data();
  for_rows(R, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      float* z = &ws_.router_in[static_cast<size_t>(r * H)];
      for (int64_t i = 0; i < H; ++i) z[i] = (z[i] * scale[i]) * root;
    }
  });
  // f32 activations whatever the model's precision: expert choice is discrete (a flip costs far
  // more than the rounding elsewhere) and the router is a tiny share of the work.
  linear(lw.router_proj, 0, E, ws_.router_in.data(), H, R, ws_.router_probs.data(), E,
         cpu::MatmulPrecision::kF32);

  ws_.topk_index.resize(static_cast<size_t>(R * K));
  ws_.topk_weight.resize(static_cast<size_t>(R * K));
  for_rows(R, [&](int64_t b, int64_t end) {
    for (int64_t r = b; r < end; ++r) {
      float* p = &ws_.router_probs[static_cast<size_t>(r * E)];
      cpu::softmax(p, E);
      int32_t* idx = &ws_.topk_index[static_cast<size_t>(r * K)];
      float* wgt = &ws_.topk_weight[static_cast<size_t>(r * K)];
      for (int k = 0; k < K; ++k) {
        int best = -1;
        for (int e = 0; e < E; ++e) {
          if (std::find(idx, idx + k, e) != idx + k) continue;
          if (best < 0 || p[e] > p[best]) best = e;
        }
        idx[k] = best;
        wgt[k] = p[best];
      }
      float sum = 0.0f;
      for (int k = 0; k < K; ++k) sum += wgt[k];
      for (int k = 0; k < K; ++k)
        wgt[k] = (wgt[k] / sum) * lw.router_per_expert_scale[static_cast<size_t>(idx[k])];
    }
  });
}

// Rows [r0, r0 + n): group their (row, choice) slots by expert, run the experts' items (on
// separate threads when there are enough of them, else one by one over the whole pool) into
// per-slot outputs, then sum each row's slots in ascending expert id. An output row's bits
// depend only on its own inputs, never on which thread or item computed it.
void Gemma4Forward::moe_pass(int l, int64_t r0, int64_t n) {
  const int64_t H = cfg_.hidden_size;
  const int E = cfg_.num_experts;
  const int K = cfg_.top_k_experts;
  const int64_t Ie = cfg_.moe_intermediate_size;
  ws_.expert_count.assign(static_cast<size_t>(E), 0);
  for (int64_t s = r0 * K; s < (r0 + n) * K; ++s)
    ++ws_.expert_count[static_cast<size_t>(ws_.topk_index[static_cast<size_t>(s)])];
  ws_.expert_offset.assign(static_cast<size_t>(E) + 1, 0);
  for (int e = 0; e < E; ++e) ws_.expert_offset[e + 1] = ws_.expert_offset[e] + ws_.expert_count[e];
  ws_.expert_tokens.resize(static_cast<size_t>(n * K));
  ws_.expert_weights.resize(static_cast<size_t>(n * K));
  ws_.slot_of.resize(static_cast<size_t>(n * K));
  std::vector<int32_t>& fill = ws_.expert_count;  // reused as per-expert fill cursor
  std::fill(fill.begin(), fill.end(), 0);
  for (int64_t r = r0; r < r0 + n; ++r) {  // rows ascending within each expert
    for (int k = 0; k < K; ++k) {
      const size_t c = static_cast<size_t>(r * K + k);
      const int e = ws_.topk_index[c];
      const int32_t slot = ws_.expert_offset[e] + fill[e]++;
      ws_.expert_tokens[static_cast<size_t>(slot)] = static_cast<int32_t>(r);
      ws_.expert_weights[static_cast<size_t>(slot)] = ws_.topk_weight[c];
      ws_.slot_of[static_cast<size_t>((r - r0) * K + k)] = slot;
    }
  }
  ws_.moe_items.clear();
  // Items per expert <= its rows / kMoeItemRows + 1: capacity for any routing of n rows.
  ws_.moe_items.reserve(static_cast<size_t>(std::min<int64_t>(n * K, n * K / kMoeItemRows + E)));
  // Expert parallelism: this rank runs its experts only (their slots are consecutive); the
  // others' contributions arrive in the all-reduce of the expert sum.
  const int e_begin = w_.tensor_parallel.expert_begin;
  const int e_end = w_.tensor_parallel.expert_end < 0 ? E : w_.tensor_parallel.expert_end;
  const int32_t own_first = ws_.expert_offset[static_cast<size_t>(e_begin)];
  const int32_t own_end = ws_.expert_offset[static_cast<size_t>(e_end)];
  for (int e = e_begin; e < e_end; ++e) {
    for (int32_t s = ws_.expert_offset[e]; s < ws_.expert_offset[e + 1];
         s += static_cast<int32_t>(kMoeItemRows)) {
      const int32_t count =
          std::min(static_cast<int32_t>(kMoeItemRows), ws_.expert_offset[e + 1] - s);
      ws_.moe_items.push_back(MoeItem{e, s, count});
    }
  }

  ws_.expert_out.resize(static_cast<size_t>(n * K * H));
  const size_t threads = pool_ == nullptr ? 1 : pool_->size();
  const size_t scratch_floats = static_cast<size_t>(kMoeItemRows * (H + 3 * Ie));
  ws_.expert_scratch.resize(threads);
  for (AlignedVector<float>& s : ws_.expert_scratch) s.resize(scratch_floats);
  const size_t items = ws_.moe_items.size();
  if (threads > 1 && !ws_.moe_thread_scratch_ready) {
    // Any thread may take any item: each grows its X buffers once for the largest one.
    pool_->parallel_for(threads, [&](size_t, size_t) {
      cpu::reserve_thread_scratch(kMoeItemRows, std::max<int64_t>(H, Ie));
    });
    ws_.moe_thread_scratch_ready = true;
  }
  if (threads > 1 && items >= 2 * threads) {
    // Items taken in order from a shared counter: balanced whatever the experts' row counts.
    std::atomic<size_t> next{0};
    pool_->parallel_for(threads, [&](size_t b, size_t e) {
      for (size_t t = b; t < e; ++t) {
        for (size_t i = next.fetch_add(1); i < items; i = next.fetch_add(1))
          moe_item(l, ws_.moe_items[i], ws_.expert_scratch[t].data(), nullptr);
      }
    });
  } else {
    for (const MoeItem& item : ws_.moe_items)
      moe_item(l, item, ws_.expert_scratch[0].data(), pool_);
  }

  for_rows(n, [&](int64_t b, int64_t end) {
    for (int64_t r = b; r < end; ++r) {
      int32_t* slots = &ws_.slot_of[static_cast<size_t>(r * K)];
      // Slots are grouped by ascending expert, so sorting a row's slots orders its experts.
      std::sort(slots, slots + K);
      float* acc = &ws_.expert_sum[static_cast<size_t>((r0 + r) * H)];
      for (int k = 0; k < K; ++k) {
        if (slots[k] < own_first || slots[k] >= own_end) continue;
        const float* y = &ws_.expert_out[static_cast<size_t>(slots[k]) * static_cast<size_t>(H)];
        const float wgt = ws_.expert_weights[static_cast<size_t>(slots[k])];
        for (int64_t i = 0; i < H; ++i) acc[i] += y[i] * wgt;
      }
    }
  });
}

// One item: gather its rows, gate|up product, GELU-tanh gating, down product into its slots.
void Gemma4Forward::moe_item(int l, const MoeItem& item, float* scratch, ThreadPool* pool) {
  const LayerWeights& lw = w_.layers[static_cast<size_t>(l)];
  const int64_t H = cfg_.hidden_size;
  const int64_t Ie = cfg_.moe_intermediate_size;
  const int64_t m = item.count;
  float* in = scratch;
  float* gate_up = in + m * H;
  float* act = gate_up + m * 2 * Ie;
  for (int64_t j = 0; j < m; ++j) {
    const auto r = static_cast<size_t>(ws_.expert_tokens[static_cast<size_t>(item.first + j)]);
    std::memcpy(&in[j * H], &ws_.normed[r * static_cast<size_t>(H)],
                static_cast<size_t>(H) * sizeof(float));
  }
  // The expert's place among the ones this rank holds (all of them without expert parallelism).
  const int64_t local = item.expert - w_.tensor_parallel.expert_begin;
  cpu::matmul(matmul_args(lw.experts_gate_up, local * 2 * Ie, 2 * Ie, in, H, m, gate_up, 2 * Ie,
                          precision_),
              pool);
  for (int64_t j = 0; j < m; ++j)
    cpu::gelu_tanh_mul(&gate_up[j * 2 * Ie], &gate_up[j * 2 * Ie + Ie], &act[j * Ie], Ie);
  float* out = &ws_.expert_out[static_cast<size_t>(item.first) * static_cast<size_t>(H)];
  cpu::matmul(matmul_args(lw.experts_down, local * H, H, act, Ie, m, out, H, precision_), pool);
  calls_.fetch_add(2, std::memory_order_relaxed);
}

}  // namespace gemmaserve::detail
