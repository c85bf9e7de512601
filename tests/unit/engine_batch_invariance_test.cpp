// Batch invariance through the engine: a request's tokens and logprobs are bitwise the same
// alone or among 32 others, at any prefill chunk size, with or without a prefix-cache hit, while
// the batch really shares steps.
#include <gtest/gtest.h>

#include <optional>

#include "engine_test_support.h"

namespace gemmaserve::enginetest {
namespace {

class BatchInvariance : public ::testing::TestWithParam<const char*> {};

std::vector<EngineRequest> greedy_requests(int vocab) {
  SamplingParams p;
  p.temperature = 0;
  p.ignore_eos = true;
  p.logprobs = 5;
  std::vector<EngineRequest> requests =
      varied_requests(32, vocab, /*seed=*/7, p, "r", /*max_len=*/64);
  // Some ask for prompt logprobs: their prefill chunks return every row, and they skip the
  // prefix cache.
  for (size_t i = 0; i < requests.size(); i += 3) requests[i].params.prompt_logprobs = 3;
  return requests;
}

// The chunk size is the per-request cap of a step (--long-prefill-token-threshold): with a step
// budget cap instead, 32 requests at chunk size 1 would share one token per step.
TEST_P(BatchInvariance, GreedyTokensAndLogprobsMatchAloneAtEveryChunkSize) {
  EngineArgs args = tiny_args(GetParam());
  const std::vector<EngineRequest> requests = greedy_requests(make_engine(args)->vocab_size());
  std::optional<RunResult> reference;  // alone, in chunks of 64 (the first size run)
  for (int chunk : {64, 7, 1}) {
    const std::string where = std::string(GetParam()) + " chunk " + std::to_string(chunk);
    args.long_prefill_token_threshold = chunk;
    // Alone: one request at a time, no prefix cache.
    args.enable_prefix_caching = false;
    const RunResult alone = run_alone(*make_engine(args), requests);
    if (!reference) reference = alone;
    // Together: all 32 in one submission, first with a cold prefix cache ...
    args.enable_prefix_caching = true;
    std::unique_ptr<Engine> engine = make_engine(args);
    const RunResult together = run_together(*engine, requests);
    // (random prompts share no full block: no prefix hit, and nothing was preempted)
    EXPECT_EQ(engine->stats().prefix_cache_hits, 0u) << where;
    EXPECT_EQ(engine->stats().preemptions, 0u) << where;
    // ... then again with every prompt's full blocks cached (except prompt-logprob requests).
    const RunResult cached = run_together(*engine, requests);
    EXPECT_GT(engine->stats().prefix_cache_hits, 0u) << where;
    for (size_t i = 0; i < requests.size(); ++i) {
      const std::string& id = requests[i].request_id;
      expect_same_outputs(reference->outputs[i], alone.outputs[i], where + " alone " + id);
      expect_same_outputs(reference->outputs[i], together.outputs[i], where + " together " + id);
      expect_same_outputs(reference->outputs[i], cached.outputs[i], where + " prefix hit " + id);
    }
    // Really batched: the 32 share steps instead of taking turns ...
    EXPECT_LT(together.steps * 5, alone.steps) << where;
    // ... and really chunked: no request computed more than `chunk` tokens in a step.
    uint64_t longest = 0;
    for (const EngineRequest& r : requests) {
      const uint64_t chunks = (r.prompt_token_ids.size() + chunk - 1) / chunk;
      longest = std::max<uint64_t>(longest, chunks + r.params.max_tokens - 1);
    }
    EXPECT_GE(together.steps, longest) << where;
  }
}

TEST_P(BatchInvariance, SeededSamplingMatchesAlone) {
  EngineArgs args = tiny_args(GetParam());
  args.long_prefill_token_threshold = 7;
  std::unique_ptr<Engine> engine = make_engine(args);
  SamplingParams p;
  p.temperature = 0.9;
  p.top_k = 50;
  p.top_p = 0.95;
  p.ignore_eos = true;
  p.logprobs = 2;
  std::vector<EngineRequest> requests = varied_requests(32, engine->vocab_size(), 11, p, "s");
  for (size_t i = 0; i < requests.size(); ++i) requests[i].params.seed = 1000 + i;
  const RunResult alone = run_alone(*engine, requests);
  const RunResult together = run_together(*engine, requests);
  for (size_t i = 0; i < requests.size(); ++i) {
    expect_same_outputs(alone.outputs[i], together.outputs[i], requests[i].request_id);
  }
}

INSTANTIATE_TEST_SUITE_P(GoldenModels, BatchInvariance, ::testing::Values("dense", "keqv", "moe"));

}  // namespace
}  // namespace gemmaserve::enginetest
