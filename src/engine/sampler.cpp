#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <numeric>
#include <queue>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/python_text.h"
#include "kernels/cpu/ops.h"

namespace gemmaserve {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// "[1, 2]", as Python prints a list of ints in vLLM's messages.
std::string id_list(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
  return s + "]";
}

// Python's repr() of a str: single quotes unless only double quotes avoid escaping.
std::string py_repr(const std::string& w) {
  const char q = w.find('\'') != std::string::npos && w.find('"') == std::string::npos ? '"' : '\'';
  std::string s(1, q);
  for (char c : w) {
    if (c == q || c == '\\') {
      s += '\\';
      s += c;
    } else if (c == '\n') {
      s += "\\n";
    } else if (c == '\r') {
      s += "\\r";
    } else if (c == '\t') {
      s += "\\t";
    } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "\\x%02x", static_cast<unsigned char>(c));
      s += hex;
    } else {
      s += c;
    }
  }
  return s + q;
}

// "['a', '']", as Python prints a list of strings.
std::string str_list(const std::vector<std::string>& words) {
  std::string s = "[";
  for (size_t i = 0; i < words.size(); ++i) s += (i ? ", " : "") + py_repr(words[i]);
  return s + "]";
}

std::vector<int32_t> out_of_vocab(const std::vector<int32_t>& ids, int vocab_size) {
  std::vector<int32_t> bad;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size) bad.push_back(id);
  }
  return bad;
}

}  // namespace

