// `gemmaserve bench X`: dispatches to the benchmark in src/bench/bench_X.cpp.
#pragma once

#include <string>
#include <vector>

namespace gemmaserve {

int run_bench_command(const std::vector<std::string>& args);

}  // namespace gemmaserve
