// RequestSampler: seeded draws follow the processed distribution, each knob changes what vLLM's
// sampler changes, and a request's seed alone decides its tokens.
#include "engine/request_sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "test_support.h"
#include "tokenizer/text_pipeline.h"
#include "tokenizer/tokenizer.h"

namespace gemmaserve {
namespace {

using Ids = std::vector<int32_t>;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

std::vector<float> log_probs(const std::vector<double>& p) {
  std::vector<float> l;
  for (double x : p) l.push_back(static_cast<float>(std::log(x)));
  return l;
}

RequestSampler make(const SamplingParams& p, int vocab, uint64_t fallback = 0,
                    const Ids& prompt = {}, Ids stop_ids = {}, const Tokenizer* tok = nullptr) {
  return RequestSampler(p, prompt, std::move(stop_ids), tok, vocab, fallback);
}

// Token frequencies over `draws` independent draws (no output history).
std::vector<double> frequencies(RequestSampler& s, const std::vector<float>& logits, int draws) {
  std::vector<double> f(logits.size());
  for (int i = 0; i < draws; ++i) f[static_cast<size_t>(s.sample(logits, {}))] += 1.0 / draws;
  return f;
}

// Pearson's chi-square of observed frequencies against expected probabilities.
double chi_square(const std::vector<double>& observed, const std::vector<double>& expected,
                  int draws) {
  double chi = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    if (expected[i] == 0) {
      EXPECT_EQ(observed[i], 0) << "token " << i << " has probability 0";
      continue;
    }
    const double d = (observed[i] - expected[i]) * draws;
    chi += d * d / (expected[i] * draws);
  }
  return chi;
}

// 99.9% quantiles of chi-square: a fixed seed makes these deterministic, the bound meaningful.
double chi_bound(size_t dof) { return dof <= 3 ? 16.27 : dof <= 5 ? 20.52 : 29.59; }

void expect_distribution(const SamplingParams& p, const std::vector<float>& logits,
                         const std::vector<double>& expected, uint64_t seed = 1234) {
  SamplingParams q = p;
  q.seed = seed;
  RequestSampler s = make(q, static_cast<int>(logits.size()));
  const int draws = 40000;
  const std::vector<double> f = frequencies(s, logits, draws);
  size_t support = 0;
  for (double e : expected) support += e > 0;
  EXPECT_LT(chi_square(f, expected, draws), chi_bound(support - 1));
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(f[i], expected[i], 0.015) << i;
}

TEST(RequestSamplerTest, SeededDrawsFollowTheDistribution) {
  SamplingParams p;
  expect_distribution(p, log_probs({0.1, 0.2, 0.3, 0.4}), {0.1, 0.2, 0.3, 0.4});
}

TEST(RequestSamplerTest, TemperatureSharpensAndFlattens) {
  SamplingParams p;
  p.temperature = 0.5;  // p^2, renormalized
  expect_distribution(p, log_probs({0.2, 0.3, 0.5}), {0.04 / 0.38, 0.09 / 0.38, 0.25 / 0.38});
  p.temperature = 2.0;  // sqrt(p), renormalized
  const double a = std::sqrt(0.2), b = std::sqrt(0.3), c = std::sqrt(0.5);
  expect_distribution(p, log_probs({0.2, 0.3, 0.5}),
                      {a / (a + b + c), b / (a + b + c), c / (a + b + c)});
}

TEST(RequestSamplerTest, GreedyTakesTheLowestIdAmongTies) {
  SamplingParams p;
  p.temperature = 0;
  RequestSampler s = make(p, 4);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(s.sample(std::vector<float>{1, 3, 3, 2}, {}), 1);
  p.temperature = 1e-6;  // below vLLM's epsilon: greedy too
  RequestSampler t = make(p, 4);
  EXPECT_EQ(t.sample(std::vector<float>{1, 3, 3, 2}, {}), 1);
}

TEST(RequestSamplerTest, TopKKeepsTiesWithTheKthLogit) {
  SamplingParams p;
  p.top_k = 2;  // logits 3, 2, 2, 0: vLLM masks only logits below the 2nd largest
  const std::vector<float> l = {3, 2, 2, 0};
  const double e3 = std::exp(3.0), e2 = std::exp(2.0), z = e3 + 2 * e2;
  expect_distribution(p, l, {e3 / z, e2 / z, e2 / z, 0});
  p.top_k = 1;
  expect_distribution(p, l, {1, 0, 0, 0});
  p.top_k = -1;  // off
  const double all = z + 1;
  expect_distribution(p, l, {e3 / all, e2 / all, e2 / all, 1 / all});
}

TEST(RequestSamplerTest, TopPKeepsTheSmallestPrefixReachingP) {
  SamplingParams p;
  p.top_p = 0.6;  // 0.5 < 0.6 keeps the second token, 0.5 + 0.3 >= 0.6 drops the third
  expect_distribution(p, log_probs({0.3, 0.5, 0.2}), {0.375, 0.625, 0});
  p.top_p = 0.45;  // the top token alone reaches it
  expect_distribution(p, log_probs({0.3, 0.5, 0.2}), {0, 1, 0});
  p.top_p = 0.81;
  expect_distribution(p, log_probs({0.3, 0.5, 0.2}), {0.3, 0.5, 0.2});
}

TEST(RequestSamplerTest, TopPOnALargeFlatVocabularySortsBeyondTheFirstBlock) {
  // 4096 equal tokens: top_p 0.5 keeps exactly the 2048 lowest ids (ties to the lower id).
  SamplingParams p;
  p.top_p = 0.5;
  p.seed = 3;
  const std::vector<float> l(4096, 0.0f);
  RequestSampler s = make(p, 4096);
  int low = 0;
  for (int i = 0; i < 4000; ++i) low += s.sample(l, {}) < 2048;
  EXPECT_EQ(low, 4000);
}

TEST(RequestSamplerTest, MinPDropsTokensBelowAFractionOfTheTop) {
  SamplingParams p;
  p.min_p = 0.5;  // threshold 0.25: keeps 0.5 and 0.3
  expect_distribution(p, log_probs({0.2, 0.3, 0.5}), {0, 0.375, 0.625});
  p.min_p = 0.3;  // threshold 0.15: keeps everything
  expect_distribution(p, log_probs({0.2, 0.3, 0.5}), {0.2, 0.3, 0.5});
  p.temperature = 0.5;  // on the tempered distribution (0.04, 0.09, 0.25)/0.38 it drops 0.04
  expect_distribution(p, log_probs({0.2, 0.3, 0.5}), {0, 0.09 / 0.34, 0.25 / 0.34});
}

TEST(RequestSamplerTest, SameSeedSameTokensWhateverElseIsSampled) {
  std::vector<float> l(64);
  for (size_t i = 0; i < l.size(); ++i) l[i] = static_cast<float>(std::sin(i * 0.7) * 2);
  SamplingParams seeded;
  seeded.seed = 7;
  seeded.top_p = 0.9;
  SamplingParams other;
  other.temperature = 0.8;
  other.top_k = 20;

  RequestSampler alone = make(seeded, 64, /*fallback=*/1);
  Ids expected;
  for (int i = 0; i < 300; ++i) expected.push_back(alone.sample(l, {}));

  // Interleaved with other requests, differently many draws between ours, and another fallback.
  RequestSampler mine = make(seeded, 64, /*fallback=*/999);
  RequestSampler b = make(other, 64, /*fallback=*/5);
  SamplingParams other_seeded = other;
  other_seeded.seed = 7;
  RequestSampler c = make(other_seeded, 64);
  Ids got;
  for (int i = 0; i < 300; ++i) {
    for (int j = 0; j < i % 3; ++j) b.sample(l, {});
    c.sample(l, {});
    got.push_back(mine.sample(l, {}));
  }
  EXPECT_EQ(got, expected);

  // A different seed gives a different sequence; no seed takes the fallback.
  SamplingParams eight = seeded;
  eight.seed = 8;
  RequestSampler diff = make(eight, 64);
  Ids other_tokens;
  for (int i = 0; i < 300; ++i) other_tokens.push_back(diff.sample(l, {}));
  EXPECT_NE(other_tokens, expected);
  SamplingParams unseeded = seeded;
  unseeded.seed.reset();
  RequestSampler fallback = make(unseeded, 64, /*fallback=*/7);
  Ids via_fallback;
  for (int i = 0; i < 300; ++i) via_fallback.push_back(fallback.sample(l, {}));
  EXPECT_EQ(via_fallback, expected);
}

TEST(RequestSamplerTest, PresenceFrequencyAndRepetitionPenalizeWhatTheyShould) {
  // Token 0 unseen, 1 three times in the output, 2 once, 3 only in the prompt (negative logit),
  // 4 only in the prompt (positive logit).
  const std::vector<float> l = {2, 2, 2, -2, 4};
  const Ids prompt = {3, 4, 3};
  const Ids out = {1, 1, 2, 1};
  auto processed = [&](void (*set)(SamplingParams&)) {
    SamplingParams p;
    set(p);
    RequestSampler s = make(p, 5, 0, prompt);
    auto x = s.process(l, out);
    return std::vector<float>(x.begin(), x.end());
  };
  EXPECT_EQ(processed([](SamplingParams&) {}), l);
  EXPECT_EQ(processed([](SamplingParams& p) { p.presence_penalty = 0.5; }),
            (std::vector<float>{2, 1.5, 1.5, -2, 4}));
  EXPECT_EQ(processed([](SamplingParams& p) { p.frequency_penalty = 0.5; }),
            (std::vector<float>{2, 0.5, 1.5, -2, 4}));
  EXPECT_EQ(processed([](SamplingParams& p) { p.presence_penalty = -1; }),
            (std::vector<float>{2, 3, 3, -2, 4}));
  EXPECT_EQ(processed([](SamplingParams& p) { p.repetition_penalty = 2; }),
            (std::vector<float>{2, 1, 1, -4, 2}));
  EXPECT_EQ(processed([](SamplingParams& p) {
              p.repetition_penalty = 2;
              p.frequency_penalty = 1;
              p.presence_penalty = 0.5;
            }),
            (std::vector<float>{2, 1 - 3 - 0.5f, 1 - 1 - 0.5f, -4, 2}));

  // Greedy picks follow: repetition demotes the prompt's token 4 below the fresh token 0.
  SamplingParams greedy;
  greedy.temperature = 0;
  EXPECT_EQ(make(greedy, 5, 0, prompt).sample(l, out), 4);
  greedy.repetition_penalty = 2.5;
  EXPECT_EQ(make(greedy, 5, 0, prompt).sample(l, out), 0);
}

TEST(RequestSamplerTest, LogitBiasCanForceAToken) {
  SamplingParams p;
  p.logit_bias = {{5, 100.0f}, {0, -1000.0f}};  // clamped to [-100, 100] as vLLM's API does
  std::vector<float> l(8, 0.0f);
  l[0] = 20;
  RequestSampler s = make(p, 8);
  auto x = s.process(l, {});
  EXPECT_EQ(x[5], 100.0f);
  EXPECT_EQ(x[0], -80.0f);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(s.sample(l, {}), 5);
}

TEST(RequestSamplerTest, AllowedTokenIdsRestrictTheSupport) {
  SamplingParams p;
  p.allowed_token_ids = Ids{2, 4};
  const std::vector<float> l = log_probs({0.3, 0.3, 0.1, 0.2, 0.1});
  expect_distribution(p, l, {0, 0, 0.5, 0, 0.5});
  RequestSampler s = make(p, 5);
  auto x = s.process(l, {});
  EXPECT_EQ(x[0], kNegInf);
  EXPECT_EQ(x[2], l[2]);
}

TEST(RequestSamplerTest, MinTokensMasksStopIdsUntilReached) {
  SamplingParams p;
  p.temperature = 0;
  p.min_tokens = 2;
  const std::vector<float> l = {0, 5, 1};  // token 1 (the eos here) is the favourite
  RequestSampler s = make(p, 3, 0, {}, /*stop_ids=*/{1});
  EXPECT_EQ(s.sample(l, {}), 2);
  EXPECT_EQ(s.sample(l, Ids{2}), 2);
  EXPECT_EQ(s.sample(l, Ids{2, 2}), 1);
  EXPECT_EQ(s.process(l, Ids{2})[1], kNegInf);
}

TEST(RequestSamplerTest, EveryTokenMaskedIsAnInputError) {
  SamplingParams p;
  p.allowed_token_ids = Ids{1};
  p.min_tokens = 1;
  // Only the stop id allowed while min_tokens masks it: known before any step, refused at once.
  try {
    make(p, 3, 0, {}, {1});
    FAIL() << "accepted";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(),
                 "allowed_token_ids leaves no token to sample: each of its ids is a one-token bad "
                 "word or a stop token (eos or stop_token_ids, masked while fewer than "
                 "min_tokens=1 tokens were generated).");
  }
  // What only the logits show is found by the step.
  p.allowed_token_ids = Ids{1, 2};
  RequestSampler s = make(p, 3, 0, {}, {1});
  EXPECT_THROW(s.sample(std::vector<float>{0, 0, kNegInf}, {}), InputError);
  EXPECT_EQ(s.sample(std::vector<float>{0, 0, kNegInf}, Ids{2}), 1);
  EXPECT_THROW(make(p, 3, 0, {}, {3}), InputError);  // a stop id outside the vocabulary
  SamplingParams bias;
  bias.logit_bias = {{3, 1.0f}};
  EXPECT_THROW(make(bias, 3), InputError);  // validated: never an index out of range
}