void SamplingParams::validate(int vocab_size, int max_logprobs) const {
  auto fail = [](const std::string& message) { throw InputError(message); };
  auto num = [](double x) { return python_float_repr(x); };  // Python prints -1.0, as vLLM
  if (n < 1) fail("n must be at least 1, got " + std::to_string(n) + ".");
  if (!(presence_penalty >= -2.0 && presence_penalty <= 2.0)) {
    fail("presence_penalty must be in [-2, 2], got " + num(presence_penalty) + ".");
  }
  if (!(frequency_penalty >= -2.0 && frequency_penalty <= 2.0)) {
    fail("frequency_penalty must be in [-2, 2], got " + num(frequency_penalty) + ".");
  }
  if (!std::isfinite(repetition_penalty)) {
    fail("repetition_penalty must be a finite number, got " + num(repetition_penalty) + ".");
  }
  if (repetition_penalty <= 0.0) {
    fail("repetition_penalty must be greater than zero, got " + num(repetition_penalty) + ".");
  }
  if (!std::isfinite(temperature)) {
    fail("temperature must be a finite number, got " + num(temperature) + ".");
  }
  if (temperature < 0.0) fail("temperature must be non-negative, got " + num(temperature) + ".");
  if (temperature > 2.0) fail("temperature must be in [0, 2], got " + num(temperature) + ".");
  if (!(top_p > 0.0 && top_p <= 1.0)) fail("top_p must be in (0, 1], got " + num(top_p) + ".");
  if (top_k < -1) {
    fail("top_k must be 0 (disable), or at least 1, got " + std::to_string(top_k) + ".");
  }
  if (!(min_p >= 0.0 && min_p <= 1.0)) fail("min_p must be in [0, 1], got " + num(min_p) + ".");
  // vLLM wants >= 1; 0 is kept for prompt-only requests (prompt_logprobs scoring).
  if (max_tokens < 0) {
    fail("max_tokens must be at least 0, got " + std::to_string(max_tokens) + ".");
  }
  if (min_tokens < 0) {
    fail("min_tokens must be greater than or equal to 0, got " + std::to_string(min_tokens) + ".");
  }
  if (min_tokens > max_tokens) {
    fail("min_tokens must be less than or equal to max_tokens=" + std::to_string(max_tokens) +
         ", got " + std::to_string(min_tokens) + ".");
  }
  const int max_allowed = max_logprobs < 0 ? vocab_size : max_logprobs;
  auto check_logprobs = [&](const std::optional<int>& k, const std::string& field,
                            const std::string& what) {
    if (!k) return;
    if (*k < -1) fail(field + " must be non-negative or -1, got " + std::to_string(*k) + ".");
    const int wanted = *k == -1 ? vocab_size : *k;
    if (wanted > max_allowed) {
      fail("Requested " + what + " logprobs of " + std::to_string(wanted) +
           ", which is greater than max allowed: " + std::to_string(max_allowed));
    }
  };
  check_logprobs(logprobs, "logprobs", "sample");
  check_logprobs(prompt_logprobs, "prompt_logprobs", "prompt");
  if (auto bad = out_of_vocab(stop_token_ids, vocab_size); !bad.empty()) {
    fail("token_id(s) " + id_list(bad) +
         " in stop_token_ids contain out-of-vocab token ids. Vocabulary size: " +
         std::to_string(vocab_size));
  }
  std::vector<int32_t> bias_ids;
  for (const auto& [id, bias] : logit_bias) bias_ids.push_back(id);
  if (auto bad = out_of_vocab(bias_ids, vocab_size); !bad.empty()) {
    fail("token_id(s) " + id_list(bad) +
         " in logit_bias contain out-of-vocab token ids. Vocabulary size: " +
         std::to_string(vocab_size));
  }
  if (allowed_token_ids) {
    if (allowed_token_ids->empty()) fail("allowed_token_ids is not None and empty!");
    if (!out_of_vocab(*allowed_token_ids, vocab_size).empty()) {
      fail("allowed_token_ids contains out-of-vocab token id!");
    }
  }
  if (answer_constraint) {
    const AnswerConstraint& f = *answer_constraint;
    std::vector<int32_t> ids = f.never;
    for (const auto& c : f.prefix_choices) {
      if (c.empty()) fail("answer_constraint: every prefix choice needs at least one token");
      ids.insert(ids.end(), c.begin(), c.end());
    }
    const int kinds = static_cast<int>(!f.prefix_choices.empty()) +
                      static_cast<int>(f.json_object) +
                      static_cast<int>(!f.structured_kind.empty());
    if (kinds != 1) {
      fail("answer_constraint: give prefix choices, json_object or a structured kind, one of them");
    }
    for (int32_t id : {f.lead_open, f.lead_close}) {
      if (id != -1) ids.push_back(id);
    }
    if ((f.lead_open == -1) != (f.lead_close == -1)) {
      fail("answer_constraint: lead_open and lead_close go together");
    }
    if (auto bad = out_of_vocab(ids, vocab_size); !bad.empty()) {
      fail("token_id(s) " + id_list(bad) +
           " in answer_constraint contain out-of-vocab token ids. Vocabulary size: " +
           std::to_string(vocab_size));
    }
  }
  for (const std::string& s : stop) {
    if (s.empty()) fail("stop cannot contain an empty string.");
  }
  for (const std::string& w : bad_words) {
    if (w.empty()) {
      fail("bad_words cannot contain an empty string. Got bad_words=" + str_list(bad_words));
    }
  }
  if (temperature < kGreedyTemperature && n > 1) {
    fail("n must be 1 when using greedy sampling, got " + std::to_string(n) + ".");
  }
}

namespace {

// log(sum(exp(x - max))) + max, in double so full-vocabulary sums keep precision.
double log_sum_exp(std::span<const float> logits) {
  float mx = kNegInf;
  for (float x : logits) mx = std::max(mx, x);
  if (mx == kNegInf) return mx;
  double s = 0;
  for (float x : logits) s += std::exp(static_cast<double>(x) - mx);
  return std::log(s) + mx;
}

// Higher logit first, the lower id among equals.
bool better(std::span<const float> logits, int32_t a, int32_t b) {
  return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
}

// A uniform double in [0, 1) from the top 53 bits: the same on every standard library.
}  // namespace

double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

int32_t argmax(std::span<const float> logits) {
  // The first index of the largest value, NaN ignored (the last index when all are NaN), in two
  // passes (a running maximum in 16 lanes, then a search for it).
  const auto n = static_cast<int32_t>(logits.size());
  const float* x = logits.data();
  constexpr int kLanes = 16;
  float lane[kLanes];
  std::fill(lane, lane + kLanes, kNegInf);
  int32_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) lane[l] = x[i + l] > lane[l] ? x[i + l] : lane[l];
  }
  float mx = kNegInf;
  for (int l = 0; l < kLanes; ++l) mx = lane[l] > mx ? lane[l] : mx;
  for (; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  for (i = 0; i < n; ++i) {
    if (x[i] == mx) return i;
  }
  return std::max(n - 1, 0);
}

