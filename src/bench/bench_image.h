// `gemmaserve bench image [MODEL_DIR]`: what an image costs a running server: encode time per
// image, the image's time to first token, and the longest gap in a decoding request's tokens
// while the image encodes (see its --help).
#pragma once

#include <string>
#include <vector>

namespace gemmaserve {

int run_bench_image(const std::vector<std::string>& args);

}  // namespace gemmaserve
