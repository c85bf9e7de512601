// Resumable vision encoding (Gemma4VisionEncoder::begin/advance/finish): the soft tokens are
// bit for bit those of the one-shot encode however the work is sliced and blocked, and the
// cost accounting adds up to patches x layers x 3 stages.
#include <gtest/gtest.h>

#include <cstring>

#include "gemma4_golden_harness.h"
#include "model/gemma4_image_processor.h"
#include "model/gemma4_vision.h"

namespace gemmaserve {
namespace {

// A 20x12 image of seeded noise through the tiny fixture's processor (patch 4, pooling 2).
Gemma4ImagePatches noise_patches() {
  std::vector<uint8_t> rgb(20 * 12 * 3);
  uint32_t x = 12345u;
  for (uint8_t& p : rgb) {
    x = x * 1664525u + 1013904223u;
    p = static_cast<uint8_t>(x >> 24);
  }
  Gemma4ImageProcessorOptions o;
  o.patch_size = 4;
  o.pooling_kernel_size = 2;
  o.max_soft_tokens = 70;
  return gemma4_preprocess_image(rgb, 20, 12, o);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(VisionEncodeJob, SlicedEncodesAreBitIdenticalToTheOneShotEncode) {
  auto model = golden::load_model(golden::golden_dir() / "models" / "vision", 2);
  const Gemma4ImagePatches p = noise_patches();
  const ImagePatches image{p.pixel_values, p.position_ids};
  std::vector<float> whole;
  model->encode_image(image, &whole);
  ASSERT_FALSE(whole.empty());

  ThreadPool pool(3);  // another thread count too: results must not depend on it
  Gemma4VisionEncoder encoder(model->weights(), &pool, model->options().matmul_precision);
  const int64_t layers = static_cast<int64_t>(model->weights().vision.layers.size());
  struct Slicing {
    int64_t row_block, budget;
  };
  for (const Slicing s : {Slicing{1, 1}, Slicing{7, 1}, Slicing{7, 50}, Slicing{64, 100},
                          Slicing{kVisionRowBlock, 1}, Slicing{1 << 20, 1 << 30}}) {
    std::unique_ptr<VisionEncodeJob> job = encoder.begin(image, s.row_block);
    const int64_t total = job->remaining_cost();
    EXPECT_EQ(total, job->num_patches() * layers * 3);
    int64_t spent = 0, calls = 0;
    while (!job->done()) {
      const int64_t before = job->remaining_cost();
      const int64_t used = encoder.advance(*job, s.budget);
      EXPECT_GT(used, 0);
      EXPECT_EQ(before - job->remaining_cost(), used);
      spent += used;
      ++calls;
    }
    EXPECT_EQ(spent, total);
    if (s.budget == 1) {  // one unit per call: a block of rows through one stage
      const int64_t blocks = (job->num_patches() + s.row_block - 1) / s.row_block;
      EXPECT_EQ(calls, blocks * layers * 3) << "row block " << s.row_block;
    }
    std::vector<float> sliced;
    encoder.finish(*job, &sliced);
    EXPECT_TRUE(same_bits(whole, sliced)) << "row block " << s.row_block << ", budget " << s.budget;
  }
}

TEST(VisionEncodeJob, FinishBeforeTheLastLayerIsAProgrammingError) {
  auto model = golden::load_model(golden::golden_dir() / "models" / "vision", 1);
  const Gemma4ImagePatches p = noise_patches();
  std::unique_ptr<VisionEncodeJob> job =
      model->begin_image_encode({p.pixel_values, p.position_ids});
  model->advance_image_encode(*job, 1);
  std::vector<float> out;
  EXPECT_THROW(model->finish_image_encode(*job, &out), std::logic_error);
}

}  // namespace
}  // namespace gemmaserve
