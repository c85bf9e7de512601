// Data parallelism (--data-parallel-size): the router's choices (longest cached prefix, then
// vLLM's load score, then the lowest index), and two in-process replicas that both serve,
// agree with one engine, keep requests where their prefix is cached and abort on the right one.
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstdlib>
#include <mutex>

#include "core/error.h"
#include "engine/data_parallel/engine_replicas.h"
#include "engine/data_parallel/replica_router.h"
#include "engine/fault_injection.h"
#include "engine_test_support.h"
#include "server/shared/api_error.h"
#include "server/shared/engine_session.h"
#include "server/shared/metrics.h"
#include "server/shared/serving_common.h"

namespace gemmaserve::enginetest {
namespace {

TEST(DataParallelRouter, LongestCachedPrefixBeatsLoad) {
  const std::vector<ReplicaProbe> probes = {
      {.cached_tokens = 0, .num_running = 0},
      {.cached_tokens = 32, .num_running = 9, .num_waiting = 5},
      {.cached_tokens = 16}};
  EXPECT_EQ(choose_replica(probes), 1u);
}

TEST(DataParallelRouter, WithoutHitsTheLeastLoadedWinsWaitingWeighingFourTimesRunning) {
  // Scores: 3 running = 3; 1 waiting = 4; 2 running + 1 waiting = 6.
  const std::vector<ReplicaProbe> probes = {
      {.num_waiting = 1}, {.num_running = 3}, {.num_running = 2, .num_waiting = 1}};
  EXPECT_EQ(replica_load_score(probes[2]), 6);
  EXPECT_EQ(choose_replica(probes), 1u);
}

TEST(DataParallelRouter, TiesGoToTheLessLoadedThenTheLowestIndex) {
  const std::vector<ReplicaProbe> same_prefix = {{.cached_tokens = 16, .num_running = 2},
                                                 {.cached_tokens = 16, .num_running = 1}};
  EXPECT_EQ(choose_replica(same_prefix), 1u);
  const std::vector<ReplicaProbe> idle(3);
  EXPECT_EQ(choose_replica(idle), 0u);
  const std::vector<ReplicaProbe> equal = {{.num_running = 4}, {.num_waiting = 1}};
  EXPECT_EQ(choose_replica(equal), 0u);
}

TEST(DataParallelRouter, BadSizesAreRefusedBeforeAnythingStarts) {
  EngineArgs a = tiny_args("dense");
  a.data_parallel_size = 0;
  EXPECT_EQ(testing::input_error_of([&] { check_data_parallel_args(a); }),
            "--data-parallel-size must be at least 1, got 0");
  a.data_parallel_size = 2;
  a.tensor_parallel_size = 2;
  EXPECT_EQ(testing::input_error_of([&] { EngineReplicas r(a); }),
            "--data-parallel-size 2 with --tensor-parallel-size 2 is not supported: "
            "data-parallel replicas run in one process and cannot each lead their own "
            "tensor-parallel ranks yet");
}

TEST(DataParallelRouter, ThreadsAreSplitBetweenReplicas) {
  EngineArgs a = tiny_args("dense");
  a.data_parallel_size = 2;
  EXPECT_EQ(replica_engine_args(a, 1, 5).threads, 2);
  EXPECT_EQ(replica_engine_args(a, 1, 5).data_parallel_rank, 1);
  EXPECT_EQ(replica_engine_args(a, 0, 1).threads, 1);  // never none
}

// vLLM labels each DP engine's series engine="R": gauges from each replica's stats, latency
// histograms and finish counts from the replica that ran the request.
TEST(DataParallelRouter, MetricsRepeatEverySeriesPerReplica) {
  ServerMetrics m("m", 2);
  m.observe_e2e_latency(0.4, 1);
  m.count_finished("stop", 1);
  std::vector<EngineStats> stats(2);
  stats[0].num_running = 3;
  stats[1].kv_cache_usage = 0.25;
  const std::string text = m.render(stats);
  for (const char* line :
       {"vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 3.0\n",
        "vllm:num_requests_running{engine=\"1\",model_name=\"m\"} 0.0\n",
        "vllm:kv_cache_usage_perc{engine=\"1\",model_name=\"m\"} 0.25\n",
        "vllm:e2e_request_latency_seconds_count{engine=\"0\",model_name=\"m\"} 0\n",
        "vllm:e2e_request_latency_seconds_count{engine=\"1\",model_name=\"m\"} 1\n",
        "vllm:request_success_total{engine=\"1\",model_name=\"m\",finished_reason="
        "\"stop\"} 1.0\n"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << text;
  }
  EXPECT_EQ(text.find("# HELP vllm:num_requests_running"),
            text.rfind("# HELP vllm:num_requests_running"));  // one header per family
}

EngineArgs two_replicas() {
  log::set_level(log::Level::kWarning);
  EngineArgs a = tiny_args("dense");
  a.data_parallel_size = 2;
  return a;
}

SamplingParams greedy(int max_tokens) {
  SamplingParams p;
  p.temperature = 0;
  p.ignore_eos = true;
  p.max_tokens = max_tokens;
  return p;
}

TEST(DataParallelEngines, BothReplicasServeAndAnswerAsOneEngine) {
  log::set_level(log::Level::kWarning);
  LLM one(tiny_args("dense"));
  LLM two(two_replicas());
  ASSERT_EQ(two.replicas().size(), 2u);
  const SamplingParams p = greedy(4);
  std::vector<Prompt> prompts;
  for (const EngineRequest& r : varied_requests(6, one.vocab_size(), 5, p, "x", 40)) {
    prompts.push_back(Prompt::from_ids(r.prompt_token_ids));
  }
  const std::vector<RequestOutput> expected = one.generate(prompts, p);
  const std::vector<RequestOutput> got = two.generate(prompts, p);
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    expect_same_outputs(got[i], expected[i], "prompt " + std::to_string(i));
  }
  const std::vector<EngineStats> stats = two.replicas().stats();
  EXPECT_EQ(stats[0].requests_finished_length, 3u);
  EXPECT_EQ(stats[1].requests_finished_length, 3u);
  EXPECT_GT(stats[0].generation_tokens, 0u);
  EXPECT_GT(stats[1].generation_tokens, 0u);
}

// Waits for the final callbacks of requests submitted through EngineReplicas.
struct Finished {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<RequestOutput> outputs;
  OutputCallback callback() {
    return [this](const RequestOutput& out, const RequestOutputDelta& delta) {
      if (!delta.finished) return;
      std::lock_guard<std::mutex> lock(mutex);
      outputs.push_back(out);
      changed.notify_all();
    };
  }
  void wait_for(size_t count) {
    std::unique_lock<std::mutex> lock(mutex);
    changed.wait(lock, [&] { return outputs.size() >= count; });
  }
};

EngineRequest prompt_request(const std::string& id, std::vector<int32_t> ids, int max_tokens) {
  EngineRequest r;
  r.request_id = id;
  r.prompt_token_ids = std::move(ids);
  r.params = greedy(max_tokens);
  return r;
}

TEST(DataParallelEngines, ARequestGoesWhereItsPrefixIsCached) {
  EngineReplicas replicas(two_replicas());
  std::vector<int32_t> prompt = {2};
  for (int i = 0; i < 40; ++i) prompt.push_back(10 + i);  // two full blocks of 16
  Finished done;
  std::vector<Submission> first;
  first.push_back({prompt_request("a", prompt, 2), done.callback()});
  replicas.add_requests(std::move(first), {1});
  done.wait_for(1);

  const EngineRequest again = prompt_request("b", prompt, 2);
  const std::vector<ReplicaProbe> probes = replicas.probe(again);
  EXPECT_EQ(probes[0].cached_tokens, 0);
  EXPECT_EQ(probes[1].cached_tokens, 32);
  std::vector<int32_t> other = prompt;
  other[1] = 99;  // differs in the first block: no hit anywhere, both idle -> replica 0
  const std::vector<EngineRequest> both = {again, prompt_request("c", other, 2)};
  EXPECT_EQ(replicas.route(both), (std::vector<size_t>{1, 0}));

  std::vector<Submission> second;
  second.push_back({again, done.callback()});
  replicas.add_requests(std::move(second));
  done.wait_for(2);
  EXPECT_EQ(done.outputs[1].num_cached_tokens, 32);
  EXPECT_EQ(replicas.stats()[0].steps, 0u);  // replica 0 never ran
}

TEST(DataParallelEngines, AbortReachesTheRequestsReplica) {
  EngineReplicas replicas(two_replicas());
  Finished done;
  std::vector<Submission> s;
  s.push_back({prompt_request("long", {2, 5, 6, 7}, 400), done.callback()});
  replicas.add_requests(std::move(s), {1});
  EXPECT_TRUE(replicas.abort("long"));
  done.wait_for(1);
  EXPECT_EQ(done.outputs[0].outputs[0].finish_reason, "abort");
  EXPECT_FALSE(replicas.abort("long"));
  EXPECT_FALSE(replicas.abort("unknown"));
  EXPECT_EQ(replicas.stats()[1].requests_aborted, 1u);
  EXPECT_FALSE(replicas.failure().has_value());
}

TEST(DataParallelEngines, AReplicaRefusingItsShareQueuesNothingAnywhere) {
  EngineReplicas replicas(two_replicas());
  Finished done;
  std::vector<Submission> s;
  s.push_back({prompt_request("ok", {2, 5, 6}, 2), done.callback()});
  s.push_back({prompt_request("bad", {2, 99999}, 2), done.callback()});
  EXPECT_EQ(testing::input_error_of([&] {
              replicas.add_requests(std::move(s), {0, 1});
            }),
            "Token id 99999 is out of vocabulary");
  // Replica 0 took "ok" and had it taken back: its callback never runs, its id is free.
  EXPECT_FALSE(replicas.abort("ok"));
  std::vector<Submission> retry;
  retry.push_back({prompt_request("ok", {2, 5, 6}, 2), done.callback()});
  replicas.add_requests(std::move(retry));
  done.wait_for(1);
  ASSERT_EQ(done.outputs.size(), 1u);
  EXPECT_EQ(done.outputs[0].outputs[0].finish_reason, "length");
}

// A replica's failure is the error of the requests it aborted, not of answers another replica
// (or the same one, before it failed) finished.
TEST(DataParallelEngines, AFailedReplicaFailsOnlyTheRequestsItAborted) {
  if (!fault_injection_compiled()) {
    GTEST_SKIP() << "needs the fault hooks (-DGEMMASERVE_FAULT_INJECTION=ON, as scripts/test)";
  }
  ::setenv("GEMMASERVE_FAULT_ENGINE_STEP", "3", 1);
  ::setenv("GEMMASERVE_FAULT_ENGINE_REPLICA", "1", 1);
  {
    EngineReplicas replicas(two_replicas());
    ServerMetrics metrics("tiny", 2);
    // Replica 1 caches a prompt (its step 1), so the session below that shares it goes there.
    std::vector<int32_t> cached = {2};
    for (int i = 0; i < 40; ++i) cached.push_back(10 + i);
    Finished warm;
    std::vector<Submission> s;
    s.push_back({prompt_request("warm", cached, 1), warm.callback()});
    replicas.add_requests(std::move(s), {1});
    warm.wait_for(1);

    const auto submit = [](EngineSession& session, EngineRequest request) {
      std::vector<EngineRequest> one;
      one.push_back(std::move(request));
      session.submit(std::move(one));
    };
    // As a handler does: the final outputs, or the error that ended them.
    const auto collect = [](EngineSession& session) -> std::string {
      try {
        return *collect_final_outputs(session, 1)[0].outputs[0].finish_reason;
      } catch (const ApiError& e) {
        return std::to_string(e.status()) + " " + e.what();
      }
    };
    EngineSession answered(replicas, metrics);
    submit(answered, prompt_request("a", {2, 5, 6, 7}, 4));  // replica 0: never fails
    EngineSession failed(replicas, metrics);
    submit(failed, prompt_request("b", cached, 10));  // replica 1: its step 3 throws
    EXPECT_EQ(collect(failed),
              "500 The engine stopped after an error: engine 1: injected engine fault");
    // Collected after replica 1 failed, replica 0's answer stands (it was a 500 before).
    EXPECT_EQ(collect(answered), "length");
    EXPECT_EQ(replicas.failure(), "engine 1: injected engine fault");
    EXPECT_EQ(answered.engine_failure(), std::nullopt);
    EXPECT_EQ(failed.engine_failure(), "engine 1: injected engine fault");
    EXPECT_EQ(replicas.stats()[1].requests_aborted, 1u);  // "b" only: "warm" had finished
  }
  ::unsetenv("GEMMASERVE_FAULT_ENGINE_STEP");
  ::unsetenv("GEMMASERVE_FAULT_ENGINE_REPLICA");
}

}  // namespace
}  // namespace gemmaserve::enginetest
