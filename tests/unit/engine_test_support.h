// Shared by the engine tests: engines on the golden tiny checkpoints, running requests to the
// end (together or one at a time) and collecting their streamed deltas.
#pragma once

#include <gtest/gtest.h>

#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "core/logging.h"
#include "engine/engine.h"
#include "test_support.h"

namespace gemmaserve::enginetest {

inline std::filesystem::path golden_model(const std::string& name) {
  return ::gemmaserve::testing::source_dir() / "tests/data/golden/models" / name;
}

// Small, fast settings: a short max_model_len keeps the KV cache a few MiB.
inline EngineArgs tiny_args(const std::string& model_name) {
  EngineArgs a;
  a.model = golden_model(model_name).string();
  a.threads = 2;
  a.max_model_len = 512;
  a.kv_cache_memory_bytes = int64_t{16} << 20;
  a.show_progress = false;
  return a;
}

inline std::unique_ptr<Engine> make_engine(const EngineArgs& args) {
  log::set_level(log::Level::kWarning);
  return std::make_unique<Engine>(args);
}

struct RunResult {
  std::vector<RequestOutput> outputs;                   // in submission order
  std::vector<std::vector<RequestOutputDelta>> deltas;  // per request, in arrival order
  uint64_t steps = 0;                                   // engine steps the run took
};

// Submits all requests at once and waits until each has finished.
inline RunResult run_together(Engine& engine, std::vector<EngineRequest> requests) {
  struct State {
    std::mutex mutex;
    std::condition_variable done;
    size_t remaining = 0;
    RunResult result;
  } state;
  state.remaining = requests.size();
  state.result.outputs.resize(requests.size());
  state.result.deltas.resize(requests.size());
  const uint64_t steps_before = engine.stats().steps;
  std::vector<Submission> subs;
  for (size_t i = 0; i < requests.size(); ++i) {
    Submission s;
    s.request = std::move(requests[i]);
    s.callback = [&state, i](const RequestOutput& out, const RequestOutputDelta& delta) {
      std::lock_guard<std::mutex> lock(state.mutex);
      state.result.deltas[i].push_back(delta);
      if (!out.finished) return;
      state.result.outputs[i] = out;
      if (--state.remaining == 0) state.done.notify_all();
    };
    subs.push_back(std::move(s));
  }
  engine.add_requests(std::move(subs));
  std::unique_lock<std::mutex> lock(state.mutex);
  state.done.wait(lock, [&] { return state.remaining == 0; });
  state.result.steps = engine.stats().steps - steps_before;
  return std::move(state.result);
}

// Runs each request by itself, one after the other; steps add up.
inline RunResult run_alone(Engine& engine, const std::vector<EngineRequest>& requests) {
  RunResult all;
  for (const EngineRequest& r : requests) {
    RunResult one = run_together(engine, {r});
    all.outputs.push_back(std::move(one.outputs[0]));
    all.deltas.push_back(std::move(one.deltas[0]));
    all.steps += one.steps;
  }
  return all;
}

// `count` requests with prompts of varied lengths (1..max_len tokens, random ids) and varied
// max_tokens, ids "<prefix>0", "<prefix>1", ...
inline std::vector<EngineRequest> varied_requests(int count, int vocab, uint64_t seed,
                                                  const SamplingParams& base,
                                                  const std::string& prefix = "r",
                                                  int max_len = 80) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> token(3, vocab - 1);
  std::uniform_int_distribution<int> length(1, max_len);
  std::uniform_int_distribution<int> out_len(1, 12);
  std::vector<EngineRequest> requests;
  for (int i = 0; i < count; ++i) {
    EngineRequest r;
    r.request_id = prefix + std::to_string(i);
    r.prompt_token_ids.push_back(2);  // BOS
    const int len = length(rng);
    for (int j = 1; j < len; ++j) r.prompt_token_ids.push_back(token(rng));
    r.params = base;
    r.params.max_tokens = out_len(rng);
    requests.push_back(std::move(r));
  }
  return requests;
}

// Bitwise equality of two outputs' tokens, finish reasons and every logprob.
inline void expect_same_outputs(const RequestOutput& a, const RequestOutput& b,
                                const std::string& what) {
  ASSERT_EQ(a.outputs.size(), b.outputs.size()) << what;
  for (size_t k = 0; k < a.outputs.size(); ++k) {
    const CompletionOutput& x = a.outputs[k];
    const CompletionOutput& y = b.outputs[k];
    EXPECT_EQ(x.token_ids, y.token_ids) << what << " sample " << k;
    EXPECT_EQ(x.finish_reason, y.finish_reason) << what << " sample " << k;
    ASSERT_EQ(x.logprobs.has_value(), y.logprobs.has_value()) << what;
    if (x.logprobs) {
      ASSERT_EQ(x.logprobs->size(), y.logprobs->size()) << what;
      for (size_t i = 0; i < x.logprobs->size(); ++i) {
        const TokenLogprobs& p = (*x.logprobs)[i];
        const TokenLogprobs& q = (*y.logprobs)[i];
        ASSERT_EQ(p.size(), q.size()) << what << " position " << i;
        for (auto pi = p.begin(), qi = q.begin(); pi != p.end(); ++pi, ++qi) {
          EXPECT_EQ(pi->first, qi->first) << what << " position " << i;
          // Bitwise: memcmp, so even -0.0 vs 0.0 or NaN payloads would count.
          EXPECT_EQ(0, std::memcmp(&pi->second, &qi->second, sizeof(float)))
              << what << " position " << i << " id " << pi->first << ": " << pi->second << " vs "
              << qi->second;
        }
      }
    }
  }
  ASSERT_EQ(a.prompt_logprobs.has_value(), b.prompt_logprobs.has_value()) << what;
  if (a.prompt_logprobs) {
    ASSERT_EQ(a.prompt_logprobs->size(), b.prompt_logprobs->size()) << what;
    for (size_t i = 0; i < a.prompt_logprobs->size(); ++i) {
      const auto& p = (*a.prompt_logprobs)[i];
      const auto& q = (*b.prompt_logprobs)[i];
      ASSERT_EQ(p.has_value(), q.has_value()) << what << " prompt position " << i;
      if (!p) continue;
      ASSERT_EQ(p->size(), q->size()) << what << " prompt position " << i;
      for (auto pi = p->begin(), qi = q->begin(); pi != p->end(); ++pi, ++qi) {
        EXPECT_EQ(pi->first, qi->first) << what << " prompt position " << i;
        EXPECT_EQ(0, std::memcmp(&pi->second, &qi->second, sizeof(float)))
            << what << " prompt position " << i << " id " << pi->first;
      }
    }
  }
}

}  // namespace gemmaserve::enginetest
