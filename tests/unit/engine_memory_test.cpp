// KV memory through the engine: sliding-window groups keep only the window, a prefix hit
// computes only the uncached tokens, and a cache too small for the load preempts and recomputes
// without changing any output.
#include <gtest/gtest.h>

#include "engine_test_support.h"

namespace gemmaserve::enginetest {
namespace {

constexpr int kSliding = static_cast<int>(AttentionType::kSliding);
constexpr int kFull = static_cast<int>(AttentionType::kFull);

EngineRequest greedy_request(const std::string& id, std::vector<int32_t> prompt, int max_tokens) {
  EngineRequest r;
  r.request_id = id;
  r.prompt_token_ids = std::move(prompt);
  r.params.temperature = 0;
  r.params.ignore_eos = true;
  r.params.max_tokens = max_tokens;
  r.params.logprobs = 1;
  return r;
}

std::vector<int32_t> prompt_of(int len, int salt) {
  std::vector<int32_t> p = {2};
  for (int i = 1; i < len; ++i) p.push_back(3 + (i * 31 + salt * 7) % 500);
  return p;
}

class SlidingWindowMemory : public ::testing::TestWithParam<const char*> {};

// After a prompt of 10 x W tokens (in one chunk or in chunks of 7), every step leaves the
// sliding group holding at most ceil(W / block) + 1 blocks while the full group holds them all.
TEST_P(SlidingWindowMemory, SlidingGroupHoldsOnlyTheWindow) {
  for (int block : {16, 4}) {
    for (int chunk : {0, 7}) {
      EngineArgs args = tiny_args(GetParam());
      args.block_size = block;
      args.long_prefill_token_threshold = chunk;
      auto engine = make_engine(args);
      const int window = engine->model_config().text.sliding_window;
      const int prompt_len = 10 * window;
      const int max_tokens = 8;
      std::vector<EngineStats> after_step;
      std::mutex mutex;
      std::condition_variable done;
      bool finished = false;
      engine->add_request(greedy_request("long", prompt_of(prompt_len, 1), max_tokens),
                          [&](const RequestOutput& out, const RequestOutputDelta&) {
                            // On the engine thread, between steps: the pools as the step left
                            // them (a finished request has already returned its blocks).
                            std::lock_guard<std::mutex> lock(mutex);
                            if (!out.finished) after_step.push_back(engine->stats());
                            finished = out.finished;
                            done.notify_all();
                          });
      std::unique_lock<std::mutex> lock(mutex);
      done.wait(lock, [&] { return finished; });
      const std::string where = std::string(GetParam()) + " block " + std::to_string(block) +
                                " chunk " + std::to_string(chunk);
      ASSERT_EQ(after_step.size(), static_cast<size_t>(max_tokens - 1)) << where;
      const int sliding_limit = (window + block - 1) / block + 1;
      for (size_t s = 0; s < after_step.size(); ++s) {
        EXPECT_LE(after_step[s].kv_blocks_in_use[kSliding], sliding_limit) << where << " " << s;
        EXPECT_GT(after_step[s].kv_blocks_in_use[kSliding], 0) << where;
        // Full attention keeps every computed token: the prompt and the s tokens fed back (the
        // token sampled in this step gets its slot when the next step schedules it).
        const int tokens = prompt_len + static_cast<int>(s);
        EXPECT_EQ(after_step[s].kv_blocks_in_use[kFull], (tokens + block - 1) / block) << where;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(GoldenModels, SlidingWindowMemory,
                         ::testing::Values("dense", "keqv", "moe"));

TEST(EngineMemory, PrefixHitComputesOnlyTheUncachedTokens) {
  auto engine = make_engine(tiny_args("dense"));  // blocks of 16
  const std::vector<int32_t> prompt = prompt_of(100, 2);
  const RunResult first = run_together(*engine, {greedy_request("a", prompt, 4)});
  EngineStats s = engine->stats();
  EXPECT_EQ(first.outputs[0].num_cached_tokens, 0);
  EXPECT_EQ(s.computed_tokens, 100u + 3u);  // the prompt, then 3 decodes (the 4th token is
                                            // sampled but never fed back)
  EXPECT_EQ(s.prefix_cache_hits, 0u);
  EXPECT_EQ(s.prompt_tokens, 100u);
  EXPECT_EQ(s.generation_tokens, 4u);

  // The same prompt: 6 full blocks (96 tokens) come from the cache; 4 prompt tokens are computed.
  const RunResult again = run_together(*engine, {greedy_request("b", prompt, 4)});
  const EngineStats s2 = engine->stats();
  EXPECT_EQ(again.outputs[0].num_cached_tokens, 96);
  EXPECT_EQ(s2.prefix_cache_hits - s.prefix_cache_hits, 96u);
  EXPECT_EQ(s2.prefix_cache_queries - s.prefix_cache_queries, 100u);
  EXPECT_EQ(s2.computed_tokens - s.computed_tokens, 4u + 3u);
  expect_same_outputs(first.outputs[0], again.outputs[0], "same prompt");

  // A prompt sharing its first 50 tokens: 3 full blocks hit, the other 70 - 48 are computed.
  std::vector<int32_t> other(prompt.begin(), prompt.begin() + 50);
  for (int i = 0; i < 20; ++i) other.push_back(400 + i);
  const RunResult shared = run_together(*engine, {greedy_request("c", other, 2)});
  const EngineStats s3 = engine->stats();
  EXPECT_EQ(shared.outputs[0].num_cached_tokens, 48);
  EXPECT_EQ(s3.computed_tokens - s2.computed_tokens, 22u + 1u);
  // A cache salt keeps tenants apart: the same prompt under another salt hits nothing, and
  // under the same salt again hits.
  EngineRequest salted = greedy_request("d", prompt, 2);
  salted.cache_salt = "tenant-a";
  const RunResult salted_first = run_together(*engine, {salted});
  EXPECT_EQ(salted_first.outputs[0].num_cached_tokens, 0);
  salted.request_id = "e";
  const RunResult salted_again = run_together(*engine, {salted});
  EXPECT_EQ(salted_again.outputs[0].num_cached_tokens, 96);

  EngineArgs no_cache = tiny_args("dense");
  no_cache.enable_prefix_caching = false;
  const RunResult fresh = run_together(*make_engine(no_cache), {greedy_request("c", other, 2)});
  expect_same_outputs(fresh.outputs[0], shared.outputs[0], "partial hit");
}

// 8 requests of up to 100 tokens in a cache that holds about one: the scheduler preempts
// (recompute), and every request still finishes with the output it gets in a roomy cache.
TEST(EngineMemory, TooSmallACacheForcesPreemptionWithoutChangingOutputs) {
  for (const char* model : {"dense", "moe"}) {
    EngineArgs roomy = tiny_args(model);
    roomy.max_model_len = 128;
    EngineArgs tight = roomy;
    tight.kv_cache_memory_bytes = 160 << 10;
    tight.long_prefill_token_threshold = 16;
    std::vector<EngineRequest> requests;
    for (int i = 0; i < 8; ++i) {
      std::string id = "p";
      id += std::to_string(i);  // not "p" + ...: GCC 12 warns falsely (-Wrestrict) at -O3
      requests.push_back(greedy_request(id, prompt_of(40 + 8 * i, 10 + i), 24));
    }
    const RunResult expected = run_together(*make_engine(roomy), requests);
    auto engine = make_engine(tight);
    const RunResult got = run_together(*engine, requests);
    const EngineStats s = engine->stats();
    EXPECT_GT(s.preemptions, 0u) << model;
    for (size_t i = 0; i < requests.size(); ++i) {
      expect_same_outputs(expected.outputs[i], got.outputs[i],
                          std::string(model) + " " + requests[i].request_id);
    }
    EXPECT_EQ(s.generation_tokens, 8u * 24u) << model;
    for (int b : s.kv_blocks_in_use) EXPECT_EQ(b, 0) << model;
  }
}

}  // namespace
}  // namespace gemmaserve::enginetest
