// The sampler: greedy ties, log-probabilities, seeded draws and the truncation knobs.
#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "core/error.h"

namespace gemmaserve {
namespace {

TEST(Sampler, ArgmaxPrefersLowerIdOnTies) {
  std::vector<float> l = {1, 3, 3, 2};
  EXPECT_EQ(argmax(l), 1);
}

TEST(Sampler, TopLogprobsAreLogSoftmaxOfRawLogits) {
  std::vector<float> l = {0.0f, 1.0f, 2.0f, 2.0f};
  TokenLogprobs lp = top_logprobs(l, 2);
  ASSERT_EQ(lp.size(), 2u);
  const double lse = std::log(1 + std::exp(1.0) + 2 * std::exp(2.0));
  EXPECT_NEAR(lp.at(2), 2.0 - lse, 1e-6);
  EXPECT_NEAR(lp.at(3), 2.0 - lse, 1e-6);
  // The chosen token is added even outside the top K.
  EXPECT_EQ(top_logprobs(l, 1, 0).size(), 2u);
  // K = vocabulary size is the full distribution.
  TokenLogprobs all = top_logprobs(l, 4);
  double mass = 0;
  for (auto [id, v] : all) mass += std::exp(v);
  EXPECT_NEAR(mass, 1.0, 1e-6);
}

TEST(Sampler, TemperatureZeroIsGreedy) {
  SamplingParams p;
  p.temperature = 0;
  std::mt19937_64 rng(1);
  std::vector<float> l = {0.1f, 5.0f, 0.2f};
  EXPECT_EQ(sample_token(l, p, rng), 1);
}

TEST(Sampler, SameSeedSameDraws) {
  SamplingParams p;
  p.temperature = 1.0;
  std::vector<float> l(50);
  for (size_t i = 0; i < l.size(); ++i) l[i] = static_cast<float>(std::sin(i));
  std::mt19937_64 a(42), b(42);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(sample_token(l, p, a), sample_token(l, p, b));
}

TEST(Sampler, DrawsFollowTheTemperedDistribution) {
  SamplingParams p;
  p.temperature = 0.5;
  std::vector<float> l = {0.0f, std::log(2.0f) * 0.5f};  // at T=0.5 odds are 1:2
  std::mt19937_64 rng(7);
  int ones = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) ones += sample_token(l, p, rng);
  EXPECT_NEAR(ones / double(n), 2.0 / 3.0, 0.02);
}

TEST(Sampler, TopKTopPAndMinPRestrictTheSupport) {
  std::vector<float> l = {3.0f, 2.9f, 0.0f, -1.0f};
  std::mt19937_64 rng(3);
  SamplingParams k1;
  k1.top_k = 1;
  for (int i = 0; i < 200; ++i) ASSERT_EQ(sample_token(l, k1, rng), 0);
  SamplingParams tp;
  tp.top_p = 0.6;  // token 0 holds ~51%, tokens 0 and 1 together ~97%
  SamplingParams mp;
  mp.min_p = 0.5;  // only tokens within half of the top probability
  for (int i = 0; i < 500; ++i) {
    ASSERT_LE(sample_token(l, tp, rng), 1);
    ASSERT_LE(sample_token(l, mp, rng), 1);
  }
}

TEST(Sampler, ValidateNamesTheField) {
  auto message = [](auto mutate) {
    SamplingParams p;
    mutate(p);
    try {
      p.validate(100);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message([](SamplingParams& p) { p.temperature = -1; }),
            "temperature must be non-negative, got -1.000000.");
  EXPECT_EQ(message([](SamplingParams& p) { p.top_p = 0; }),
            "top_p must be in (0, 1], got 0.000000.");
  EXPECT_EQ(message([](SamplingParams& p) { p.logprobs = 101; }),
            "logprobs must be in [0, 100], got 101.");
  EXPECT_EQ(message([](SamplingParams& p) { p.max_tokens = -1; }),
            "max_tokens must be at least 0, got -1.");
  EXPECT_EQ(message([](SamplingParams&) {}), "no error");
}

}  // namespace
}  // namespace gemmaserve
