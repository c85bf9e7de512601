// Images through the engine checked against the model's forward called by hand (the images'
// patches encoded, one prefill step with their rows, then greedy decodes), and test pictures.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <vector>

#include "engine/image_placeholders.h"
#include "gemma4_golden_harness.h"
#include "gemmaserve/prompt_image.h"
#include "gemmaserve/request_output.h"
#include "model/gemma4_image_processor.h"

namespace gemmaserve::enginetest {

// Pixels from a seeded generator, so two seeds give two different images of the same size.
inline PromptImage seeded_image(int width, int height, uint32_t seed) {
  PromptImage im;
  im.rgb.width = width;
  im.rgb.height = height;
  im.rgb.pixels.resize(static_cast<size_t>(width) * height * 3);
  uint32_t x = seed * 2654435761u + 12345u;
  for (uint8_t& p : im.rgb.pixels) {
    x = x * 1664525u + 1013904223u;
    p = static_cast<uint8_t>(x >> 24);
  }
  return im;
}

inline float log_softmax_at(const std::vector<float>& logits, int32_t id) {
  const float max = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l - max));
  return static_cast<float>(logits[static_cast<size_t>(id)] - max - std::log(sum));
}

// `out` (greedy, logprobs on) must hold the tokens and logprobs the model in `model_dir` gives
// for `expanded` with `patches[i]` in its i-th placeholder.
inline void expect_output_equals_hand_run(const RequestOutput& out,
                                          const std::filesystem::path& model_dir,
                                          const ExpandedPrompt& expanded,
                                          const std::vector<Gemma4ImagePatches>& patches) {
  ASSERT_EQ(out.prompt_token_ids, expanded.token_ids);
  ASSERT_EQ(expanded.placeholders.size(), patches.size());
  auto model = golden::load_model(model_dir, 2);
  std::vector<std::vector<float>> rows(patches.size());
  golden::PagedRunner::ImageInputs inputs;
  for (size_t k = 0; k < patches.size(); ++k) {
    model->encode_image({patches[k].pixel_values, patches[k].position_ids}, &rows[k]);
    const ImagePlaceholder& w = expanded.placeholders[k];
    inputs.embeddings.push_back({w.offset, w.length, rows[k].data()});
    inputs.blocks.push_back({w.offset, w.offset + w.length});
  }
  golden::PagedRunner runner(*model, 16, 512);
  const int seq = runner.add_sequence();
  ForwardOutput f = runner.step({seq}, {expanded.token_ids}, LogitsWanted::kLast, {inputs});
  const CompletionOutput& c = out.outputs[0];
  ASSERT_FALSE(c.token_ids.empty());
  for (size_t i = 0; i < c.token_ids.size(); ++i) {
    const auto want =
        static_cast<int32_t>(std::max_element(f.logits.begin(), f.logits.end()) - f.logits.begin());
    EXPECT_EQ(c.token_ids[i], want) << "token " << i;
    EXPECT_NEAR(c.logprobs->at(i).at(want), log_softmax_at(f.logits, want), 1e-5) << "token " << i;
    f = runner.step1(seq, {want}, LogitsWanted::kLast);
  }
}

}  // namespace gemmaserve::enginetest
