// `gemmaserve bench quality MODEL --quantization TYPE`: teacher-forced comparison of the
// quantized model against the float one (top-1 agreement, KL divergence).
#pragma once

#include <string>
#include <vector>

namespace gemmaserve {

// args exclude "bench quality". Exit codes: 0 done, 1 failure, 2 bad input.
int run_quality_command(const std::vector<std::string>& args);

}  // namespace gemmaserve
