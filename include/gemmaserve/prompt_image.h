// An image given with a prompt (vLLM's multi_modal_data {"image": ...}): decoded pixels plus the
// request's soft-token budget. The prompt holds one bare <|image|> token per image, in order;
// the engine expands each to <|image> + N x <|image|> + <image|> (engine/image_placeholders.h).
#pragma once

#include <optional>

#include "io/image/image_decode.h"

namespace gemmaserve {

struct PromptImage {
  // What image::decode_image gives (vLLM's media loader: RGBA composited on white); for a
  // decoded RGBA picture, vLLM's offline path drops the alpha (HF's convert("RGB")).
  image::RgbImage rgb;
  // The request's mm_processor_kwargs max_soft_tokens, one of {70, 140, 280, 560, 1120};
  // nullopt: the engine's (--mm-processor-kwargs, else the checkpoint's, else 280).
  std::optional<int> max_soft_tokens;
};

}  // namespace gemmaserve
