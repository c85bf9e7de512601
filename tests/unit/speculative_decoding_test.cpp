// Speculative decoding: --speculative-config parsing, the n-gram proposer, rejection sampling
// (the emitted tokens follow the target's distribution exactly: chi-square tests on a small
// vocabulary), structured outputs under drafts, and the engine: greedy outputs and logprobs
// bit-identical to decoding without speculation on the golden models, with drafts accepted and
// rejected, n > 1, stops and max_tokens in the middle of accepted runs.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/json_object_grammar.h"
#include "engine/request_sampler.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "engine/speculative/ngram_proposer.h"
#include "engine/speculative/rejection_sampler.h"
#include "engine/speculative/speculative_config.h"
#include "engine/structured/compiled_grammar.h"
#include "engine/structured/grammar_matcher.h"
#include "engine_test_support.h"
#include "io/safetensors.h"
#include "model/test_model_presets.h"
#include "server/shared/metrics.h"
#include "test_support.h"
#include "tokenizer/tokenizer.h"

namespace gemmaserve {
namespace {

using Ids = std::vector<int32_t>;

std::string config_error(const std::string& json) {
  return testing::input_error_of([&] { parse_speculative_config(json); });
}

TEST(SpeculativeConfig, NgramDefaultsAsVllm) {
  EXPECT_FALSE(parse_speculative_config("").has_value());
  auto c = parse_speculative_config(R"({"method": "ngram", "num_speculative_tokens": 3})");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->method, "ngram");
  EXPECT_EQ(c->num_speculative_tokens, 3);
  EXPECT_EQ(c->prompt_lookup_min, 5);
  EXPECT_EQ(c->prompt_lookup_max, 5);
  c = parse_speculative_config(
      R"({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4})");
  EXPECT_EQ(c->prompt_lookup_min, 4);
  c = parse_speculative_config(R"({"model": "[ngram]", "num_speculative_tokens": 2,
      "prompt_lookup_min": 2, "draft_tensor_parallel_size": 1})");
  EXPECT_EQ(c->method, "ngram");
  EXPECT_EQ(c->prompt_lookup_max, 2);
  c = parse_speculative_config(R"({"model": "/m/draft", "num_speculative_tokens": 5})");
  EXPECT_EQ(c->method, "draft_model");
  EXPECT_EQ(c->model, "/m/draft");
}

TEST(SpeculativeConfig, BadConfigsNameTheirFault) {
  EXPECT_EQ(config_error(R"({"method": "ngram", "num_speculative_tokens": 3, "k": 1})"),
            "--speculative-config: unknown key 'k'");
  EXPECT_EQ(config_error(R"({"method": "ngram"})"),
            "--speculative-config: 'num_speculative_tokens' is required");
  EXPECT_EQ(config_error(R"({"method": "ngram", "num_speculative_tokens": 0})"),
            "--speculative-config: 'num_speculative_tokens' must be in [1, 1024], got 0");
  EXPECT_EQ(config_error(R"({"method": "ngram", "num_speculative_tokens": "3"})"),
            "--speculative-config: 'num_speculative_tokens' must be an integer, got \"3\"");
  EXPECT_EQ(config_error(R"({"method": "eagle", "num_speculative_tokens": 3})"),
            "--speculative-config: method 'eagle' is not supported by gemmaserve (ngram, "
            "draft_model, mtp)");
  EXPECT_EQ(config_error(R"({"method": "magic", "num_speculative_tokens": 3})"),
            "--speculative-config: unknown method 'magic' (ngram, draft_model, mtp)");
  EXPECT_EQ(config_error(R"({"method": "ngram", "num_speculative_tokens": 3,
      "prompt_lookup_min": 4, "prompt_lookup_max": 2})"),
            "--speculative-config: prompt_lookup_min=4 must be <= prompt_lookup_max=2");
  EXPECT_EQ(config_error(R"({"num_speculative_tokens": 3})"),
            "--speculative-config: 'method' or 'model' is required");
  EXPECT_EQ(config_error(R"({"method": "draft_model", "num_speculative_tokens": 3})"),
            "--speculative-config: method 'draft_model' needs 'model' (the draft checkpoint "
            "folder)");
  EXPECT_EQ(config_error(R"({"model": "d", "num_speculative_tokens": 3,
      "draft_tensor_parallel_size": 2})"),
            "--speculative-config: 'draft_tensor_parallel_size' must be 1: the draft runs "
            "unsplit on rank 0");
  EXPECT_EQ(config_error(R"({"model": "d", "num_speculative_tokens": 3, "revision": "x"})"),
            "--speculative-config: 'revision' is a vLLM option gemmaserve does not support");
  EXPECT_EQ(config_error("[1]"), "--speculative-config: must be a JSON object, got [1]");
  EXPECT_EQ(config_error("{").substr(0, 38), "--speculative-config: not valid JSON (");
}

