// The checkpoint's image processor settings, as Hugging Face's AutoProcessor reads them: the
// "image_processor" section of processor_config.json (transformers 5 saves one nested file),
// else preprocessor_config.json (flat, the older layout), else Gemma4ImageProcessor's defaults.
// Every field is applied or refused at load with an InputError naming the file and the field.
#pragma once

#include <filesystem>

#include "model/config.h"
#include "model/gemma4_image_processor.h"

namespace gemmaserve {

// `vision` is the checkpoint's vision tower: patch_size and pooling_kernel_size must agree with
// it (the tower's patch embedding and pooler are built for its own).
Gemma4ImageProcessorOptions load_gemma4_image_processor_config(const std::filesystem::path& dir,
                                                               const VisionConfig& vision);

}  // namespace gemmaserve
