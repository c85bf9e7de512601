// `gemmaserve bench video`: what a 30 s clip costs a running server: its decode (against the
// clip's length), its frames' preprocessing and vision encode (against one image's), and the
// inter-token gaps of decode streams while a video request is decoded, admitted and encoded
// (see its --help).
#pragma once

#include <string>
#include <vector>

namespace gemmaserve {

int run_bench_video(const std::vector<std::string>& args);

}  // namespace gemmaserve
