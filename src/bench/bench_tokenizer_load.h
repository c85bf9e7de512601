// `gemmaserve bench tokenizer-load TOKENIZER_JSON`: tokenizer.json load time (see its --help).
#pragma once

#include <string>
#include <vector>

namespace gemmaserve {

int run_bench_tokenizer_load(const std::vector<std::string>& args);

}  // namespace gemmaserve