// tool_choice enforcement: vocabulary 10, lead span 8 ... 9, choices {5 1 2} and {5 1 3}.
AnswerConstraint two_calls() {
  AnswerConstraint f;
  f.prefix_choices = {{5, 1, 2}, {5, 1, 3}};
  f.lead_open = 8;
  f.lead_close = 9;
  return f;
}

TEST(RequestSamplerTest, AnswerConstraintMasksToTheChoicesAfterTheLeadingSpan) {
  using F = RequestSampler;
  const AnswerConstraint f = two_calls();
  EXPECT_EQ(F::forced_next_tokens(f, {}), (Ids{5, 8}));  // the call, or thinking first
  EXPECT_EQ(F::forced_next_tokens(f, Ids{5}), (Ids{1}));
  EXPECT_EQ(F::forced_next_tokens(f, Ids{5, 1}), (Ids{2, 3}));  // either tool
  EXPECT_EQ(F::forced_next_tokens(f, Ids{5, 1, 3}), Ids{});     // whole: free from here
  EXPECT_EQ(F::forced_next_tokens(f, Ids{5, 1, 3, 7, 7}), Ids{});
  EXPECT_EQ(F::forced_next_tokens(f, Ids{8, 4, 4}), Ids{});  // thinking: free
  EXPECT_EQ(F::forced_next_tokens(f, Ids{8, 4, 9}), (Ids{5}));
  EXPECT_EQ(F::forced_next_tokens(f, Ids{8, 4, 9, 5, 1}), (Ids{2, 3}));
  AnswerConstraint inside = f;  // the prompt left the thought channel open
  inside.starts_inside_lead = true;
  EXPECT_EQ(F::forced_next_tokens(inside, {}), Ids{});
  EXPECT_EQ(F::forced_next_tokens(inside, Ids{4, 9}), (Ids{5}));
  AnswerConstraint no_lead = f;
  no_lead.lead_open = no_lead.lead_close = -1;
  EXPECT_EQ(F::forced_next_tokens(no_lead, {}), (Ids{5}));
  EXPECT_EQ(F::forced_next_tokens(no_lead, Ids{5, 1}), (Ids{2, 3}));

  // Sampling follows the mask whatever the logits favour, greedy or not.
  SamplingParams p;
  p.temperature = 0;
  p.answer_constraint = f;
  const std::vector<float> l = {9, 0, 0, 1, 0, 0, 0, 0, 0, 0};
  RequestSampler s = make(p, 10);
  EXPECT_EQ(s.sample(l, {}), 5);  // 5 and 8 tie at 0: the lower id
  EXPECT_EQ(s.sample(l, Ids{5}), 1);
  EXPECT_EQ(s.sample(l, Ids{5, 1}), 3);  // the better of the two tools
  EXPECT_EQ(s.sample(l, Ids{5, 1, 3}), 0);
  p.temperature = 1;
  RequestSampler hot = make(p, 10);
  for (int i = 0; i < 50; ++i) {
    const int32_t t = hot.sample(l, Ids{5, 1});
    EXPECT_TRUE(t == 2 || t == 3) << t;
  }
}

