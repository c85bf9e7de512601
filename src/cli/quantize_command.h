// `gemmaserve quantize IN_DIR OUT_DIR --type q8_0|q4_0|q4_k`: writes a block-quantized copy
// of a checkpoint that loads without re-quantizing (docs/QUANTIZATION.md).
#pragma once

#include <string>
#include <vector>

namespace gemmaserve {

// args exclude the program and subcommand names. Exit codes: 0 done, 1 failure, 2 bad input.
int run_quantize_command(const std::vector<std::string>& args);

}  // namespace gemmaserve
