// `gemmaserve bench structured TOKENIZER`: the structured-output mask's cost per token (see
// its --help).
#pragma once

#include <string>
#include <vector>

namespace gemmaserve {

int run_bench_structured(const std::vector<std::string>& args);

}  // namespace gemmaserve
