// `gemmaserve serve`: the OpenAI-compatible HTTP server, a drop-in for `vllm serve`.
#pragma once

#include <string>
#include <vector>

namespace gemmaserve {

int run_serve_command(const std::vector<std::string>& args);

}  // namespace gemmaserve
