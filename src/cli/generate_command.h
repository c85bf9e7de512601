// `gemmaserve generate`: offline generation for text or token-id prompts.
#pragma once

#include <string>
#include <vector>

namespace gemmaserve {

int run_generate_command(const std::vector<std::string>& args);

}  // namespace gemmaserve
