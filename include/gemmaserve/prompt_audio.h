// An audio clip given with a prompt (vLLM's multi_modal_data {"audio": ...}): mono samples at
// the model's 16 kHz (io/audio's load_audio gives them). The prompt holds one bare <|audio|>
// token per clip, in order; the engine expands each to <|audio> + N x <|audio|> + <audio|>.
#pragma once

#include <vector>

namespace gemmaserve {

struct PromptAudio {
  // The rate the models take (Gemma 4's feature extractor and the unified embedder's frames).
  static constexpr int kSampleRate = 16000;
  std::vector<float> samples;  // kSampleRate mono, in [-1, 1] as decoded
};

}  // namespace gemmaserve
