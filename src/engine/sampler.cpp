#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "core/error.h"

namespace gemmaserve {

void SamplingParams::validate(int vocab_size) const {
  auto fail = [](const std::string& field, const std::string& what) {
    throw InputError(field + " " + what);
  };
  if (n < 1) fail("n", "must be at least 1, got " + std::to_string(n) + ".");
  if (max_tokens < 0) fail("max_tokens", "must be at least 0, got " + std::to_string(max_tokens) + ".");
  if (min_tokens < 0) fail("min_tokens", "must be greater than or equal to 0, got " + std::to_string(min_tokens) + ".");
  if (min_tokens > max_tokens) fail("min_tokens", "must be less than or equal to max_tokens=" + std::to_string(max_tokens) + ", got " + std::to_string(min_tokens) + ".");
  if (!(temperature >= 0.0) || !std::isfinite(temperature)) fail("temperature", "must be non-negative, got " + std::to_string(temperature) + ".");
  if (!(top_p > 0.0 && top_p <= 1.0)) fail("top_p", "must be in (0, 1], got " + std::to_string(top_p) + ".");
  if (top_k < -1) fail("top_k", "must be -1 (disable), or at least 1, got " + std::to_string(top_k) + ".");
  if (!(min_p >= 0.0 && min_p <= 1.0)) fail("min_p", "must be in [0, 1], got " + std::to_string(min_p) + ".");
  if (logprobs && (*logprobs < 0 || *logprobs > vocab_size)) fail("logprobs", "must be in [0, " + std::to_string(vocab_size) + "], got " + std::to_string(*logprobs) + ".");
  if (prompt_logprobs && (*prompt_logprobs < 0 || *prompt_logprobs > vocab_size)) fail("prompt_logprobs", "must be in [0, " + std::to_string(vocab_size) + "], got " + std::to_string(*prompt_logprobs) + ".");
  for (int32_t id : stop_token_ids) {
    if (id < 0 || id >= vocab_size) fail("stop_token_ids", "holds " + std::to_string(id) + ", outside the vocabulary of " + std::to_string(vocab_size) + " tokens.");
  }
}

namespace {

// log(sum(exp(x - max))) + max, in double so full-vocabulary sums keep precision.
double log_sum_exp(std::span<const float> logits) {
  float mx = -std::numeric_limits<float>::infinity();
  for (float x : logits) mx = std::max(mx, x);
  double s = 0;
  for (float x : logits) s += std::exp(static_cast<double>(x) - mx);
  return std::log(s) + mx;
}

bool better(std::span<const float> logits, int32_t a, int32_t b) {
  return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
}

}  // namespace

int32_t argmax(std::span<const float> logits) {
  int32_t best = 0;
  for (int32_t i = 1; i < static_cast<int32_t>(logits.size()); ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return best;
}

TokenLogprobs top_logprobs(std::span<const float> logits, int k, int32_t also) {
  TokenLogprobs out;
  const double lse = log_sum_exp(logits);
  const int n = static_cast<int>(logits.size());
  k = std::clamp(k, 0, n);
  if (k > 0) {
    std::vector<int32_t> idx(static_cast<size_t>(n));
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                      [&](int32_t a, int32_t b) { return better(logits, a, b); });
    for (int i = 0; i < k; ++i) out[idx[i]] = static_cast<float>(logits[idx[i]] - lse);
  }
  if (also >= 0 && also < n) out[also] = static_cast<float>(logits[also] - lse);
  return out;
}

int32_t sample_token(std::span<const float> logits, const SamplingParams& p,
                     std::mt19937_64& rng) {
  if (p.temperature == 0.0) return argmax(logits);
  const int n = static_cast<int>(logits.size());
  std::vector<int32_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  int keep = n;
  if (p.top_k > 0 && p.top_k < n) keep = p.top_k;
  std::partial_sort(idx.begin(), idx.begin() + keep, idx.end(),
                    [&](int32_t a, int32_t b) { return better(logits, a, b); });
  idx.resize(static_cast<size_t>(keep));
  std::vector<double> prob(idx.size());
  const double mx = logits[idx[0]];
  double sum = 0;
  for (size_t i = 0; i < idx.size(); ++i) {
    prob[i] = std::exp((logits[idx[i]] - mx) / p.temperature);
    sum += prob[i];
  }
  for (double& x : prob) x /= sum;
  // top_p keeps the smallest prefix whose mass reaches top_p; min_p drops tokens below
  // min_p times the top probability.
  size_t cut = prob.size();
  if (p.top_p < 1.0) {
    double acc = 0;
    for (size_t i = 0; i < prob.size(); ++i) {
      acc += prob[i];
      if (acc >= p.top_p) {
        cut = i + 1;
        break;
      }
    }
  }
  if (p.min_p > 0.0) {
    const double floor = p.min_p * prob[0];
    size_t m = 1;
    while (m < cut && prob[m] >= floor) ++m;
    cut = m;
  }
  double total = 0;
  for (size_t i = 0; i < cut; ++i) total += prob[i];
  std::uniform_real_distribution<double> uni(0.0, total);
  double r = uni(rng), acc = 0;
  for (size_t i = 0; i < cut; ++i) {
    acc += prob[i];
    if (r < acc) return idx[i];
  }
  return idx[cut - 1];
}

}  // namespace gemmaserve