TEST(RequestSamplerTest, AnswerConstraintBadInputIsAnInputError) {
  SamplingParams p;
  p.answer_constraint = two_calls();
  p.answer_constraint->prefix_choices.push_back({12});
  const auto error_of = [](const SamplingParams& q) {
    try {
      make(q, 10);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error_of(p),
            "token_id(s) [12] in answer_constraint contain out-of-vocab token ids. Vocabulary "
            "size: 10");
  p.answer_constraint = two_calls();
  p.answer_constraint->prefix_choices.push_back({});
  EXPECT_EQ(error_of(p), "answer_constraint: every prefix choice needs at least one token");
  p.answer_constraint = two_calls();
  p.answer_constraint->lead_close = -1;
  EXPECT_EQ(error_of(p), "answer_constraint: lead_open and lead_close go together");
  p.answer_constraint = two_calls();
  p.answer_constraint->json_object = true;  // both kinds at once
  EXPECT_EQ(
      error_of(p),
      "answer_constraint: give prefix choices, json_object or a structured kind, one of them");
  p.answer_constraint = AnswerConstraint{};  // neither
  EXPECT_EQ(
      error_of(p),
      "answer_constraint: give prefix choices, json_object or a structured kind, one of them");
  // A mask that leaves nothing (allowed_token_ids against the forced call) is an InputError.
  p.answer_constraint = two_calls();
  p.allowed_token_ids = Ids{1, 2};
  RequestSampler s = make(p, 10);
  try {
    s.sample(std::vector<float>(10, 0.0f), {});
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(),
                 "no token can be sampled: allowed_token_ids, bad_words, min_tokens and the answer "
                 "constraint (tool_choice, response_format) mask every token");
  }
}