TEST(NgramProposer, LongestSuffixEarliestOccurrence) {
  // vLLM's docstring example: [4,2,3] has no match, [2,3] does; three tokens follow it.
  EXPECT_EQ(ngram_lookup(Ids{1, 2, 3, 4, 2, 3}, 2, 3, 4), (Ids{4, 2, 3}));
  EXPECT_EQ(ngram_lookup(Ids{1, 2, 3, 4, 2, 3}, 2, 3, 1), (Ids{4}));
  EXPECT_EQ(ngram_lookup(Ids{1, 2, 3, 4, 2, 3}, 3, 3, 4), Ids{});  // too short a match
  // The longest suffix wins over an earlier shorter one; among equals, the earliest.
  EXPECT_EQ(ngram_lookup(Ids{7, 3, 9, 5, 3, 8, 5, 3}, 1, 2, 2), (Ids{8, 5}));
  EXPECT_EQ(ngram_lookup(Ids{3, 9, 3, 8, 3}, 1, 2, 1), (Ids{9}));
  // A repeated token matches inside itself.
  EXPECT_EQ(ngram_lookup(Ids{5, 5, 5, 5}, 2, 3, 3), (Ids{5}));
  EXPECT_EQ(ngram_lookup(Ids{1}, 1, 1, 3), Ids{});
}

// ---- Rejection sampling: distributions ------------------------------------------------------

// Pearson's chi-square of `counts` (n draws) against probabilities `p`; cells with p == 0 must be
// empty (else +inf).
double chi_square(const std::map<int32_t, int>& counts, const std::vector<double>& p, int n) {
  double chi = 0;
  for (size_t id = 0; id < p.size(); ++id) {
    const auto it = counts.find(static_cast<int32_t>(id));
    const double observed = it == counts.end() ? 0 : it->second;
    if (p[id] == 0) {
      if (observed > 0) return std::numeric_limits<double>::infinity();
      continue;
    }
    const double expected = p[id] * n;
    chi += (observed - expected) * (observed - expected) / expected;
  }
  return chi;
}

constexpr int kVocab = 8;
// Critical chi-square values at p = 0.001 for up to 7 degrees of freedom (8 tokens).
constexpr double kChiCritical = 24.32;

// The target distribution over a small vocabulary the long way: many plain samples.
std::vector<double> empirical(const SamplingParams& p, const std::vector<float>& row,
                              const Ids& output, int n) {
  RequestSampler s(p, Ids{1, 2}, {}, nullptr, kVocab, 99);
  std::vector<double> freq(kVocab, 0.0);
  for (int i = 0; i < n; ++i) freq[static_cast<size_t>(s.sample(row, output))] += 1.0 / n;
  return freq;
}

std::vector<double> exact(const SamplingParams& p, const std::vector<float>& row,
                          const Ids& output) {
  RequestSampler s(p, Ids{1, 2}, {}, nullptr, kVocab, 0);
  const KeptDistribution d =
      kept_distribution(s.process(row, output), p.temperature, p.top_k, p.top_p, p.min_p);
  std::vector<double> out(kVocab, 0.0);
  for (int32_t id = 0; id < kVocab; ++id) out[static_cast<size_t>(id)] = d.probability(id);
  return out;
}

SamplingParams truncating_params() {
  SamplingParams p;
  p.temperature = 0.8;
  p.top_k = 6;
  p.top_p = 0.9;
  p.min_p = 0.02;
  p.repetition_penalty = 1.3;
  p.presence_penalty = 0.4;
  p.seed = 5;
  return p;
}

TEST(RejectionSampling, KeptDistributionIsWhatSamplingDrawsFrom) {
  const SamplingParams p = truncating_params();
  const std::vector<float> row = {1.0f, 2.0f, 0.5f, 1.7f, -1.0f, 1.9f, 0.2f, 1.2f};
  const std::vector<double> want = exact(p, row, Ids{3});
  const std::vector<double> got = empirical(p, row, Ids{3}, 200000);
  for (int id = 0; id < kVocab; ++id) EXPECT_NEAR(got[id], want[id], 0.005) << id;
  EXPECT_EQ(want[4], 0.0);  // cut by top_k / min_p
}

