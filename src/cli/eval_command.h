// `gemmaserve eval arithmetic MODEL_DIR`: the demo model's accuracy on its held-out two-digit
// sums and differences, through the engine's chat path, for each weight type x KV-cache dtype.
#pragma once

#include <string>
#include <vector>

namespace gemmaserve {

// args exclude "eval". Exit codes: 0 done, 1 failure, 2 bad input.
int run_eval_command(const std::vector<std::string>& args);

}  // namespace gemmaserve
