#include "engine/speculative/rejection_sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/error.h"
#include "engine/request_sampler.h"
#include "engine/sampler.h"

namespace gemmaserve {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Draws an index of `weights` in proportion to them (their sum is `total` > 0).
size_t draw_index(std::span<const double> weights, double total, std::mt19937_64& rng) {
  const double r = uniform01(rng) * total;
  double acc = 0;
  size_t last = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (weights[i] <= 0) continue;
    acc += weights[i];
    last = i;
    if (r < acc) return i;
  }
  return last;  // rounding left r at the very top
}

}  // namespace

double KeptDistribution::probability(int32_t id) const {
  const auto it = std::lower_bound(ids.begin(), ids.end(), id);
  if (it == ids.end() || *it != id || total <= 0) return 0;
  return weights[static_cast<size_t>(it - ids.begin())] / total;
}

KeptDistribution kept_distribution(std::span<const float> x, double temperature, int top_k,
                                   double top_p, double min_p) {
  const int32_t best = argmax(x);
  const double mx = x[static_cast<size_t>(best)];
  if (!(mx > kNegInf)) {
    throw InputError(
        "no token can be sampled: allowed_token_ids, bad_words, min_tokens and the answer "
        "constraint (tool_choice, response_format) mask every token");
  }
  const double t = std::max(temperature, kMinTemperature);
  const float threshold = truncation_threshold(x, x[static_cast<size_t>(best)], t, top_k, min_p);
  KeptDistribution d;
  for (int32_t i = 0; i < static_cast<int32_t>(x.size()); ++i) {
    const float v = x[static_cast<size_t>(i)];
    if (!(v > kNegInf && v >= threshold)) continue;
    d.ids.push_back(i);
    d.weights.push_back(std::exp((static_cast<double>(v) - mx) / t));
    d.total += d.weights.back();
  }
  if (top_p < 1.0) {
    // The smallest prefix by probability (ties to the lower id) reaching top_p of the mass.
    std::vector<size_t> order(d.ids.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      const float xa = x[static_cast<size_t>(d.ids[a])], xb = x[static_cast<size_t>(d.ids[b])];
      return xa > xb || (xa == xb && d.ids[a] < d.ids[b]);
    });
    const double target = top_p * d.total;
    double acc = 0;
    size_t cut = order.size();
    for (size_t j = 0; j < order.size(); ++j) {
      acc += d.weights[order[j]];
      if (acc >= target) {
        cut = j + 1;
        break;
      }
    }
    std::vector<size_t> kept(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(cut));
    std::sort(kept.begin(), kept.end());
    KeptDistribution top;
    for (size_t j : kept) {
      top.ids.push_back(d.ids[j]);
      top.weights.push_back(d.weights[j]);
      top.total += d.weights[j];
    }
    return top;
  }
  return d;
}

int32_t accept_or_resample(const KeptDistribution& p, int32_t draft, std::span<const float> q,
                           std::mt19937_64& rng, bool* accepted) {
  const double p_draft = p.probability(draft);
  const double q_draft = q.empty() ? 1.0 : static_cast<double>(q[static_cast<size_t>(draft)]);
  const double u = uniform01(rng);
  if (q_draft > 0 && u < p_draft / q_draft) {
    *accepted = true;
    return draft;
  }
  *accepted = false;
  // The residual max(0, p - q), over the kept tokens (p is 0 elsewhere).
  std::vector<double> residual(p.ids.size());
  double total = 0;
  for (size_t i = 0; i < p.ids.size(); ++i) {
    const double pi = p.weights[i] / p.total;
    const double qi = q.empty() ? (p.ids[i] == draft ? 1.0 : 0.0)
                                : static_cast<double>(q[static_cast<size_t>(p.ids[i])]);
    residual[i] = std::max(0.0, pi - qi);
    total += residual[i];
  }
  if (!(total > 0)) return draft;  // p == q: rejection had probability 0
  return p.ids[draw_index(residual, total, rng)];
}

VerifiedDrafts verify_drafts(RequestSampler& sampler, std::span<const float> rows, size_t vocab,
                             std::span<const int32_t> drafts,
                             std::span<const int32_t> output_tokens) {
  const SamplingParams& params = sampler.params();
  const bool greedy = params.temperature < kGreedyTemperature;
  std::vector<int32_t> context(output_tokens.begin(), output_tokens.end());
  VerifiedDrafts out;
  for (size_t i = 0; i <= drafts.size(); ++i) {
    const std::span<const float> x = sampler.process(rows.subspan(i * vocab, vocab), context);
    if (i == drafts.size() || greedy) {
      const int32_t token = sample_processed(x, params.temperature, params.top_k, params.top_p,
                                             params.min_p, sampler.rng());
      out.tokens.push_back(token);
      if (i == drafts.size() || token != drafts[i]) break;
    } else {
      const KeptDistribution p =
          kept_distribution(x, params.temperature, params.top_k, params.top_p, params.min_p);
      bool accepted = false;
      out.tokens.push_back(accept_or_resample(p, drafts[i], {}, sampler.rng(), &accepted));
      if (!accepted) break;
    }
    ++out.num_accepted;
    context.push_back(drafts[i]);
  }
  return out;
}

}  // namespace gemmaserve
