// The engine's request interface: streamed deltas, abort from other threads and from callbacks,
// n > 1 samples sharing their prompt's blocks, shutdown, and request errors.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "core/error.h"
#include "engine_test_support.h"

namespace gemmaserve::enginetest {
namespace {

EngineRequest request(const std::string& id, int prompt_len, int max_tokens) {
  EngineRequest r;
  r.request_id = id;
  r.prompt_token_ids.push_back(2);
  for (int i = 1; i < prompt_len; ++i) r.prompt_token_ids.push_back(3 + (i * 37) % 500);
  r.params.temperature = 0;
  r.params.ignore_eos = true;
  r.params.max_tokens = max_tokens;
  return r;
}

int blocks_in_use(const EngineStats& s) {
  int n = 0;
  for (int b : s.kv_blocks_in_use) n += b;
  return n;
}

TEST(EngineStreaming, DeltasConcatenateToTheFinalOutput) {
  auto engine = make_engine(tiny_args("dense"));
  SamplingParams p;
  p.temperature = 0.8;
  p.seed = 5;
  p.ignore_eos = true;
  p.logprobs = 3;
  p.prompt_logprobs = 2;
  p.n = 2;
  std::vector<EngineRequest> requests = varied_requests(6, engine->vocab_size(), 3, p, "d", 40);
  const RunResult run = run_together(*engine, requests);
  for (size_t i = 0; i < requests.size(); ++i) {
    const RequestOutput& final_out = run.outputs[i];
    const auto& deltas = run.deltas[i];
    ASSERT_FALSE(deltas.empty());
    ASSERT_TRUE(final_out.finished);
    // Exactly one finished delta, and it is the last.
    for (size_t d = 0; d + 1 < deltas.size(); ++d) EXPECT_FALSE(deltas[d].finished);
    EXPECT_TRUE(deltas.back().finished);
    int prompt_logprob_deltas = 0;
    for (size_t k = 0; k < final_out.outputs.size(); ++k) {
      std::vector<int32_t> ids;
      std::string text;
      std::vector<TokenLogprobs> logprobs;
      std::optional<std::string> reason;
      for (const RequestOutputDelta& d : deltas) {
        for (const CompletionDelta& c : d.outputs) {
          if (c.index != static_cast<int>(k)) continue;
          EXPECT_FALSE(reason.has_value()) << "a delta after the finishing one";
          ids.insert(ids.end(), c.token_ids.begin(), c.token_ids.end());
          text += c.text;
          logprobs.insert(logprobs.end(), c.logprobs.begin(), c.logprobs.end());
          if (c.finish_reason) reason = c.finish_reason;
        }
      }
      const CompletionOutput& o = final_out.outputs[k];
      EXPECT_EQ(ids, o.token_ids);
      EXPECT_EQ(text, o.text);
      EXPECT_EQ(logprobs, *o.logprobs);
      EXPECT_EQ(reason, o.finish_reason);
      EXPECT_EQ(o.finish_reason, "length");
      EXPECT_EQ(static_cast<int>(o.token_ids.size()), requests[i].params.max_tokens);
    }
    for (const RequestOutputDelta& d : deltas) {
      if (!d.prompt_logprobs) continue;
      ++prompt_logprob_deltas;
      EXPECT_EQ(*d.prompt_logprobs, *final_out.prompt_logprobs);
    }
    EXPECT_EQ(prompt_logprob_deltas, 1);
    EXPECT_EQ(final_out.prompt_logprobs->size(), requests[i].prompt_token_ids.size());
  }
}

// Waits until the callback has seen `n` deltas of a request.
struct DeltaCounter {
  std::mutex mutex;
  std::condition_variable changed;
  int deltas = 0;
  int finished = 0;
  int after_finish = 0;
  RequestOutput last;
  OutputCallback callback() {
    return [this](const RequestOutput& out, const RequestOutputDelta& delta) {
      std::lock_guard<std::mutex> lock(mutex);
      if (finished > 0) ++after_finish;
      ++deltas;
      if (delta.finished) ++finished;
      last = out;
      changed.notify_all();
    };
  }
  void wait_for(int n) {
    std::unique_lock<std::mutex> lock(mutex);
    changed.wait(lock, [&] { return deltas >= n; });
  }
  void wait_finished() {
    std::unique_lock<std::mutex> lock(mutex);
    changed.wait(lock, [&] { return finished > 0; });
  }
};

TEST(EngineStreaming, AbortFromAnotherThreadFreesBlocksAtOnce) {
  auto engine = make_engine(tiny_args("dense"));
  // The callback holds the engine thread at the third delta until the abort has returned, so
  // the request cannot finish first however the threads are scheduled.
  std::mutex mutex;
  std::condition_variable changed;
  bool reached = false, released = false;
  int finished = 0, after_finish = 0;
  RequestOutput last;
  engine->add_request(request("long", 40, 400),
                      [&](const RequestOutput& out, const RequestOutputDelta& delta) {
                        std::unique_lock<std::mutex> lock(mutex);
                        if (finished > 0) ++after_finish;
                        if (delta.finished) ++finished;
                        last = out;
                        if (out.outputs[0].token_ids.size() == 3 && !delta.finished) {
                          reached = true;
                          changed.notify_all();
                          changed.wait(lock, [&] { return released; });
                        }
                        changed.notify_all();
                      });
  {
    std::unique_lock<std::mutex> lock(mutex);
    changed.wait(lock, [&] { return reached; });
  }
  EXPECT_GT(blocks_in_use(engine->stats()), 0);
  EXPECT_TRUE(engine->abort("long"));
  // While the engine thread is still inside the callback, the blocks are back in the pools.
  const EngineStats after = engine->stats();
  EXPECT_EQ(blocks_in_use(after), 0);
  EXPECT_EQ(after.num_running, 0);
  EXPECT_EQ(after.num_waiting, 0);
  EXPECT_FALSE(engine->abort("long"));
  EXPECT_FALSE(engine->abort("never-added"));
  {
    std::unique_lock<std::mutex> lock(mutex);
    released = true;
    changed.notify_all();
    changed.wait(lock, [&] { return finished > 0; });
  }
  // A request after the abort proves the loop has gone past it; no late callbacks.
  run_together(*engine, {request("next", 5, 2)});
  std::lock_guard<std::mutex> lock(mutex);
  EXPECT_EQ(finished, 1);
  EXPECT_EQ(after_finish, 0);
  EXPECT_EQ(last.outputs[0].finish_reason, "abort");
  EXPECT_EQ(last.outputs[0].token_ids.size(), 3u);
  EXPECT_EQ(engine->stats().requests_aborted, 1u);
}

TEST(EngineStreaming, AbortAWaitingRequestAndAbortFromACallback) {
  EngineArgs args = tiny_args("dense");
  args.max_num_seqs = 1;  // the second request waits behind the first
  auto engine = make_engine(args);
  std::atomic<int> calls{0};
  RequestOutput self_aborted;
  std::mutex mutex;
  std::condition_variable done;
  int finished = 0;
  bool second_aborted = false;
  engine->add_request(request("first", 10, 300),
                      [&](const RequestOutput& out, const RequestOutputDelta& d) {
                        std::unique_lock<std::mutex> lock(mutex);
                        // Hold "first" (and so "second") until "second" was aborted.
                        done.wait(lock, [&] { return second_aborted; });
                        lock.unlock();
                        // Abort from the engine thread itself, inside the callback.
                        if (++calls == 3) {
                          EXPECT_TRUE(engine->abort("first"));
                        }
                        if (!d.finished) return;
                        lock.lock();
                        self_aborted = out;
                        ++finished;
                        done.notify_all();
                      });
  DeltaCounter waiting;
  engine->add_request(request("second", 10, 5), waiting.callback());
  EXPECT_TRUE(engine->abort("second"));  // waiting: max_num_seqs is 1 and "first" runs
  {
    std::lock_guard<std::mutex> lock(mutex);
    second_aborted = true;
    done.notify_all();
  }
  waiting.wait_finished();
  {
    std::lock_guard<std::mutex> lock(waiting.mutex);
    EXPECT_EQ(waiting.last.outputs[0].finish_reason, "abort");
  }
  std::unique_lock<std::mutex> lock(mutex);
  done.wait(lock, [&] { return finished > 0; });
  EXPECT_EQ(self_aborted.outputs[0].finish_reason, "abort");
  EXPECT_EQ(self_aborted.outputs[0].token_ids.size(), 3u);
  EXPECT_EQ(blocks_in_use(engine->stats()), 0);
}

TEST(EngineStreaming, DestructionFinishesEveryRequestExactlyOnce) {
  DeltaCounter running, waiting;
  {
    EngineArgs args = tiny_args("dense");
    args.max_num_seqs = 1;
    auto engine = make_engine(args);
    engine->add_request(request("long", 20, 400), running.callback());
    engine->add_request(request("queued", 20, 400), waiting.callback());
    running.wait_for(1);
  }
  for (DeltaCounter* c : {&running, &waiting}) {
    std::lock_guard<std::mutex> lock(c->mutex);
    EXPECT_EQ(c->finished, 1);
    EXPECT_EQ(c->after_finish, 0);
    // Aborted, unless the thread scheduler let it run all the way first.
    const CompletionOutput& o = c->last.outputs[0];
    EXPECT_TRUE(o.finish_reason == "abort" || o.token_ids.size() == 400u);
  }
}

// n > 1: samples 1..n-1 start once sample 0 computed the prompt, and take its full blocks from
// the prefix cache; sample k draws like a lone request seeded with seed + k.
TEST(EngineStreaming, NSamplesShareThePromptBlocksAndUseSeedPlusK) {
  auto engine = make_engine(tiny_args("dense"));
  EngineRequest r = request("n4", 40, 6);
  r.params.temperature = 1.0;
  r.params.n = 4;
  r.params.seed = 1234;
  const RunResult run = run_together(*engine, {r});
  const RequestOutput& out = run.outputs[0];
  ASSERT_EQ(out.outputs.size(), 4u);
  const EngineStats s = engine->stats();
  // Prompt of 40 tokens, blocks of 16: each of the 3 later samples finds 2 full blocks (32
  // tokens) and computes the other 8; every sample then decodes 5 more tokens.
  EXPECT_EQ(s.prefix_cache_hits, 3u * 32u);
  EXPECT_EQ(s.computed_tokens, 40u + 3u * 8u + 4u * 5u);
  EXPECT_EQ(s.generation_tokens, 4u * 6u);
  std::set<std::vector<int32_t>> distinct;
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(out.outputs[k].index, k);
    distinct.insert(out.outputs[k].token_ids);
    EngineRequest single = request("single" + std::to_string(k), 40, 6);
    single.params.temperature = 1.0;
    single.params.seed = 1234 + k;
    const RunResult alone = run_together(*engine, {single});
    EXPECT_EQ(alone.outputs[0].outputs[0].token_ids, out.outputs[k].token_ids) << "sample " << k;
  }
  EXPECT_GT(distinct.size(), 1u);  // different seeds, different draws
}

TEST(EngineStreaming, BadRequestsAreRefusedWithVllmMessagesAndAllOrNone) {
  auto engine = make_engine(tiny_args("dense"));
  const auto message = [&](EngineRequest r) {
    try {
      engine->add_request(std::move(r), nullptr);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EngineRequest bad = request("a", 5, 3);
  bad.prompt_token_ids[2] = 512;
  EXPECT_EQ(message(bad), "Token id 512 is out of vocabulary");
  EXPECT_EQ(message(request("b", 600, 3)),
            "This model's maximum context length is 512 tokens. However, your request has 600 "
            "input tokens. Please reduce the length of the input messages.");
  EXPECT_EQ(message(request("c", 500, 100)),
            "'max_tokens' or 'max_completion_tokens' is too large: 100. This model's maximum "
            "context length is 512 tokens and your request has 500 input tokens (100 > 512 - "
            "500).");
  EngineRequest empty = request("d", 1, 3);
  empty.prompt_token_ids.clear();
  EXPECT_EQ(message(empty), "The decoder prompt cannot be empty");
  EngineRequest bad_params = request("e", 5, 3);
  bad_params.params.temperature = -1;
  EXPECT_EQ(message(bad_params), "temperature must be non-negative, got -1.0.");

  // A batch with one bad request queues nothing, and its good ids stay free.
  std::vector<Submission> batch;
  batch.push_back({request("ok1", 5, 2), nullptr});
  batch.push_back({request("ok2", 5, 2), nullptr});
  batch.push_back({request("b", 600, 3), nullptr});
  EXPECT_THROW(engine->add_requests(std::move(batch)), InputError);
  EXPECT_EQ(engine->stats().num_waiting + engine->stats().num_running, 0);
  const RunResult ok = run_together(*engine, {request("ok1", 5, 2), request("ok2", 5, 2)});
  EXPECT_EQ(ok.outputs[1].outputs[0].token_ids.size(), 2u);
  // A live id cannot be reused.
  DeltaCounter counter;
  engine->add_request(request("live", 5, 300), counter.callback());
  EXPECT_EQ(message(request("live", 5, 3)), "request id 'live' is already in use");
  engine->abort("live");
  counter.wait_finished();  // its final callback must not outlive `counter`
}

}  // namespace
}  // namespace gemmaserve::enginetest
