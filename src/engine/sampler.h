// Turns one row of logits into the next token, and computes log-probabilities for reporting.
#pragma once

#include <cstdint>
#include <random>
#include <span>

#include "gemmaserve/request_output.h"
#include "gemmaserve/sampling_params.h"

namespace gemmaserve {

// log_softmax of `logits` for the top `k` tokens (ties to the lower id), plus `also` when >= 0.
TokenLogprobs top_logprobs(std::span<const float> logits, int k, int32_t also = -1);

// Index of the largest logit (the lowest index among equals).
int32_t argmax(std::span<const float> logits);

// Picks the next token: argmax when temperature is 0, else a draw from the tempered
// distribution restricted by top_k, top_p and min_p, using the request's own generator.
int32_t sample_token(std::span<const float> logits, const SamplingParams& params,
                     std::mt19937_64& rng);

}  // namespace gemmaserve
