// `gemmaserve bench throughput|latency`: offline benchmarks after vLLM's benchmark_throughput.py
// and benchmark_latency.py, on random token prompts.
#pragma once

#include <string>
#include <vector>

namespace gemmaserve {

int run_bench_command(const std::vector<std::string>& args);

}  // namespace gemmaserve