TEST(RequestSamplerTest, LogprobsAreOfTheRawDistributionPlusTheChosenToken) {
  const std::vector<float> l = {0, 1, 2, 3};
  const double lse = std::log(1 + std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  TokenLogprobs lp = RequestSampler::logprobs(l, 2, 0);
  ASSERT_EQ(lp.size(), 3u);
  EXPECT_NEAR(lp.at(3), 3 - lse, 1e-6);
  EXPECT_NEAR(lp.at(2), 2 - lse, 1e-6);
  EXPECT_NEAR(lp.at(0), 0 - lse, 1e-6);
  EXPECT_EQ(RequestSampler::logprobs(l, -1, 0).size(), 4u);  // -1: the whole vocabulary
  EXPECT_EQ(RequestSampler::logprobs(l, 0, 2).size(), 1u);
}

// ids: 0 <bos> 1 ▁ 2 a 3 b, then <0x00>..<0xFF>; no merges, so "ab" is two tokens.
Tokenizer tiny_tokenizer() { return testing::pieces_tokenizer({"<bos>", "\u2581", "a", "b"}, 1); }

TEST(RequestSamplerTest, BadWordsBanTheLastTokenOnlyAfterThePrefix) {
  const Tokenizer t = tiny_tokenizer();
  ASSERT_EQ(t.encode("ab", false, true), (Ids{2, 3}));
  SamplingParams p;
  p.bad_words = {"ab"};
  std::vector<float> l(260, 0.0f);
  RequestSampler s = make(p, 260, 0, {}, {}, &t);
  EXPECT_EQ(s.process(l, {})[3], 0.0f);
  EXPECT_EQ(s.process(l, Ids{3})[3], 0.0f);
  EXPECT_EQ(s.process(l, Ids{3, 2})[3], kNegInf);
  EXPECT_EQ(s.process(l, Ids{3, 2})[2], 0.0f);
  // A single-token bad word is always banned; leading whitespace is ignored as vLLM lstrips.
  p.bad_words = {" a"};
  RequestSampler single = make(p, 260, 0, {}, {}, &t);
  EXPECT_EQ(single.process(l, {})[2], kNegInf);
  EXPECT_EQ(single.process(l, Ids{3, 3})[2], kNegInf);
  // Greedy sampling then avoids completing the word.
  p.bad_words = {"ab"};
  p.temperature = 0;
  l[3] = 9;
  EXPECT_EQ(make(p, 260, 0, {}, {}, &t).sample(l, Ids{2}), 0);
  EXPECT_EQ(make(p, 260, 0, {}, {}, &t).sample(l, Ids{3}), 3);
}

TEST(RequestSamplerTest, BadWordsNeedATokenizerAndIdsInTheVocabulary) {
  SamplingParams p;
  p.bad_words = {"ab"};
  EXPECT_THROW(make(p, 260), InputError);
  const Tokenizer t = tiny_tokenizer();
  try {
    make(p, 3, 0, {}, {}, &t);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(),
                 "The model vocabulary size is 3, but the following tokens were specified as bad: "
                 "[3]. All token id values should be integers satisfying: 0 <= token_id <= 2.");
  }
}

