// Machine-level benchmarks behind `gemmaserve bench`: memory read bandwidth, a single matmul,
// and the weight bytes one decoded token reads (the memory roofline of decode).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/line_prefetch.h"
#include "model/weights.h"

namespace gemmaserve {

// A buffer of `bytes` (touched once) and `threads` pinned threads for repeated read-bandwidth
// measurements: measure() is the best of `passes` read-only sums over it, in bytes per second.
class ReadBandwidthProbe {
 public:
  ReadBandwidthProbe(size_t bytes, int threads);
  double measure(int passes);

 private:
  size_t words_;
  // On huge pages, as the weights it stands for (4 KiB pages cost an Intel Xeon 15-25 %).
  std::shared_ptr<std::byte> buffer_;
  ThreadPool pool_;
  std::vector<uint64_t> sums_;
};

// Sum of the n words at p (a read that is not optimised away), requesting the line
// `prefetch_words` ahead of each one read as `how` says (kNone: no requests).
uint64_t sum_words(const uint64_t* p, size_t n, size_t prefetch_words, cpu::LinePrefetch how);

// Median of v (the mean of the middle two for an even count); v must not be empty.
double median(std::vector<double> v);

// One probe, best of `passes`.
double measure_read_bandwidth(size_t bytes, int threads, int passes = 5);

// Bytes of weights one decoded token reads: every linear weight (the tied lm_head too), for MoE
// only top_k experts plus router; of the embedding tables only the rows gathered. KV excluded.
uint64_t weight_bytes_per_token(const ModelWeights& w);

// Multiply-add FLOPs (2 per MAC) of prefilling `batch` prompts of `prompt_len` tokens that want
// only their last token's logits: every linear applied to every prompt token, except on
// KV-shared layers and the LM head, which only the last token needs; attention's QK and PV over
// the keys each query sees (the window on sliding layers); MoE counts top_k experts.
double prefill_flops(const ModelWeights& w, int64_t prompt_len, int64_t batch);

// `gemmaserve bench membw ...` and `gemmaserve bench matmul ...` (args after the mode).
int run_bench_membw(const std::vector<std::string>& args);
int run_bench_matmul(const std::vector<std::string>& args);
int run_bench_peak(const std::vector<std::string>& args);
// `gemmaserve bench attention ...`: decode attention against a plain read of its K/V rows.
int run_bench_attention(const std::vector<std::string>& args);

}  // namespace gemmaserve