TokenLogprobs top_logprobs(std::span<const float> logits, int k, int32_t also) {
  TokenLogprobs out;
  const double lse = log_sum_exp(logits);
  const int n = static_cast<int>(logits.size());
  k = k < 0 ? n : std::min(k, n);
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

float truncation_threshold(std::span<const float> x, float max_logit, double t, int top_k,
                           double min_p) {
  const int32_t n = static_cast<int32_t>(x.size());
  const double mx = max_logit;
  // min_p keeps p >= min_p * p_max, i.e. a logit at least t * log(min_p) below the top.
  const double min_logit = min_p > 0.0 ? mx + t * std::log(min_p) : -HUGE_VAL;
  // As a float bound: the smallest float at or above min_logit.
  float min_p_floor = static_cast<float>(min_logit);
  if (static_cast<double>(min_p_floor) < min_logit) {
    min_p_floor = std::nextafter(min_p_floor, HUGE_VALF);
  }
  auto passes_min_p = [&](float v) { return v >= min_p_floor; };

  // top_k keeps every token tied with the k-th largest logit (vLLM masks logits < k-th).
  float kth = kNegInf;
  if (top_k > 0 && top_k < n) {
    std::priority_queue<float, std::vector<float>, std::greater<float>> heap;  // k largest
    for (float v : x) {
      if (!(v > kNegInf) || !passes_min_p(v)) continue;
      if (static_cast<int>(heap.size()) < top_k) {
        heap.push(v);
      } else if (v > heap.top()) {
        heap.pop();
        heap.push(v);
      }
    }
    if (static_cast<int>(heap.size()) == top_k) kth = heap.top();
  }
  // Kept: at or above both bounds (NaN fails), and not masked.
  return std::max(kth, min_p_floor);
}

int32_t sample_processed(std::span<const float> x, double temperature, int top_k, double top_p,
                         double min_p, std::mt19937_64& rng) {
  const int32_t n = static_cast<int32_t>(x.size());
  if (n == 0) throw std::invalid_argument("sample_processed: empty logits");
  const int32_t best = argmax(x);
  const double mx = x[best];
  if (!(mx > kNegInf)) {
    throw InputError(
        "no token can be sampled: allowed_token_ids, bad_words, min_tokens and the answer "
        "constraint (tool_choice, response_format) mask every token");
  }
  if (temperature < kGreedyTemperature) return best;
  const double t = std::max(temperature, kMinTemperature);
  // Probabilities relative to the top token.
  auto weight = [&](float v) { return std::exp((static_cast<double>(v) - mx) / t); };
  const float threshold = truncation_threshold(x, x[best], t, top_k, min_p);
  auto keep = [&](float v) { return v > kNegInf && v >= threshold; };

  if (top_p >= 1.0) {
    // The full-vocabulary exp pass is the sampler's main cost: one vectorised float pass (a
    // double exp per token took ~1 ms of every decoded token).
    thread_local std::vector<float> weights;
    thread_local std::vector<double> block_sums;
    weights.resize(static_cast<size_t>(n));
    cpu::exp_scaled(x.data(), weights.data(), n, x[best], static_cast<float>(1.0 / t));
    // Kept weights are summed per block of kSumBlock tokens in kSumLanes independent double
    // sums, folded in a fixed order (one chain of 262144 dependent adds took ~0.25 ms per
    // token); the draw walks the block sums, then its block token by token.
    constexpr int32_t kSumBlock = 1024;
    constexpr int kSumLanes = 8;
    const int32_t blocks = (n + kSumBlock - 1) / kSumBlock;
    block_sums.resize(static_cast<size_t>(blocks));
    // keep() without its -inf test, which the sums need not make: -inf weighs 0.
    double total = 0;
    for (int32_t b = 0; b < blocks; ++b) {
      const int32_t end = std::min(n, (b + 1) * kSumBlock);
      double lane[kSumLanes] = {};
      int32_t i = b * kSumBlock;
      for (; i + kSumLanes <= end; i += kSumLanes) {
        for (int l = 0; l < kSumLanes; ++l) {
          lane[l] += x[i + l] >= threshold ? weights[i + l] : 0.0f;
        }
      }
      double sum = 0;
      for (int l = 0; l < kSumLanes; ++l) sum += lane[l];
      for (; i < end; ++i) sum += x[i] >= threshold ? weights[i] : 0.0f;
      block_sums[static_cast<size_t>(b)] = sum;
      total += sum;
    }
    const double r = uniform01(rng) * total;
    double acc = 0;
    for (int32_t b = 0; b < blocks; ++b) {
      const double sum = block_sums[static_cast<size_t>(b)];
      if (!(r < acc + sum)) {
        acc += sum;
        continue;
      }
      int32_t last = -1;
      for (int32_t i = b * kSumBlock; i < std::min(n, (b + 1) * kSumBlock); ++i) {
        if (!keep(x[i])) continue;
        acc += weights[i];
        last = i;
        if (r < acc) return i;
      }
      if (last >= 0) return last;  // the block's own order rounded below its sum
    }
    // Rounding left r at the very top: the last kept token.
    for (int32_t i = n - 1; i >= 0; --i) {
      if (keep(x[i])) return i;
    }
    return best;
  }

  // top_p keeps the smallest prefix (by probability, descending) whose mass reaches top_p.
  struct Cand {
    float x;
    int32_t id;
    double w;
  };
  std::vector<Cand> c;
  double total = 0;
  for (int32_t i = 0; i < n; ++i) {
    if (!keep(x[i])) continue;
    c.push_back({x[i], i, weight(x[i])});
    total += c.back().w;
  }
  const double target = top_p * total;
  auto before = [](const Cand& a, const Cand& b) {
    return a.x > b.x || (a.x == b.x && a.id < b.id);
  };
  // Quickselect on mass: only the part holding the cut is ever sorted, so flat distributions
  // over the whole vocabulary cost linear time.
  size_t lo = 0, hi = c.size(), cut = c.size();
  double acc = 0;  // mass of c[0, lo), all of which is kept
  while (lo < hi) {
    if (hi - lo <= 32) {
      std::sort(c.begin() + static_cast<std::ptrdiff_t>(lo),
                c.begin() + static_cast<std::ptrdiff_t>(hi), before);
      for (size_t j = lo; j < hi; ++j) {
        acc += c[j].w;
        if (acc >= target) {
          cut = j + 1;
          break;
        }
      }
      break;
    }
    const Cand& a = c[lo];
    const Cand& b = c[lo + (hi - lo) / 2];
    const Cand& d = c[hi - 1];
    const Cand pivot = before(a, b) ? (before(b, d) ? b : (before(a, d) ? d : a))
                                    : (before(a, d) ? a : (before(b, d) ? d : b));
    auto first = c.begin() + static_cast<std::ptrdiff_t>(lo);
    auto last = c.begin() + static_cast<std::ptrdiff_t>(hi);
    auto mid = std::partition(first, last, [&](const Cand& e) { return before(e, pivot); });
    std::iter_swap(mid, std::find_if(mid, last, [&](const Cand& e) { return e.id == pivot.id; }));
    const size_t p = static_cast<size_t>(mid - c.begin());
    double upper = 0;
    for (auto it = first; it != mid; ++it) upper += it->w;
    if (acc + upper >= target) {
      hi = p;  // the cut lies among the better ones
      continue;
    }
    acc += upper + c[p].w;
    if (acc >= target) {
      cut = p + 1;
      break;
    }
    lo = p + 1;
  }
  double kept_mass = 0;
  for (size_t j = 0; j < cut; ++j) kept_mass += c[j].w;
  const double r = uniform01(rng) * kept_mass;
  double run = 0;
  for (size_t j = 0; j < cut; ++j) {
    run += c[j].w;
    if (r < run) return c[j].id;
  }
  return c[cut - 1].id;
}

int32_t sample_token(std::span<const float> logits, const SamplingParams& p, std::mt19937_64& rng) {
  return sample_processed(logits, p.temperature, p.top_k, p.top_p, p.min_p, rng);
}

}  // namespace gemmaserve
