// `gemmaserve bench serve`: an online serving benchmark client with `vllm bench serve`'s flags,
// dataset sampling, printed report and result JSON, for any OpenAI-compatible server.
#pragma once

#include <string>
#include <vector>

namespace gemmaserve {

// `args` follow "bench serve" on the command line.
int run_bench_serve_command(const std::vector<std::string>& args);

}  // namespace gemmaserve