// The first emitted token follows p0; when the first draft was accepted, the second follows
// p1 given it. Drafts are fixed, so acceptance and the residual draws are both exercised.
TEST(RejectionSampling, OneHotDraftsKeepTheTargetDistribution) {
  const SamplingParams p = truncating_params();
  const std::vector<float> row0 = {1.0f, 2.0f, 0.5f, 1.7f, -1.0f, 1.9f, 0.2f, 1.2f};
  const std::vector<float> row1 = {0.3f, 1.1f, 1.4f, 0.9f, 1.5f, -0.5f, 1.0f, 0.1f};
  const std::vector<float> row2 = {1.5f, 0.0f, 0.2f, 1.0f, 0.7f, 1.2f, 0.8f, 1.1f};
  std::vector<float> rows(row0);
  rows.insert(rows.end(), row1.begin(), row1.end());
  rows.insert(rows.end(), row2.begin(), row2.end());
  const Ids output = {6};
  const Ids drafts = {5, 2};
  RequestSampler s(p, Ids{1, 2}, {}, nullptr, kVocab, 0);
  constexpr int kDraws = 100000;
  std::map<int32_t, int> first, second;
  int accepted_first = 0;
  for (int i = 0; i < kDraws; ++i) {
    const VerifiedDrafts v = verify_drafts(s, rows, kVocab, drafts, output);
    ASSERT_GE(v.tokens.size(), 1u);
    ASSERT_EQ(v.tokens.size(), static_cast<size_t>(v.num_accepted) + 1);
    ++first[v.tokens[0]];
    if (v.num_accepted >= 1) {
      ++accepted_first;
      ++second[v.tokens[1]];
    }
  }
  const std::vector<double> p0 = exact(p, row0, output);
  const std::vector<double> p1 = exact(p, row1, Ids{6, 5});
  EXPECT_LT(chi_square(first, p0, kDraws), kChiCritical);
  EXPECT_LT(chi_square(second, p1, accepted_first), kChiCritical);
  EXPECT_NEAR(static_cast<double>(accepted_first) / kDraws, p0[5], 0.01);
  // The test can fail: the same draws against the untruncated, unpenalised softmax.
  std::vector<double> plain(kVocab);
  double z = 0;
  for (int id = 0; id < kVocab; ++id) z += plain[id] = std::exp(row0[id] / 0.8);
  for (double& x : plain) x /= z;
  EXPECT_GT(chi_square(first, plain, kDraws), 10 * kChiCritical);
}

// A draft with a distribution of its own: accept min(1, p/q), else the residual max(0, p - q).
TEST(RejectionSampling, DraftDistributionKeepsTheTargetDistribution) {
  const SamplingParams p = truncating_params();
  const std::vector<float> row = {1.0f, 2.0f, 0.5f, 1.7f, -1.0f, 1.9f, 0.2f, 1.2f};
  RequestSampler s(p, Ids{1, 2}, {}, nullptr, kVocab, 0);
  const KeptDistribution target =
      kept_distribution(s.process(row, Ids{}), p.temperature, p.top_k, p.top_p, p.min_p);
  const std::vector<float> q = {0.3f, 0.05f, 0.1f, 0.05f, 0.2f, 0.1f, 0.1f, 0.1f};
  std::discrete_distribution<int32_t> draft(q.begin(), q.end());
  std::mt19937_64 rng(3);
  constexpr int kDraws = 100000;
  std::map<int32_t, int> counts;
  for (int i = 0; i < kDraws; ++i) {
    bool accepted = false;
    ++counts[accept_or_resample(target, draft(rng), q, rng, &accepted)];
  }
  std::vector<double> want(kVocab);
  for (int32_t id = 0; id < kVocab; ++id) want[id] = target.probability(id);
  EXPECT_LT(chi_square(counts, want, kDraws), kChiCritical);
}

TEST(RejectionSampling, GreedyAcceptsWhileTheDraftIsTheArgmax) {
  SamplingParams p;
  p.temperature = 0;
  RequestSampler s(p, Ids{1}, {}, nullptr, kVocab, 0);
  std::vector<float> rows(3 * kVocab, 0.0f);
  rows[0 * kVocab + 4] = 1;  // argmax 4
  rows[1 * kVocab + 6] = 1;  // argmax 6
  rows[2 * kVocab + 2] = 1;  // argmax 2
  VerifiedDrafts v = verify_drafts(s, rows, kVocab, Ids{4, 6}, Ids{});
  EXPECT_EQ(v.tokens, (Ids{4, 6, 2}));  // both accepted, then the bonus token
  EXPECT_EQ(v.num_accepted, 2);
  v = verify_drafts(s, rows, kVocab, Ids{4, 5}, Ids{});
  EXPECT_EQ(v.tokens, (Ids{4, 6}));  // the second replaced by the argmax
  EXPECT_EQ(v.num_accepted, 1);
  v = verify_drafts(s, rows, kVocab, Ids{3, 6}, Ids{});
  EXPECT_EQ(v.tokens, (Ids{4}));
  EXPECT_EQ(v.num_accepted, 0);
}

