// A video given with a prompt (vLLM's multi_modal_data {"video": ...}): its sampled frames and
// each frame's time in the clip. The prompt holds one bare <|video|> token per video, in order;
// the engine expands each as Hugging Face's Gemma4Processor does: per frame "mm:ss" then
// <|image> + N x <|video|> + <image|>, the frames joined by spaces. Frames go through the
// vision tower (or the unified embedder) exactly as images at the video budget.
#pragma once

#include <optional>
#include <vector>

#include "io/image/image_decode.h"

namespace gemmaserve {

struct PromptVideo {
  // Gemma4VideoProcessor's max_soft_tokens and vLLM's per-frame budget.
  static constexpr int kDefaultMaxSoftTokens = 70;
  // The frames as vLLM's video loader hands them over (RGB, all the same size).
  std::vector<image::RgbImage> frames;
  // Seconds from the clip's start, one per frame: frame index / fps (vLLM's metadata), which
  // become the "mm:ss" before each frame.
  std::vector<double> timestamps;
  // Soft tokens per frame, one of {70, 140, 280, 560, 1120}; nullopt: kDefaultMaxSoftTokens.
  std::optional<int> max_soft_tokens;
};

}  // namespace gemmaserve
