// Verification of drafted tokens against the target's distributions (Leviathan et al., "Fast
// Inference from Transformers via Speculative Decoding"): the tokens it emits are distributed
// exactly as sampling the target one token at a time, after every mask, penalty and truncation.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace gemmaserve {

class RequestSampler;

// The distribution sample_processed() draws from, written out: the kept tokens (temperature,
// min_p, top_k, top_p applied) with unnormalised weights.
struct KeptDistribution {
  std::vector<int32_t> ids;  // ascending
  std::vector<double> weights;
  double total = 0;
  // p(id) after normalisation; 0 for tokens not kept.
  double probability(int32_t id) const;
};
// `logits` are processed (RequestSampler::process); temperature must be >= kGreedyTemperature.
KeptDistribution kept_distribution(std::span<const float> logits, double temperature, int top_k,
                                   double top_p, double min_p);

// One draft position: accepts `draft` with probability min(1, p(draft) / q(draft)), where q is
// the draft's distribution over the vocabulary (empty: one-hot at `draft`, as ngram and greedy
// drafters have). On rejection draws from max(0, p - q) renormalised (p without the draft for a
// one-hot q). Returns the token emitted; *accepted says which case it was.
int32_t accept_or_resample(const KeptDistribution& p, int32_t draft, std::span<const float> q,
                           std::mt19937_64& rng, bool* accepted);

struct VerifiedDrafts {
  std::vector<int32_t> tokens;  // the accepted drafts, then one token the target chose
  int num_accepted = 0;
};

// Verifies `drafts` of one sequence: `rows` holds drafts.size() + 1 rows of raw logits (the
// target's outputs at the last accepted token and at each draft). Greedy requests accept while
// the draft is the argmax (then output is bit-identical to decoding one token at a time);
// others use accept_or_resample. A row is processed with the drafts before it as output, so
// penalties and structured-output masks see what the sequence would be. The last token comes
// from the row after the last accepted draft, sampled as without speculation.
VerifiedDrafts verify_drafts(RequestSampler& sampler, std::span<const float> rows, size_t vocab,
                             std::span<const int32_t> drafts,
                             std::span<const int32_t> output_tokens);

}  // namespace gemmaserve