// ---- Structured outputs under drafts ---------------------------------------------------------

// Random drafts (often invalid) against a grammar: every answer still matches, as the draft
// positions are masked by the state after the drafts before them, and rejected drafts never
// reach the matcher's state.
TEST(RejectionSampling, StructuredOutputsHoldWithRandomDrafts) {
  const Tokenizer tok = testing::pieces_tokenizer(
      {"<bos>", "<eos>", "{", "}", "\"", "{\"", "\"}", "\":", "a", "1", "12", "ok", "yes", "no"},
      2);
  auto trie = std::make_shared<const JsonTokenTrie>(tok);
  structured::GrammarCompiler compiler;
  const std::string regex = "(yes|no)-[0-9a]{1,6}";
  const auto grammar = compiler.compile("regex", regex);
  const structured::Grammar check = structured::build_grammar("regex", regex);
  const int vocab = static_cast<int>(tok.vocab_size());
  int accepted = 0;
  for (int seed = 0; seed < 30; ++seed) {
    SamplingParams p;
    p.seed = static_cast<uint64_t>(seed);
    p.temperature = seed % 2 ? 1.0 : 0.0;
    p.answer_constraint = AnswerConstraint{};
    p.answer_constraint->structured_kind = "regex";
    p.answer_constraint->structured_spec = regex;
    RequestSampler s(p, {}, {1}, &tok, vocab, 0, trie, grammar);
    std::mt19937 rng(static_cast<uint32_t>(seed));
    std::normal_distribution<float> normal(0.0f, 2.0f);
    std::uniform_int_distribution<int32_t> any(0, vocab - 1);
    Ids out;
    while (out.size() < 200 && (out.empty() || out.back() != 1)) {
      Ids drafts;
      for (int i = 0; i < 3; ++i) drafts.push_back(any(rng));
      std::vector<float> rows(static_cast<size_t>(vocab) * 4);
      for (float& l : rows) l = normal(rng);
      for (int r = 0; r < 4; ++r) rows[static_cast<size_t>(r * vocab + 1)] += 3.0f;
      const VerifiedDrafts v = verify_drafts(s, rows, static_cast<size_t>(vocab), drafts, out);
      accepted += v.num_accepted;
      for (int32_t t : v.tokens) {
        out.push_back(t);
        if (t == 1) break;
      }
    }
    ASSERT_EQ(out.back(), 1) << "seed " << seed;
    std::string text;
    for (size_t i = 0; i + 1 < out.size(); ++i) text += trie->bytes(out[i]);
    structured::GrammarMatcher m(check);
    structured::GrammarState state = m.initial();
    EXPECT_TRUE(m.feed(&state, text) && state.accepting()) << "seed " << seed << ": " << text;
  }
  EXPECT_GT(accepted, 0);  // some random drafts were valid and taken
}

// ---- The scheduler's side ------------------------------------------------------------------

TextConfig full_attention_config() {
  TextConfig c;
  c.num_hidden_layers = 1;
  LayerSpec l;
  l.type = AttentionType::kFull;
  l.head_dim = 8;
  l.num_kv_heads = 1;
  c.layer_types.push_back(l.type);
  c.layers.push_back(l);
  return c;
}

