// KV memory through the engine: sliding-window groups keep only the window, a prefix hit
// computes only the uncached tokens, and a cache too small for the load preempts and recomputes
// without changing any output.
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>

#include "core/error.h"
#include "engine_test_support.h"
#include "model/kv_cache.h"
#include "model/test_model_presets.h"

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
    roomy.kv_cache_dtype = "f32";  // the budget below is sized in f32 slots
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

// The same byte budget buys twice the tokens with bf16 K/V as with f32, and over 3x with fp8
// or q8_0 (their rows carry scales); the plan's block bytes are KvCache's real slot sizes.
TEST(EngineMemory, KvCacheDtypeSetsBytesPerTokenAndBlockCounts) {
  EngineArgs f32_args = tiny_args("dense");
  f32_args.kv_cache_dtype = "f32";
  const KvCachePlan f32 = make_engine(f32_args)->kv_cache_plan();
  EXPECT_EQ(f32.kv_dtype, cpu::KvDtype::kF32);
  struct Case {
    const char* flag;
    cpu::KvDtype dtype;
    double min_token_ratio;
  };
  for (const Case& c :
       {Case{"auto", cpu::KvDtype::kBF16, 2.0}, Case{"bf16", cpu::KvDtype::kBF16, 2.0},
        Case{"fp8", cpu::KvDtype::kFp8E4M3, 3.1}, Case{"q8_0", cpu::KvDtype::kQ8_0, 3.5}}) {
    EngineArgs args = tiny_args("dense");
    args.kv_cache_dtype = c.flag;
    auto engine = make_engine(args);
    const KvCachePlan plan = engine->kv_cache_plan();
    const TextConfig& text = engine->model_config().text;
    EXPECT_EQ(plan.kv_dtype, c.dtype) << c.flag;
    for (int t = 0; t < kNumAttentionTypes; ++t) {
      const auto type = static_cast<AttentionType>(t);
      EXPECT_EQ(
          plan.block_bytes[t],
          static_cast<int64_t>(KvCache::bytes_per_token(text, type, c.dtype)) * args.block_size)
          << c.flag;
    }
    EXPECT_LE(plan.total_bytes, *args.kv_cache_memory_bytes) << c.flag;
    EXPECT_GE(static_cast<double>(plan.num_tokens),
              c.min_token_ratio * static_cast<double>(f32.num_tokens) - 2 * args.block_size)
        << c.flag;
    EXPECT_LT(plan.bytes_per_token.ours, f32.bytes_per_token.ours / (c.min_token_ratio - 0.01))
        << c.flag;
    if (c.dtype == cpu::KvDtype::kBF16) {
      EXPECT_EQ(plan.bytes_per_token.naive * 2, f32.bytes_per_token.naive);
      for (int t = 0; t < kNumAttentionTypes; ++t) {
        EXPECT_GE(plan.num_blocks[t], 2 * f32.num_blocks[t]) << t;
        EXPECT_LE(plan.num_blocks[t], 2 * f32.num_blocks[t] + 2) << t;
      }
    }
    // It serves requests (every dtype's kernels behind the engine).
    const RunResult r = run_together(*engine, {greedy_request("a", prompt_of(60, 3), 5)});
    EXPECT_EQ(r.outputs[0].outputs[0].token_ids.size(), 5u) << c.flag;
  }
  EngineArgs bad = tiny_args("dense");
  bad.kv_cache_dtype = "fp8_e5m2";
  EXPECT_THROW(make_engine(bad), InputError);
}

// Bytes per token of one 4096-token sequence of each released geometry per KV dtype (blocks of
// 16; sliding groups hold only the window; KV-shared layers cost nothing), against the naive
// cache (every layer keeps every token) in the same dtype. fp8 and q8_0 rows carry scales.
TEST(EngineMemory, BytesPerTokenOfTheReleasedModelsPerDtype) {
  for (const char* name : {"e2b", "e4b", "31b", "26b-a4b"}) {
    const TextConfig config = parse_model_config(test_model_config(name), name).text;
    const KvBytesPerToken bf16 = kv_bytes_per_token_at(config, 4096, 16, cpu::KvDtype::kBF16);
    for (cpu::KvDtype dtype :
         {cpu::KvDtype::kF32, cpu::KvDtype::kBF16, cpu::KvDtype::kFp8E4M3, cpu::KvDtype::kQ8_0}) {
      const KvBytesPerToken b = kv_bytes_per_token_at(config, 4096, 16, dtype);
      std::cout << "[ bytes    ] " << name << " " << cpu::kv_dtype_name(dtype) << ": ours "
                << std::llround(b.ours) << " naive " << b.naive << "\n";
      const double ratio = b.ours / bf16.ours;
      switch (dtype) {
        case cpu::KvDtype::kF32:
          EXPECT_DOUBLE_EQ(ratio, 2.0) << name;
          break;
        case cpu::KvDtype::kFp8E4M3:
          EXPECT_LT(ratio, 0.51) << name;
          break;
        case cpu::KvDtype::kQ8_0:
          EXPECT_LT(ratio, 0.54) << name;
          break;
        default:
          EXPECT_DOUBLE_EQ(ratio, 1.0) << name;
          break;
      }
    }
  }
}

}  // namespace
}  // namespace gemmaserve::enginetest
