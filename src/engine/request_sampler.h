// Per-request sampling state: applies every SamplingParams knob to one row of raw logits and
// draws the next token with the request's own generator, so a seeded request produces the same
// tokens whatever else shares its batch (not under speculative decoding: how many drafts a step
// verifies, and so how many draws it takes, depends on the step's budget, as in vLLM).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "engine/json_object_grammar.h"
#include "gemmaserve/request_output.h"
#include "gemmaserve/sampling_params.h"

namespace gemmaserve {

class Tokenizer;
namespace structured {
class CompiledGrammar;
class GrammarMatcher;
struct GrammarState;
}  // namespace structured

class RequestSampler {
 public:
  // `stop_ids` are the ids masked while fewer than min_tokens were generated (eos ids unless
  // ignore_eos, plus stop_token_ids). `tokenizer` (may be null) encodes bad_words. A request
  // without a seed draws one from `fallback_seed`. Throws InputError when params.validate()
  // does, for bad_words that cannot be tokenized (or without a tokenizer), for stop ids
  // outside the vocabulary and when allowed_token_ids leaves nothing to draw (see
  // check_first_token_possible).
  // `json_trie` (the vocabulary's bytes) is needed by an answer_constraint with json_object or
  // a structured kind, `grammar` (its compiled spec) by the latter.
  RequestSampler(const SamplingParams& params, std::span<const int32_t> prompt_tokens,
                 std::vector<int32_t> stop_ids, const Tokenizer* tokenizer, int vocab_size,
                 uint64_t fallback_seed, std::shared_ptr<const JsonTokenTrie> json_trie = nullptr,
                 std::shared_ptr<const structured::CompiledGrammar> grammar = nullptr);
  ~RequestSampler();

  // The next token given the raw logits of this step and the tokens generated so far.
  // Processing order as vLLM v1: allowed_token_ids (and the answer constraint, as vLLM's
  // structured-output mask), bad_words, min_tokens masks, logit_bias,
  // penalties (repetition over prompt+output, presence/frequency over output), temperature,
  // min_p, top_k, top_p, then a draw (greedy below 1e-5, ties to the lower id). Throws
  // InputError when the masks leave no token at all (e.g. allowed_token_ids all bad words).
  int32_t sample(std::span<const float> raw_logits, std::span<const int32_t> output_tokens);

  // The logits as sample() draws from them, before temperature: every mask, bias and penalty
  // applied. Valid until the next call.
  std::span<const float> process(std::span<const float> raw_logits,
                                 std::span<const int32_t> output_tokens);

  // Where the answer starts in `output_tokens`; nullopt while inside the leading span.
  static std::optional<size_t> answer_start(const AnswerConstraint& c,
                                            std::span<const int32_t> output_tokens);
  // The tokens the prefix choices allow after `output_tokens`; empty when they allow any.
  static std::vector<int32_t> forced_next_tokens(const AnswerConstraint& forced,
                                                 std::span<const int32_t> output_tokens);

  // The request's parameters (seed resolved) and its generator, for speculative verification
  // (speculative/rejection_sampler.h), which draws from the same stream.
  const SamplingParams& params() const { return params_; }
  std::mt19937_64& rng() { return rng_; }

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
  std::vector<float> kept_;  // the logits a mask keeps, reused across steps
  // InputError when allowed_token_ids leaves nothing for the first draw (all of it banned by
  // one-token bad_words or, with min_tokens, stop ids): known before the request runs.
  void check_first_token_possible() const;
  // json_object: the recogniser fed up to output token json_fed_, allowed tokens per state.
  // The tokens the object allows next (cached; valid until the next call); null while the
  // answer has not started (free).
  const std::vector<int32_t>* json_next_tokens(std::span<const int32_t> output_tokens);
  std::shared_ptr<const JsonTokenTrie> json_trie_;
  JsonObjectMachine json_;
  size_t json_fed_ = 0;
  std::map<std::string, std::vector<int32_t>> json_cache_;
  size_t json_cache_bytes_ = 0;  // emptied past this: four near-whole vocabularies of Gemma 4
  static constexpr size_t kMaxJsonCacheBytes = size_t{4} << 20;
  std::vector<int32_t> never_;  // the constraint's never list, sorted
  // Structured outputs: masks `x` to what the grammar allows after `output_tokens`.
  void apply_grammar(std::span<const int32_t> output_tokens, std::vector<float>& x);
  std::shared_ptr<const structured::CompiledGrammar> grammar_;
  std::unique_ptr<structured::GrammarMatcher> matcher_;
  std::unique_ptr<structured::GrammarState> grammar_state_;
  size_t grammar_fed_ = 0;
};

}  // namespace gemmaserve