TEST(SpeculativeScheduler, DraftsRideWithTheDecodeAndRollBack) {
  SchedulerConfig sc;
  sc.max_model_len = 64;
  sc.max_num_batched_tokens = 64;
  Scheduler s(sc, KvCacheManager(full_attention_config(), {0, 100}, 4, true));
  NewRequest r;
  r.request_id = "a";
  r.prompt_token_ids = {1, 2, 3, 4, 5, 6};
  r.max_tokens = 20;
  s.add_request(r);
  SchedulerOutput out = s.schedule();
  ASSERT_EQ(out.scheduled.size(), 1u);
  EXPECT_TRUE(out.scheduled[0].draft_tokens.empty());
  s.update(std::vector<StepResult>{{"a", 100, false}});
  s.set_draft_tokens("a", {7, 8, 9, 10, 11});
  out = s.schedule();
  ASSERT_EQ(out.scheduled.size(), 1u);
  EXPECT_EQ(Ids(out.scheduled[0].tokens.begin(), out.scheduled[0].tokens.end()), Ids{100});
  EXPECT_EQ(Ids(out.scheduled[0].draft_tokens.begin(), out.scheduled[0].draft_tokens.end()),
            (Ids{7, 8, 9, 10, 11}));
  EXPECT_EQ(out.scheduled[0].start_pos, 6);
  EXPECT_EQ(out.num_scheduled_tokens, 6);
  StepResult accepted{"a", 42, false};
  accepted.accepted_drafts = {7, 8};
  s.update(std::vector<StepResult>{accepted});
  const SchedulerRequest* a = s.request("a");
  EXPECT_EQ(a->token_ids, (Ids{1, 2, 3, 4, 5, 6, 100, 7, 8, 42}));
  EXPECT_EQ(a->num_computed_tokens, 9);  // the rejected drafts' K/V is dropped
  EXPECT_TRUE(a->draft_token_ids.empty());
  // Only blocks of real tokens are hashed: two full blocks (8 tokens) so far.
  EXPECT_EQ(a->block_hashes.size(), 2u);
  out = s.schedule();  // no drafts now: a plain decode from the kept position
  EXPECT_EQ(out.scheduled[0].start_pos, 9);
  EXPECT_EQ(Ids(out.scheduled[0].tokens.begin(), out.scheduled[0].tokens.end()), Ids{42});
  EXPECT_TRUE(out.scheduled[0].draft_tokens.empty());
  StepResult too_many{"a", 1, false};
  too_many.accepted_drafts = {3};
  EXPECT_THROW(s.update(std::vector<StepResult>{too_many}), std::logic_error);
  s.update(std::vector<StepResult>{{"a", 43, false}});
  // A second request finds the real tokens' full blocks in the prefix cache.
  NewRequest b = r;
  b.request_id = "b";
  b.prompt_token_ids = {1, 2, 3, 4, 5, 6, 100, 7, 8, 42, 43, 50};
  s.add_request(b);
  s.abort("a");
  out = s.schedule();
  ASSERT_EQ(out.scheduled.size(), 1u);
  EXPECT_EQ(out.scheduled[0].start_pos, 8);
}

TEST(SpeculativeScheduler, DraftsCappedByMaxTokensAndModelLength) {
  SchedulerConfig sc;
  sc.max_model_len = 12;
  sc.max_num_batched_tokens = 64;
  Scheduler s(sc, KvCacheManager(full_attention_config(), {0, 100}, 4, true));
  NewRequest r;
  r.request_id = "a";
  r.prompt_token_ids = {1, 2, 3, 4, 5, 6};
  r.max_tokens = 4;
  s.add_request(r);
  s.schedule();
  s.update(std::vector<StepResult>{{"a", 100, false}});
  s.set_draft_tokens("a", {7, 8, 9, 10, 11});
  SchedulerOutput out = s.schedule();
  // One output token so far: at most 4 - 1 - 1 = 2 drafts, so 2 + 1 tokens finish max_tokens.
  EXPECT_EQ(out.scheduled[0].draft_tokens.size(), 2u);
  StepResult all{"a", 9, false};
  all.accepted_drafts = {7, 8};
  const std::vector<FinishedRequest> done = s.update(std::vector<StepResult>{all});
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].reason, FinishReason::kLengthCapped);
  // max_model_len: 6 prompt tokens + 1 output leave room for 12 - 7 - 1 = 4 drafts.
  r.request_id = "b";
  r.max_tokens = std::nullopt;
  s.add_request(r);
  s.schedule();
  s.update(std::vector<StepResult>{{"b", 100, false}});
  s.set_draft_tokens("b", {7, 8, 9, 10, 11});
  out = s.schedule();
  EXPECT_EQ(out.scheduled[0].draft_tokens.size(), 4u);
}

TEST(SpeculativeMetrics, VllmCountersWithPositions) {
  EngineStats st;
  ServerMetrics plain("m");
  EXPECT_EQ(plain.render(st).find("spec_decode"), std::string::npos);  // off: not shown
  st.spec_decode_num_drafts = 4;
  st.spec_decode_num_draft_tokens = 12;
  st.spec_decode_num_accepted_tokens = 7;
  st.spec_decode_num_accepted_tokens_per_pos = {4, 2, 1};
  const std::string text = plain.render(st);
  const std::string l = R"(engine="0",model_name="m")";
  for (const std::string& line :
       {"vllm:spec_decode_num_drafts_total{" + l + "} 4.0",
        "vllm:spec_decode_num_draft_tokens_total{" + l + "} 12.0",
        "vllm:spec_decode_num_accepted_tokens_total{" + l + "} 7.0",
        "vllm:spec_decode_num_accepted_tokens_per_pos_total{" + l + R"(,position="0"} 4.0)",
        "vllm:spec_decode_num_accepted_tokens_per_pos_total{" + l + R"(,position="2"} 1.0)",
        std::string("# TYPE vllm:spec_decode_num_drafts_total counter")}) {
    EXPECT_NE(text.find(line + "\n"), std::string::npos) << line << "\n" << text;
  }
}

}  // namespace

