// The sampler: greedy ties, log-probabilities, seeded draws and the truncation knobs.
#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <vector>

#include "core/error.h"

namespace gemmaserve {
namespace {

TEST(Sampler, ArgmaxPrefersLowerIdOnTies) {
  std::vector<float> l = {1, 3, 3, 2};
  EXPECT_EQ(argmax(l), 1);
}

TEST(Sampler, ArgmaxIgnoresNanAndFindsTheFirstMaximumAnywhere) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> l(1000, -5.0f);  // past the 16-lane part: a tail of 8
  l[0] = nan;
  l[500] = 7.0f;
  l[997] = 7.0f;
  EXPECT_EQ(argmax(l), 500);
  l[999] = 8.0f;  // in the tail
  EXPECT_EQ(argmax(l), 999);
  l[3] = nan;
  l[17] = inf;
  EXPECT_EQ(argmax(l), 17);
  EXPECT_EQ(argmax(std::vector<float>{nan, -inf, -inf}), 1);
  EXPECT_EQ(argmax(std::vector<float>{nan, nan}), 1);  // all NaN: the last
  EXPECT_EQ(argmax(std::vector<float>{2.0f}), 0);
}

TEST(Sampler, DrawsAcrossAVocabularyOfManyBlocksFollowTheWeights) {
  // Three kept tokens in different 1024-token blocks, with blocks of masked tokens between:
  // odds 1:2:1, whatever block the draw lands in.
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> l(262144, -inf);
  l[3] = 0.0f;
  l[1500] = std::log(2.0f);
  l[262143] = 0.0f;
  SamplingParams p;
  p.temperature = 1.0;
  std::mt19937_64 rng(11);
  std::map<int32_t, int> seen;
  const int n = 4000;
  for (int i = 0; i < n; ++i) ++seen[sample_token(l, p, rng)];
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_NEAR(seen[3] / double(n), 0.25, 0.03);
  EXPECT_NEAR(seen[1500] / double(n), 0.5, 0.03);
  EXPECT_NEAR(seen[262143] / double(n), 0.25, 0.03);
  // top_k 2 with a flat tail: only the two largest, never a masked token.
  for (size_t i = 0; i < l.size(); i += 7) l[i] = -3.0f;
  l[1500] = 5.0f;
  l[200000] = 5.0f;
  SamplingParams k2;
  k2.top_k = 2;
  for (int i = 0; i < 200; ++i) {
    const int32_t t = sample_token(l, k2, rng);
    ASSERT_TRUE(t == 1500 || t == 200000) << t;
  }
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
            "temperature must be non-negative, got -1.0.");
  EXPECT_EQ(message([](SamplingParams& p) { p.top_p = 0; }), "top_p must be in (0, 1], got 0.0.");
  EXPECT_EQ(message([](SamplingParams& p) { p.logprobs = 101; }),
            "Requested sample logprobs of 101, which is greater than max allowed: 100");
  EXPECT_EQ(message([](SamplingParams& p) { p.logprobs = -2; }),
            "logprobs must be non-negative or -1, got -2.");
  EXPECT_EQ(message([](SamplingParams& p) { p.prompt_logprobs = 101; }),
            "Requested prompt logprobs of 101, which is greater than max allowed: 100");
  EXPECT_EQ(message([](SamplingParams& p) { p.max_tokens = -1; }),
            "max_tokens must be at least 0, got -1.");
  EXPECT_EQ(message([](SamplingParams& p) { p.temperature = 2.5; }),
            "temperature must be in [0, 2], got 2.5.");
  EXPECT_EQ(message([](SamplingParams& p) { p.top_k = -2; }),
            "top_k must be 0 (disable), or at least 1, got -2.");
  EXPECT_EQ(message([](SamplingParams& p) { p.min_p = 1.5; }), "min_p must be in [0, 1], got 1.5.");
  EXPECT_EQ(message([](SamplingParams& p) { p.presence_penalty = 2.5; }),
            "presence_penalty must be in [-2, 2], got 2.5.");
  EXPECT_EQ(message([](SamplingParams& p) { p.frequency_penalty = -3; }),
            "frequency_penalty must be in [-2, 2], got -3.0.");
  EXPECT_EQ(message([](SamplingParams& p) { p.repetition_penalty = 0; }),
            "repetition_penalty must be greater than zero, got 0.0.");
  EXPECT_EQ(message([](SamplingParams& p) { p.repetition_penalty = INFINITY; }),
            "repetition_penalty must be a finite number, got inf.");
  EXPECT_EQ(message([](SamplingParams& p) { p.min_tokens = 20; }),
            "min_tokens must be less than or equal to max_tokens=16, got 20.");
  EXPECT_EQ(message([](SamplingParams& p) {
              p.stop_token_ids = {5, 100, -1};
            }),
            "token_id(s) [100, -1] in stop_token_ids contain out-of-vocab token ids. "
            "Vocabulary size: 100");
  EXPECT_EQ(message([](SamplingParams& p) {
              p.logit_bias = {{3, 1.0f}, {100, 2.0f}};
            }),
            "token_id(s) [100] in logit_bias contain out-of-vocab token ids. Vocabulary size: 100");
  EXPECT_EQ(message([](SamplingParams& p) { p.allowed_token_ids.emplace(); }),
            "allowed_token_ids is not None and empty!");
  EXPECT_EQ(message([](SamplingParams& p) {
              p.allowed_token_ids = std::vector<int32_t>{1, 100};
            }),
            "allowed_token_ids contains out-of-vocab token id!");
  EXPECT_EQ(message([](SamplingParams& p) {
              p.stop = {"a", ""};
            }),
            "stop cannot contain an empty string.");
  EXPECT_EQ(message([](SamplingParams& p) {
              p.bad_words = {"it's", "a\n", ""};
            }),
            "bad_words cannot contain an empty string. Got bad_words=[\"it's\", 'a\\n', '']");
  EXPECT_EQ(message([](SamplingParams& p) {
              p.temperature = 0;
              p.n = 2;
            }),
            "n must be 1 when using greedy sampling, got 2.");
  EXPECT_EQ(message([](SamplingParams& p) { p.n = 0; }), "n must be at least 1, got 0.");
  EXPECT_EQ(message([](SamplingParams& p) { p.logprobs = -1; }), "no error");  // whole vocabulary
  EXPECT_EQ(message([](SamplingParams& p) { p.max_tokens = 0; }), "no error");
  EXPECT_EQ(message([](SamplingParams&) {}), "no error");
}