TEST(RequestSamplerTest, BadWordsWithTheGemma4Vocabulary) {
  GS_REQUIRE_SHARED(shared);
  const Tokenizer t =
      Tokenizer::from_path(shared / "data/gemma4-tokenizer/ggml-vocab-gemma-4.gguf");
  const Ids plain = t.encode("Hello world", false, true);
  const Ids spaced = t.encode(" Hello world", false, true);
  ASSERT_EQ(plain.size(), 2u);
  ASSERT_EQ(spaced.size(), 2u);
  ASSERT_NE(plain[0], spaced[0]);
  ASSERT_EQ(plain[1], spaced[1]);  // "▁world" either way
  const int32_t world = plain[1];
  SamplingParams p;
  p.bad_words = {"Hello world"};
  RequestSampler s = make(p, static_cast<int>(t.vocab_size()), 0, {}, {}, &t);
  std::vector<float> l(t.vocab_size(), 0.0f);
  EXPECT_EQ(s.process(l, {})[world], 0.0f);
  EXPECT_EQ(s.process(l, Ids{plain[0]})[world], kNegInf);   // "Hello" then " world"
  EXPECT_EQ(s.process(l, Ids{spaced[0]})[world], kNegInf);  // " Hello" then " world"
  EXPECT_EQ(s.process(l, Ids{world})[world], 0.0f);         // " world" alone is fine
  // Seeded sampling on the full vocabulary never completes the word.
  p.seed = 11;
  p.top_k = 2;
  RequestSampler seeded = make(p, static_cast<int>(t.vocab_size()), 0, {}, {}, &t);
  l[world] = 10;
  l[spaced[0]] = 10;
  Ids out;
  for (int i = 0; i < 200; ++i) {
    out.push_back(seeded.sample(l, out));
    if (out.size() >= 2) {
      ASSERT_FALSE(out[out.size() - 2] == spaced[0] && out.back() == world);
    }
  }
}

}  // namespace
}  // namespace gemmaserve