// ---- The engine -----------------------------------------------------------------------------

namespace enginetest {
namespace {

class SpeculativeEngine : public ::testing::TestWithParam<const char*> {};

// Mixed greedy requests: random prompts and repetitive ones (the n-gram proposer's case), with
// logprobs and varied lengths.
std::vector<EngineRequest> mixed_requests(int vocab) {
  SamplingParams p;
  p.temperature = 0;
  p.ignore_eos = true;
  p.logprobs = 3;
  std::vector<EngineRequest> requests = varied_requests(10, vocab, 21, p, "r", 40);
  for (int i = 0; i < 6; ++i) {
    EngineRequest r;
    r.request_id = "rep" + std::to_string(i);
    r.prompt_token_ids = {2};
    for (int rep = 0; rep < 6; ++rep) {
      for (int j = 0; j < 3 + i; ++j) r.prompt_token_ids.push_back(10 + 7 * j + i);
    }
    r.params = p;
    r.params.max_tokens = 20 + 3 * i;
    requests.push_back(std::move(r));
  }
  // n > 1 cannot be greedy (vLLM refuses it); top_k 1 makes the samples deterministic.
  for (size_t i : {3, 11}) {
    requests[i].params.n = static_cast<int>(i % 4);
    requests[i].params.temperature = 1.0;
    requests[i].params.top_k = 1;
  }
  return requests;
}

TEST_P(SpeculativeEngine, GreedyNgramIsBitIdenticalToPlainDecoding) {
  EngineArgs args = tiny_args(GetParam());
  const std::vector<EngineRequest> requests = mixed_requests(make_engine(args)->vocab_size());
  const RunResult plain = run_together(*make_engine(args), requests);
  for (int k : {1, 3, 6}) {
    args.speculative_config = R"({"method": "ngram", "num_speculative_tokens": )" +
                              std::to_string(k) + R"(, "prompt_lookup_min": 1,
        "prompt_lookup_max": 3})";
    std::unique_ptr<Engine> engine = make_engine(args);
    const RunResult spec = run_together(*engine, requests);
    const RunResult alone = run_alone(*engine, requests);
    for (size_t i = 0; i < requests.size(); ++i) {
      const std::string where =
          std::string(GetParam()) + " k=" + std::to_string(k) + " " + requests[i].request_id;
      expect_same_outputs(plain.outputs[i], spec.outputs[i], where);
      expect_same_outputs(plain.outputs[i], alone.outputs[i], where + " alone");
    }
    const EngineStats s = engine->stats();
    EXPECT_GT(s.spec_decode_num_drafts, 0u);
    EXPECT_GT(s.spec_decode_num_accepted_tokens, 0u) << "nothing accepted: the test is weak";
    EXPECT_LT(s.spec_decode_num_accepted_tokens, s.spec_decode_num_draft_tokens)
        << "nothing rejected: rollback untested";
    ASSERT_EQ(s.spec_decode_num_accepted_tokens_per_pos.size(), static_cast<size_t>(k));
    uint64_t sum = 0;
    for (uint64_t a : s.spec_decode_num_accepted_tokens_per_pos) sum += a;
    EXPECT_EQ(sum, s.spec_decode_num_accepted_tokens);
    // Fewer steps than tokens: drafts were taken several at a time.
    EXPECT_LT(spec.steps, plain.steps);
    // Every block went back.
    for (int t = 0; t < kNumAttentionTypes; ++t) EXPECT_EQ(s.kv_blocks_in_use[t], 0);
  }
}

// max_tokens and stop token ids that fall inside an accepted run cut it there.
TEST_P(SpeculativeEngine, StopsInsideAcceptedRunsCutThere) {
  EngineArgs args = tiny_args(GetParam());
  std::vector<EngineRequest> requests = mixed_requests(make_engine(args)->vocab_size());
  const RunResult plain = run_together(*make_engine(args), requests);
  // Each request stops at the token its plain output had at position 5 (if any).
  for (size_t i = 0; i < requests.size(); ++i) {
    const Ids& toks = plain.outputs[i].outputs[0].token_ids;
    requests[i].params.n = 1;
    if (toks.size() > 5) requests[i].params.stop_token_ids = {toks[5]};
    requests[i].params.max_tokens = std::min(requests[i].params.max_tokens, 9);
  }
  const RunResult cut = run_together(*make_engine(args), requests);
  args.speculative_config =
      R"({"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_min": 1})";
  const RunResult spec = run_together(*make_engine(args), requests);
  for (size_t i = 0; i < requests.size(); ++i) {
    expect_same_outputs(cut.outputs[i], spec.outputs[i], requests[i].request_id);
  }
}

