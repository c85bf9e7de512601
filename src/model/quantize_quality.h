// Teacher-forced quality of a quantized model (or one with bf16 activations) against the float
// one: both models see the same prompts, every position's logits are compared (top-1 agreement,
// KL divergence).
#pragma once

#include <cstdint>
#include <vector>

#include "model/gemma4_model.h"

namespace gemmaserve {

struct QuantQualityReport {
  int64_t positions = 0;
  int64_t top1_agree = 0;
  // Positions whose float top-1 logit beats the runner-up by more than the margin.
  int64_t confident_positions = 0;
  int64_t confident_top1_agree = 0;
  double kl_sum = 0.0;  // sum over positions of KL(float || quantized), nats
  double kl_max = 0.0;

  double confident_agreement() const {
    return confident_positions ? double(confident_top1_agree) / double(confident_positions) : 1.0;
  }
  double agreement() const { return positions ? double(top1_agree) / double(positions) : 1.0; }
  double mean_kl() const { return positions ? kl_sum / double(positions) : 0.0; }
  void add(const QuantQualityReport& other);
};

// Runs every prompt through both models (one prefill each, logits at every position). The
// candidate may differ in weights (quantized) or in Gemma4ModelOptions (bf16 activations).
QuantQualityReport compare_quantized(Gemma4Model& reference, Gemma4Model& quantized,
                                     const std::vector<std::vector<int32_t>>& prompts,
                                     float margin = 0.1f);

// `count` prompts of `length` token ids drawn uniformly from [0, vocab_size) (seeded).
std::vector<std::vector<int32_t>> random_prompts(int vocab_size, int count, int length,
                                                 uint64_t seed);

}  // namespace gemmaserve
