// Golden logits through the engine: every reference prompt of a tiny model submitted together,
// prefilled in chunks of 7 and decoded in batches, gives Hugging Face's greedy tokens, and its
// prompt logprobs / logprobs differ between ids exactly as the reference logits do.
#include <gtest/gtest.h>

#include <cmath>

#include "engine_test_support.h"
#include "gemma4_golden_harness.h"

namespace gemmaserve::enginetest {
namespace {

constexpr double kTol = 1e-4;  // as the model's golden tests (logits vs HF float32)

// Checks that lp[id] - lp[ref_first] == ref_logit(id) - ref_logit(ref_first) for every
// reference id; returns the largest deviation.
double worst_difference(const TokenLogprobs& lp, const std::vector<std::pair<int, float>>& ref,
                        const std::string& where) {
  double worst = 0;
  const auto first = lp.find(ref[0].first);
  EXPECT_NE(first, lp.end()) << where << ": reference top id " << ref[0].first << " missing";
  if (first == lp.end()) return worst;
  for (const auto& [id, logit] : ref) {
    const auto it = lp.find(id);
    EXPECT_NE(it, lp.end()) << where << ": reference id " << id << " missing";
    if (it == lp.end()) continue;
    const double ours = static_cast<double>(it->second) - first->second;
    const double theirs = static_cast<double>(logit) - ref[0].second;
    worst = std::max(worst, std::fabs(ours - theirs));
    EXPECT_NEAR(ours, theirs, kTol) << where << " id " << id;
  }
  return worst;
}

// Our top ids by logprob equal the reference's, except for swaps within 1e-3 (float noise).
void expect_top_ids(const TokenLogprobs& lp, const std::vector<std::pair<int, float>>& ref,
                    const std::string& where) {
  std::vector<std::pair<float, int>> ours;
  for (const auto& [id, v] : lp) ours.emplace_back(-v, id);
  std::sort(ours.begin(), ours.end());
  for (size_t k = 0; k < ref.size() && k < ours.size(); ++k) {
    if (ours[k].second == ref[k].first) continue;
    const auto it = lp.find(ref[k].first);
    ASSERT_NE(it, lp.end()) << where;
    EXPECT_LT(std::fabs(-ours[k].first - it->second), 1e-3) << where << " rank " << k;
  }
}

class EngineGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(EngineGolden, ChunkedPrefillAndBatchedDecodeMatchTheReference) {
  const std::string model = GetParam();
  const golden::RefFile ref = golden::load_ref(::gemmaserve::testing::source_dir() /
                                               "tests/data/golden/ref" / (model + ".json"));
  EngineArgs args = tiny_args(model);
  args.long_prefill_token_threshold = 7;
  args.kv_cache_dtype = "f32";  // the reference ran in f32; auto would store bf16 K/V
  auto engine = make_engine(args);
  const int vocab = engine->vocab_size();

  std::vector<const golden::RefCase*> cases;
  for (const auto& c : ref.cases) cases.push_back(&c);
  for (const auto& c : ref.batch) cases.push_back(&c);
  std::vector<EngineRequest> requests;
  for (const golden::RefCase* c : cases) {
    EngineRequest r;
    r.request_id = c->name + std::to_string(requests.size());
    r.prompt_token_ids = c->prompt;
    r.params.temperature = 0;
    r.params.ignore_eos = true;
    r.params.max_tokens = static_cast<int>(c->greedy.size());
    r.params.logprobs = vocab;  // the whole distribution
    r.params.prompt_logprobs = vocab;
    requests.push_back(std::move(r));
  }
  const RunResult run = run_together(*engine, requests);
  EXPECT_LT(run.steps, 40u);  // batched: the longest prompt alone takes 11 chunks + 15 decodes

  double worst = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const golden::RefCase& c = *cases[i];
    const RequestOutput& out = run.outputs[i];
    const std::string where = model + "/" + requests[i].request_id;
    // Prompt logprobs: entry p + 1 comes from position p, whose reference top-5 we have.
    ASSERT_TRUE(out.prompt_logprobs.has_value()) << where;
    ASSERT_EQ(out.prompt_logprobs->size(), c.prompt.size()) << where;
    EXPECT_FALSE((*out.prompt_logprobs)[0].has_value());
    for (size_t p = 0; p + 1 < c.prompt.size(); ++p) {
      const auto& lp = (*out.prompt_logprobs)[p + 1];
      ASSERT_TRUE(lp.has_value());
      const std::string at = where + " prompt position " + std::to_string(p);
      worst = std::max(worst, worst_difference(*lp, c.top5[p], at));
      expect_top_ids(*lp, c.top5[p], at);
    }
    // Greedy tokens up to the first reference near-tie, where float noise may pick the other.
    const CompletionOutput& o = out.outputs[0];
    ASSERT_EQ(o.token_ids.size(), c.greedy.size()) << where;
    // The first generated token's distribution is the last prompt position's: all 512 logits.
    std::vector<std::pair<int, float>> last;
    const int top = golden::argmax(c.last_logits.data(), vocab);
    last.emplace_back(top, c.last_logits[top]);
    for (int id = 0; id < vocab; ++id) last.emplace_back(id, c.last_logits[id]);
    worst = std::max(worst, worst_difference((*o.logprobs)[0], last, where + " last position"));
    for (size_t s = 0; s < c.greedy.size(); ++s) {
      ASSERT_EQ(o.token_ids[s], c.greedy[s]) << where << " step " << s;
      if (c.greedy_margin[s] < 1e-3f) break;
      // Decoded in batches: the gap to the runner-up is the reference's top-1 - top-2 logit gap.
      const TokenLogprobs& lp = (*o.logprobs)[s];
      float runner_up = -INFINITY;
      for (const auto& [id, v] : lp) {
        if (id != o.token_ids[s]) runner_up = std::max(runner_up, v);
      }
      const double margin = static_cast<double>(lp.at(o.token_ids[s])) - runner_up;
      worst = std::max(worst, std::fabs(margin - c.greedy_margin[s]));
      EXPECT_NEAR(margin, c.greedy_margin[s], kTol) << where << " step " << s;
    }
  }
  std::printf("ENGINE GOLDEN %s: worst |dlogprob - dlogit| = %.2e\n", model.c_str(), worst);
}

INSTANTIATE_TEST_SUITE_P(GoldenModels, EngineGolden, ::testing::Values("dense", "keqv", "moe"));

}  // namespace
}  // namespace gemmaserve::enginetest
