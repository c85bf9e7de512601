// The checkpoint's image processor settings, as Hugging Face's AutoProcessor reads them: the
// "image_processor" section of processor_config.json (transformers 5 saves one nested file),
// else preprocessor_config.json (flat, the older layout), else Gemma4ImageProcessor's defaults.
// Every field is applied or refused at load with an InputError naming the file and the field.
#pragma once

#include <filesystem>

#include "model/config.h"
#include "model/gemma4_audio_features.h"
#include "model/gemma4_image_processor.h"

namespace gemmaserve {

// What the model's image path fixes: patch_size and pooling_kernel_size of the processor must
// agree with it (the tower's patch embedding and pooler, or the unified embedder's merged patch,
// are built for its own), and the processor type it is written for.
struct ImageProcessorGeometry {
  int patch_size = 16;
  int pooling_kernel_size = 3;
  const char* processor_type = "Gemma4ImageProcessor";  // image_processor_type's prefix
  bool rescale_in_float32 = false;  // a torchvision-backend processor (the unified one)
};
ImageProcessorGeometry image_processor_geometry(const VisionConfig& vision);
ImageProcessorGeometry image_processor_geometry(const UnifiedVisionConfig& vision);

Gemma4ImageProcessorOptions load_gemma4_image_processor_config(
    const std::filesystem::path& dir, const ImageProcessorGeometry& geometry);
inline Gemma4ImageProcessorOptions load_gemma4_image_processor_config(
    const std::filesystem::path& dir, const VisionConfig& vision) {
  return load_gemma4_image_processor_config(dir, image_processor_geometry(vision));
}

// The checkpoint's audio feature extractor settings, as AutoProcessor reads them: the
// "feature_extractor" section of processor_config.json, else preprocessor_config.json when it is
// the feature extractor's (feature_extractor_type Gemma4AudioFeatureExtractor), else the
// extractor's defaults. InputError naming the file and field for a value it cannot apply.
Gemma4AudioFeatureOptions load_gemma4_audio_feature_config(const std::filesystem::path& dir);

}  // namespace gemmaserve
