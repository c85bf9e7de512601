// Turns one row of logits into the next token, and computes log-probabilities for reporting.
#pragma once

#include <cstdint>
#include <random>
#include <span>

#include "gemmaserve/request_output.h"
#include "gemmaserve/sampling_params.h"

namespace gemmaserve {

// Below this temperature sampling is greedy (vLLM's _SAMPLING_EPS).
inline constexpr double kGreedyTemperature = 1e-5;
// Positive temperatures are raised to at least this (vLLM's _MAX_TEMP, against inf/nan).
inline constexpr double kMinTemperature = 1e-2;

// log_softmax of `logits` for the top `k` tokens (ties to the lower id; k = -1 or k >= the
// vocabulary means every token), plus `also` when >= 0.
TokenLogprobs top_logprobs(std::span<const float> logits, int k, int32_t also = -1);

// Index of the largest logit (the lowest index among equals).
int32_t argmax(std::span<const float> logits);

// A uniform draw in [0, 1) (53 bits of one generator output).
double uniform01(std::mt19937_64& rng);

// The lowest logit min_p and top_k keep at temperature t (positive, clamped) given the top logit:
// tokens at or above it survive both (top_k keeps every token tied with the k-th).
float truncation_threshold(std::span<const float> logits, float max_logit, double t, int top_k,
                           double min_p);

// Draws from logits that masks, biases and penalties were already applied to, in vLLM's order:
// greedy below kGreedyTemperature, else temperature, min_p (relative to the top probability),
// top_k (ties with the k-th logit kept), top_p (smallest prefix reaching top_p kept), then one
// uniform draw from `rng` (exactly one per non-greedy call). Throws InputError when every logit
// is -inf (the request's masks leave nothing to sample).
int32_t sample_processed(std::span<const float> logits, double temperature, int top_k, double top_p,
                         double min_p, std::mt19937_64& rng);

// sample_processed() of raw `logits` with the truncation knobs of `params` (no masks, biases or
// penalties: RequestSampler applies those).
int32_t sample_token(std::span<const float> logits, const SamplingParams& params,
                     std::mt19937_64& rng);

}  // namespace gemmaserve