// Seeded sampling with speculation: valid outputs of the right lengths (the distribution is
// checked above on a small vocabulary).
TEST_P(SpeculativeEngine, SampledRequestsFinish) {
  EngineArgs args = tiny_args(GetParam());
  args.speculative_config = R"({"method": "ngram", "num_speculative_tokens": 4,
      "prompt_lookup_min": 1, "prompt_lookup_max": 2})";
  std::unique_ptr<Engine> engine = make_engine(args);
  std::vector<EngineRequest> requests = mixed_requests(engine->vocab_size());
  for (EngineRequest& r : requests) {
    r.params.temperature = 0.7;
    r.params.top_k = 20;
    r.params.seed = 3;
  }
  const RunResult spec = run_together(*engine, requests);
  for (size_t i = 0; i < requests.size(); ++i) {
    for (const CompletionOutput& c : spec.outputs[i].outputs) {
      EXPECT_EQ(static_cast<int>(c.token_ids.size()), requests[i].params.max_tokens);
      EXPECT_EQ(c.logprobs->size(), c.token_ids.size());
    }
  }
}

// A draft model: the target itself (every draft accepted: the engine is batch invariant, so
// the draft's argmax is the target's) and another random model (many rejected).
TEST_P(SpeculativeEngine, DraftModelGreedyIsBitIdenticalToPlainDecoding) {
  EngineArgs args = tiny_args(GetParam());
  const std::vector<EngineRequest> requests = mixed_requests(make_engine(args)->vocab_size());
  const RunResult plain = run_together(*make_engine(args), requests);
  const std::string other = std::string(GetParam()) == "keqv" ? "dense" : "keqv";
  for (const std::string& draft : {std::string(GetParam()), other}) {
    args.speculative_config =
        R"({"model": ")" + golden_model(draft).string() + R"(", "num_speculative_tokens": 3})";
    std::unique_ptr<Engine> engine = make_engine(args);
    const RunResult spec = run_together(*engine, requests);
    for (size_t i = 0; i < requests.size(); ++i) {
      expect_same_outputs(
          plain.outputs[i], spec.outputs[i],
          std::string(GetParam()) + " draft " + draft + " " + requests[i].request_id);
    }
    const EngineStats s = engine->stats();
    EXPECT_GT(s.spec_decode_num_draft_tokens, 0u);
    if (draft == GetParam()) {
      EXPECT_EQ(s.spec_decode_num_accepted_tokens, s.spec_decode_num_draft_tokens);
      EXPECT_LT(spec.steps * 2, plain.steps);
    } else {
      EXPECT_LT(s.spec_decode_num_accepted_tokens, s.spec_decode_num_draft_tokens);
    }
    for (int t = 0; t < kNumAttentionTypes; ++t) EXPECT_EQ(s.kv_blocks_in_use[t], 0);
  }
}

// Stop strings on the trained demo model (it has a tokenizer): a stop inside an accepted run
// cuts the text and the tokens where plain decoding stops.
TEST(SpeculativeEngineDemo, StopStringsCutAcceptedRunsAsPlainDecoding) {
  EngineArgs args = tiny_args("dense");
  args.model = (testing::source_dir() / "models/gemma4-demo").string();
  std::unique_ptr<Engine> plain_engine = make_engine(args);
  EngineRequest r;
  r.request_id = "d";
  // The second answer repeats the first, which the n-gram drafter finds in the prompt.
  r.prompt_token_ids = plain_engine->encode_prompt(
      "<|turn>user\nHello<turn|>\n<|turn>model\nI am a tiny demo model. I can add and subtract "
      "two-digit numbers, name capitals, and check the weather with a tool, thinking first if "
      "asked. Try: What is 47 + 38?<turn|>\n<|turn>user\nHi<turn|>\n<|turn>model\n");
  r.params.temperature = 0;
  r.params.ignore_eos = true;
  r.params.max_tokens = 40;
  r.params.logprobs = 1;
  const RunResult free_run = run_together(*plain_engine, {r});
  const std::string text = free_run.outputs[0].outputs[0].text;
  ASSERT_GT(text.size(), 12u) << text;
  std::vector<EngineRequest> requests;
  for (const std::string& stop :
       {text.substr(4, 3), text.substr(9, 2), text.substr(text.size() - 3, 2)}) {
    EngineRequest q = r;
    q.request_id = "s" + std::to_string(requests.size());
    q.params.stop = {stop};
    q.params.include_stop_str_in_output = requests.size() == 1;
    requests.push_back(std::move(q));
  }
  const RunResult plain = run_together(*plain_engine, requests);
  args.speculative_config =
      R"({"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_min": 2})";
  std::unique_ptr<Engine> engine = make_engine(args);
  const RunResult spec = run_together(*engine, requests);
  for (size_t i = 0; i < requests.size(); ++i) {
    expect_same_outputs(plain.outputs[i], spec.outputs[i], requests[i].request_id);
    EXPECT_EQ(plain.outputs[i].outputs[0].text, spec.outputs[i].outputs[0].text);
    EXPECT_EQ(plain.outputs[i].outputs[0].stop_reason_text,
              spec.outputs[i].outputs[0].stop_reason_text);
    EXPECT_EQ(spec.outputs[i].outputs[0].finish_reason, "stop") << requests[i].request_id;
  }
  EXPECT_GT(engine->stats().spec_decode_num_accepted_tokens, 0u);
}

