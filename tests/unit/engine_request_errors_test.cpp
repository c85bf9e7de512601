// A step error of one request ends that request alone (finish_reason "error", its error in the
// output); its neighbours in the batch get the tokens they would have had alone and the engine
// goes on serving. What is known before scheduling is refused at add_request (issue 35, point 0).
#include <gtest/gtest.h>

#include <cstdlib>

#include "core/error.h"
#include "engine/fault_injection.h"
#include "engine_test_support.h"

namespace gemmaserve::enginetest {
namespace {

constexpr uint64_t kFaultySeed = 4242;  // GEMMASERVE_FAULT_SAMPLER_SEED in these tests

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() { ::unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

std::vector<EngineRequest> neighbours(const Engine& engine) {
  SamplingParams greedy;
  greedy.temperature = 0;
  greedy.ignore_eos = true;
  greedy.logprobs = 2;
  std::vector<EngineRequest> requests = varied_requests(3, engine.vocab_size(), 11, greedy, "n");
  SamplingParams seeded = greedy;
  seeded.temperature = 0.9;
  seeded.seed = 17;
  seeded.prompt_logprobs = 1;
  std::vector<EngineRequest> more = varied_requests(2, engine.vocab_size(), 12, seeded, "s");
  requests.insert(requests.end(), more.begin(), more.end());
  return requests;
}

EngineRequest faulty_request(const std::string& id, SamplingParams params) {
  EngineRequest r;
  r.request_id = id;
  r.prompt_token_ids = {2, 40, 41, 42, 43};
  params.max_tokens = 6;
  r.params = std::move(params);
  return r;
}

void expect_failed(const RequestOutput& out, const std::string& message, bool bad_request) {
  ASSERT_TRUE(out.finished);
  ASSERT_TRUE(out.error.has_value());
  EXPECT_EQ(out.error->message, message);
  EXPECT_EQ(out.error->bad_request, bad_request);
  for (const CompletionOutput& c : out.outputs) EXPECT_EQ(c.finish_reason, "error");
}

// The neighbours' outputs beside `faulty` equal their outputs alone, the faulty one failed with
// `message`, and the engine still runs a request afterwards.
void expect_isolated(Engine& engine, const EngineRequest& faulty, const std::string& message,
                     bool bad_request) {
  const std::vector<EngineRequest> others = neighbours(engine);
  const RunResult alone = run_alone(engine, others);
  std::vector<EngineRequest> batch = others;
  batch.insert(batch.begin() + 2, faulty);
  const RunResult together = run_together(engine, batch);
  expect_failed(together.outputs[2], message, bad_request);
  for (size_t i = 0; i < others.size(); ++i) {
    const size_t at = i < 2 ? i : i + 1;
    EXPECT_FALSE(together.outputs[at].error.has_value()) << others[i].request_id;
    expect_same_outputs(alone.outputs[i], together.outputs[at], others[i].request_id);
  }
  EXPECT_FALSE(engine.failure().has_value());
  EXPECT_EQ(engine.stats().requests_failed, 1u);
  const RunResult after = run_together(engine, {others[0]});
  expect_same_outputs(alone.outputs[0], after.outputs[0], "the request after the failure");
}

TEST(EngineRequestErrors, SamplerFaultEndsOnlyItsRequest) {
  if (!fault_injection_compiled()) GTEST_SKIP() << "needs -DGEMMASERVE_FAULT_INJECTION=ON";
  auto engine = make_engine(tiny_args("dense"));
  const ScopedEnv fault("GEMMASERVE_FAULT_SAMPLER_SEED", std::to_string(kFaultySeed));
  SamplingParams p;
  p.seed = kFaultySeed;
  p.n = 2;  // both samples end with the request
  expect_isolated(*engine, faulty_request("faulty", p), "injected sampler fault", false);
}

TEST(EngineRequestErrors, MasksLeavingNoTokenAtAStepEndOnlyTheirRequest) {
  auto engine = make_engine(tiny_args("dense"));
  // The forced answer may start with token 5 only, allowed_token_ids allows 6 only: known at the
  // first step, where the sampler finds nothing left.
  SamplingParams p;
  p.temperature = 0;
  p.allowed_token_ids = std::vector<int32_t>{6};
  p.answer_constraint.emplace();
  p.answer_constraint->prefix_choices = {{5, 7}};
  expect_isolated(*engine, faulty_request("masked", p),
                  "no token can be sampled: allowed_token_ids, bad_words, min_tokens and the "
                  "answer constraint (tool_choice, response_format) mask every token",
                  true);
}

TEST(EngineRequestErrors, AllowedTokensThatAreAllMaskedStopIdsAreRefusedAtAdd) {
  auto engine = make_engine(tiny_args("dense"));
  ASSERT_FALSE(engine->eos_token_ids().empty());
  EngineRequest r = faulty_request("eos-only", SamplingParams{});
  r.params.allowed_token_ids = std::vector<int32_t>{engine->eos_token_ids().front()};
  r.params.min_tokens = 1;
  r.params.max_tokens = 3;
  try {
    engine->add_request(r, [](const RequestOutput&, const RequestOutputDelta&) {});
    FAIL() << "accepted a request whose first draw has no token";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(),
                 "allowed_token_ids leaves no token to sample: each of its ids is a one-token bad "
                 "word or a stop token (eos or stop_token_ids, masked while fewer than "
                 "min_tokens=1 tokens were generated).");
  }
  // Without min_tokens the eos may be drawn: the request runs and stops at once.
  r.params.min_tokens = 0;
  const RunResult run = run_together(*engine, {r});
  EXPECT_EQ(run.outputs[0].outputs[0].finish_reason, "stop");
  EXPECT_FALSE(engine->failure().has_value());
}

}  // namespace
}  // namespace gemmaserve::enginetest
