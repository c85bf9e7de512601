// `gemmaserve preprocess-image`: a debugging aid that decodes an image file and runs Gemma 4's
// image preprocessing on it, printing the sizes and the soft-token count.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace gemmaserve {

// preprocess-image FILE [--max-soft-tokens N] [--patch-size P] [--pooling-kernel-size K]
//                       [--apply-exif-orientation] [--json]
int run_preprocess_image_command(const std::vector<std::string>& args);
int run_preprocess_image(const std::vector<std::string>& args, std::ostream& out);

}  // namespace gemmaserve
