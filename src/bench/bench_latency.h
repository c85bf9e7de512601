// `gemmaserve bench throughput|latency`: offline benchmarks after vLLM's benchmark_throughput.py
// and benchmark_latency.py, on random token prompts (or --prompt-file), with the roofline.
#pragma once

#include <string>
#include <vector>

namespace gemmaserve {

// mode is "throughput" or "latency"; args follow it.
int run_bench_throughput_latency(const std::string& mode, const std::vector<std::string>& args);

// `gemmaserve bench --help`: every benchmark's usage, throughput and latency's in full.
std::string bench_usage();

}  // namespace gemmaserve