TEST(SpeculativeEngineErrors, MtpNeedsTheDrafterCheckpoint) {
  EngineArgs args = tiny_args("dense");
  args.speculative_config = R"({"method": "mtp", "num_speculative_tokens": 2})";
  EXPECT_EQ(testing::input_error_of([&] { make_engine(args); }),
            "--speculative-config: method 'mtp' needs 'model' (the Gemma 4 assistant drafter's "
            "checkpoint folder)");
}

void write_test_model(const TestModelSpec& spec, const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  std::vector<TensorSpec> specs;
  for (const TestTensor& t : spec.tensors) specs.push_back(t.spec);
  write_safetensors(dir, specs, plan_single_file(specs, {{"format", "pt"}}),
                    [&](size_t i, int64_t first, int64_t count, std::byte* dst) {
                      fill_test_tensor(spec.tensors[i], 5, first, count, dst);
                    });
  std::ofstream(dir / "config.json") << spec.config.dump(2);
}

// The MTP assistant drafter (random weights) over the target's own KV cache: greedy output
// bit-identical to plain decoding, drafts both accepted and rejected. The drafter's checkpoint
// given as `model` is recognised by its model_type.
TEST(SpeculativeEngineMtp, GreedyIsBitIdenticalToPlainDecoding) {
  testing::TempDir dir;
  write_test_model(make_test_model_spec("tiny", DType::kBF16), dir.path() / "target");
  write_test_model(make_test_assistant_spec("tiny", DType::kF32), dir.path() / "assistant");
  EngineArgs args;
  args.model = (dir.path() / "target").string();
  args.threads = 2;
  args.max_model_len = 256;
  args.kv_cache_memory_bytes = int64_t{16} << 20;
  args.show_progress = false;
  SamplingParams p;
  p.temperature = 0;
  p.ignore_eos = true;
  p.logprobs = 2;
  std::vector<EngineRequest> requests;
  for (int i = 0; i < 4; ++i) {
    EngineRequest r;
    r.request_id = "m" + std::to_string(i);
    r.prompt_token_ids = {2};
    for (int j = 0; j < 5 + 7 * i; ++j) r.prompt_token_ids.push_back(100 + (j * 37 + i) % 50);
    r.params = p;
    r.params.max_tokens = 10 + 3 * i;
    requests.push_back(std::move(r));
  }
  const RunResult plain = run_together(*make_engine(args), requests);
  for (const char* config : {R"({"method": "mtp", "model": "%", "num_speculative_tokens": 3})",
                             R"({"model": "%", "num_speculative_tokens": 2})"}) {
    args.speculative_config = config;
    args.speculative_config.replace(args.speculative_config.find('%'), 1,
                                    (dir.path() / "assistant").string());
    std::unique_ptr<Engine> engine = make_engine(args);
    const RunResult spec = run_together(*engine, requests);
    for (size_t i = 0; i < requests.size(); ++i) {
      expect_same_outputs(plain.outputs[i], spec.outputs[i], requests[i].request_id);
    }
    const EngineStats s = engine->stats();
    EXPECT_GT(s.spec_decode_num_draft_tokens, 0u) << config;
    EXPECT_LT(s.spec_decode_num_accepted_tokens, s.spec_decode_num_draft_tokens) << config;
  }
}

INSTANTIATE_TEST_SUITE_P(GoldenModels, SpeculativeEngine,
                         ::testing::Values("dense", "keqv", "moe"));

}  // namespace
}  // namespace enginetest
}  // namespace gemmaserve