TEST(Sampler, ValidateBoundsLogprobsByMaxLogprobs) {
  SamplingParams p;
  p.logprobs = 21;
  try {
    p.validate(100, /*max_logprobs=*/20);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(),
                 "Requested sample logprobs of 21, which is greater than max allowed: 20");
  }
  p.logprobs = -1;  // the whole vocabulary, over the limit too
  EXPECT_THROW(p.validate(100, 20), InputError);
  p.logprobs = 20;
  EXPECT_NO_THROW(p.validate(100, 20));
}

TEST(Sampler, TopKKeepsTiesAndEveryMaskedRowIsAnError) {
  std::vector<float> l = {3.0f, 2.0f, 2.0f, 0.0f};
  SamplingParams k1;
  k1.top_k = 2;
  std::mt19937_64 rng(5);
  std::map<int32_t, int> seen;
  for (int i = 0; i < 2000; ++i) ++seen[sample_token(l, k1, rng)];
  EXPECT_EQ(seen.size(), 3u);  // 0, 1 and 2 (tied with the 2nd largest), never 3
  EXPECT_EQ(seen.count(3), 0u);
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> masked = {-inf, -inf};
  EXPECT_THROW(sample_token(masked, k1, rng), InputError);
  SamplingParams greedy;
  greedy.temperature = 0;
  EXPECT_THROW(sample_token(masked, greedy, rng), InputError);
}

TEST(Sampler, AGreedyOrRandomDrawUsesAtMostOneNumber) {
  // A request's generator advances once per random draw, never per vocabulary entry.
  std::vector<float> l(1000, 0.0f);
  SamplingParams p;
  p.top_p = 0.5;
  std::mt19937_64 a(9), b(9);
  sample_token(l, p, a);
  b.discard(1);
  EXPECT_EQ(a(), b());
  p.temperature = 0;
  sample_token(l, p, a);
  EXPECT_EQ(a(), b());
}

}  // namespace
}  // namespace gemmaserve
