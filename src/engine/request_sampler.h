// Per-request sampling state: applies every SamplingParams knob to one row of raw logits and
// draws the next token with the request's own generator, so a seeded request produces the same
// tokens whatever else shares its batch.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "gemmaserve/request_output.h"
#include "gemmaserve/sampling_params.h"

namespace gemmaserve {

class Tokenizer;

class RequestSampler {
 public:
  // `stop_ids` are the ids masked while fewer than min_tokens were generated (eos ids unless
  // ignore_eos, plus stop_token_ids). `tokenizer` (may be null) encodes bad_words. A request
  // without a seed draws one from `fallback_seed`. Throws InputError when params.validate()
  // does, for bad_words that cannot be tokenized (or without a tokenizer) and for stop ids
  // outside the vocabulary.
  RequestSampler(const SamplingParams& params, std::span<const int32_t> prompt_tokens,
                 std::vector<int32_t> stop_ids, const Tokenizer* tokenizer, int vocab_size,
                 uint64_t fallback_seed);

  // The next token given the raw logits of this step and the tokens generated so far.
  // Processing order as vLLM v1: allowed_token_ids (and the forced answer prefix, as vLLM's
  // structured-output mask), bad_words, min_tokens masks, logit_bias,
  // penalties (repetition over prompt+output, presence/frequency over output), temperature,
  // min_p, top_k, top_p, then a draw (greedy below 1e-5, ties to the lower id). Throws
  // InputError when the masks leave no token at all (e.g. allowed_token_ids all bad words).
  int32_t sample(std::span<const float> raw_logits, std::span<const int32_t> output_tokens);

  // The logits as sample() draws from them, before temperature: every mask, bias and penalty
  // applied. Valid until the next call.
  std::span<const float> process(std::span<const float> raw_logits,
                                 std::span<const int32_t> output_tokens);

  // The tokens the forced answer prefix allows after `output_tokens`; empty when it allows any.
  static std::vector<int32_t> forced_next_tokens(const ForcedAnswerPrefix& forced,
                                                 std::span<const int32_t> output_tokens);

  // Top-K log-probabilities of the raw distribution plus `chosen` (vLLM's default logprobs mode).
  static TokenLogprobs logprobs(std::span<const float> raw_logits, int k, int32_t chosen);

 private:
  SamplingParams params_;
  std::vector<int32_t> prompt_tokens_;  // distinct, sorted: the repetition penalty needs no more
  std::vector<int32_t> stop_ids_;
  std::vector<std::vector<int32_t>> bad_word_ids_;
  int vocab_size_;
  std::mt19937_64 rng_;
  std::vector<float> work_;  // processed logits, reused across steps
};

}  // namespace gemmaserve
