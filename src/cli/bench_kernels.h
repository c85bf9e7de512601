// Machine-level benchmarks behind `gemmaserve bench`: memory read bandwidth, a single matmul,
// and the weight bytes one decoded token reads (the memory roofline of decode).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "model/weights.h"

namespace gemmaserve {

// Best of `passes` read-only sums over a buffer of `bytes` (touched first), split statically
// over `threads` threads. Returns bytes per second.
double measure_read_bandwidth(size_t bytes, int threads, int passes = 5);

// Bytes of weights one decoded token reads: every linear weight (the tied lm_head too), for MoE
// only top_k experts plus router; of the embedding tables only the rows gathered. KV excluded.
uint64_t weight_bytes_per_token(const ModelWeights& w);

// `gemmaserve bench membw ...` and `gemmaserve bench matmul ...` (args after the mode).
int run_bench_membw(const std::vector<std::string>& args);
int run_bench_matmul(const std::vector<std::string>& args);

}  // namespace gemmaserve
