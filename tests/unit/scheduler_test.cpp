// Scheduler: token budget, chunked prefill, max-num-seqs, priorities, preemption by recompute,
// abort, finish reasons, length checks, and prefix hits read from the counters.
#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/error.h"
#include "engine/kv_cache_manager.h"
#include "model/config.h"

namespace gemmaserve {
namespace {

constexpr AttentionType kS = AttentionType::kSliding;
constexpr AttentionType kF = AttentionType::kFull;
constexpr int kBlock = 4;
constexpr int kWindow = 32;

// S S F S S F with the last two layers KV-shared (spec §3.6 resolution), window 32.
TextConfig small_hybrid() {
  TextConfig c;
  c.num_hidden_layers = 6;
  c.num_kv_shared_layers = 2;
  c.sliding_window = kWindow;
  const AttentionType types[] = {kS, kS, kF, kS, kS, kF};
  const int sources[] = {0, 1, 2, 3, 3, 2};
  for (int i = 0; i < 6; ++i) {
    LayerSpec s;
    s.layer_index = i;
    s.type = types[i];
    s.head_dim = types[i] == kS ? 8 : 16;
    s.num_kv_heads = 1;
    s.kv_source_layer = sources[i];
    c.layer_types.push_back(types[i]);
    c.layers.push_back(s);
  }
  return c;
}

SchedulerConfig scheduler_config(int max_num_seqs, int max_num_batched_tokens,
                                 int max_model_len = 1024) {
  SchedulerConfig c;
  c.max_num_seqs = max_num_seqs;
  c.max_num_batched_tokens = max_num_batched_tokens;
  c.max_model_len = max_model_len;
  return c;
}

Scheduler make_scheduler(const SchedulerConfig& config, int sliding_blocks = 1000,
                         int full_blocks = 1000, bool prefix_caching = true) {
  return Scheduler(config, KvCacheManager(small_hybrid(), {sliding_blocks, full_blocks}, kBlock,
                                          prefix_caching));
}

std::vector<int32_t> tokens_from(int n, int32_t first) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), first);
  return v;
}

NewRequest new_request(const std::string& id, std::vector<int32_t> prompt,
                       std::optional<int> max_tokens, int priority = 0) {
  NewRequest r;
  r.request_id = id;
  r.prompt_token_ids = std::move(prompt);
  r.max_tokens = max_tokens;
  r.priority = priority;
  return r;
}

// A stand-in model whose next token depends on the whole history, so a recomputed request must
// reproduce the same tokens.
int32_t fake_next_token(const std::vector<int32_t>& history) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t t : history) h = (h ^ static_cast<uint32_t>(t)) * 1099511628211ull;
  return static_cast<int32_t>(100 + h % 50000);
}

struct Chunk {
  std::string id;
  int start = 0;
  int num_tokens = 0;
  bool samples = false;
  bool operator==(const Chunk&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Chunk& c) {
  return os << "{" << c.id << " @" << c.start << " +" << c.num_tokens << (c.samples ? " S" : "")
            << "}";
}

struct StepRecord {
  std::vector<Chunk> chunks;
  std::vector<std::string> preempted;
  std::vector<FinishedRequest> finished;
  std::vector<std::pair<std::string, size_t>> waiting_for_images;
};

// Drives the scheduler like the engine loop, checking invariants every step.
class Harness {
 public:
  explicit Harness(Scheduler scheduler) : s(std::move(scheduler)) {}

  StepRecord step(const std::set<std::string>& stop_now = {}) {
    StepRecord rec;
    const SchedulerOutput out = s.schedule();
    int total = 0;
    for (const ScheduledChunk& c : out.scheduled) {
      const SchedulerRequest* r = s.request(c.request_id);
      EXPECT_NE(r, nullptr);
      if (r == nullptr) continue;
      const int n = static_cast<int>(c.tokens.size());
      total += n;
      rec.chunks.push_back({c.request_id, c.start_pos, n, c.samples});
      // The chunk is the request's tokens at start_pos.
      for (int i = 0; i < n; ++i) {
        EXPECT_EQ(c.tokens[static_cast<size_t>(i)],
                  r->token_ids[static_cast<size_t>(c.start_pos + i)]);
      }
      // Every position attention reads has a block.
      const int end = c.start_pos + n;
      const auto& full = c.block_tables[static_cast<int>(kF)];
      const auto& sliding = c.block_tables[static_cast<int>(kS)];
      EXPECT_GE(full.size(), static_cast<size_t>((end + kBlock - 1) / kBlock));
      EXPECT_GE(sliding.size(), static_cast<size_t>((end + kBlock - 1) / kBlock));
      for (int p = 0; p < end && static_cast<size_t>(p / kBlock) < full.size(); ++p) {
        EXPECT_NE(full[static_cast<size_t>(p / kBlock)], kNullBlock) << c.request_id << " " << p;
      }
      for (int p = std::max(0, c.start_pos - kWindow + 1);
           p < end && static_cast<size_t>(p / kBlock) < sliding.size(); ++p) {
        EXPECT_NE(sliding[static_cast<size_t>(p / kBlock)], kNullBlock) << c.request_id << " " << p;
      }
    }
    EXPECT_EQ(total, out.num_scheduled_tokens);
    EXPECT_LE(total, s.config().max_num_batched_tokens + image_overrun);
    EXPECT_LE(s.num_running(), s.config().max_num_seqs);
    rec.preempted = out.preempted;
    rec.waiting_for_images = out.waiting_for_images;
    if (out.empty()) return rec;

    std::vector<StepResult> results;
    for (const ScheduledChunk& c : out.scheduled) {
      if (!c.samples) continue;
      const int32_t token = fake_next_token(s.request(c.request_id)->token_ids);
      outputs[c.request_id].push_back(token);
      results.push_back({c.request_id, token, stop_now.count(c.request_id) > 0});
    }
    rec.finished = s.update(results);
    for (const FinishedRequest& f : rec.finished) reasons[f.request_id] = f.reason;
    return rec;
  }

  void run_to_completion(int max_steps = 10000) {
    for (int i = 0; i < max_steps && s.has_unfinished_requests(); ++i) step();
    ASSERT_FALSE(s.has_unfinished_requests());
  }

  Scheduler s;
  int image_overrun = 0;  // tokens a whole image may add past the budget
  std::map<std::string, std::vector<int32_t>> outputs;
  std::map<std::string, FinishReason> reasons;
};

// ---- Length checks -----------------------------------------------------------------------------

TEST(Scheduler, LengthCheckUsesVllmMessages) {
  try {
    check_request_length(100, 20, 100);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(),
                 "This model's maximum context length is 100 tokens. However, your request has "
                 "100 input tokens. Please reduce the length of the input messages.");
  }
  try {
    check_request_length(90, 20, 100);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(),
                 "'max_tokens' or 'max_completion_tokens' is too large: 20. This model's maximum "
                 "context length is 100 tokens and your request has 90 input tokens (20 > 100 - "
                 "90).");
  }
  EXPECT_NO_THROW(check_request_length(80, 20, 100));
  EXPECT_NO_THROW(check_request_length(99, std::nullopt, 100));
  EXPECT_THROW(check_request_length(100, std::nullopt, 100), InputError);
}

TEST(Scheduler, AddRequestRefusesBadRequests) {
  Scheduler s = make_scheduler(scheduler_config(4, 64, 100));
  EXPECT_THROW(s.add_request(new_request("a", tokens_from(100, 1), 1)), InputError);
  EXPECT_THROW(s.add_request(new_request("a", tokens_from(90, 1), 11)), InputError);
  EXPECT_THROW(s.add_request(new_request("a", {}, 1)), InputError);
  EXPECT_THROW(s.add_request(new_request("a", tokens_from(5, 1), 0)), InputError);
  EXPECT_THROW(s.add_request(new_request("", tokens_from(5, 1), 1)), InputError);
  s.add_request(new_request("a", tokens_from(90, 1), 10));
  EXPECT_THROW(s.add_request(new_request("a", tokens_from(5, 1), 1)), InputError);  // duplicate
  EXPECT_EQ(s.request("a")->max_tokens, 10);
  s.add_request(new_request("b", tokens_from(30, 1), std::nullopt));
  EXPECT_EQ(s.request("b")->max_tokens, 70);  // up to max_model_len
  NewRequest bad_mm = new_request("c", tokens_from(5, 1), 1);
  bad_mm.hash_extras.multimodal = {{2, 2, "x"}, {3, 1, "y"}};
  EXPECT_THROW(s.add_request(bad_mm), InputError);
  EXPECT_EQ(s.num_waiting(), 2);
}

TEST(Scheduler, RequestLargerThanTheWholeCacheIsRefused) {
  // 20 full blocks hold 80 tokens.
  Scheduler s = make_scheduler(scheduler_config(4, 64, 1000), 1000, 20);
  EXPECT_THROW(s.add_request(new_request("a", tokens_from(60, 1), 30)), InputError);
  EXPECT_NO_THROW(s.add_request(new_request("b", tokens_from(60, 1), 20)));
}

// ---- Budget, chunking, ordering ----------------------------------------------------------------

TEST(Scheduler, TokenBudgetChunksPrefillsAndRunsDecodesFirst) {
  Harness h(make_scheduler(scheduler_config(8, 64)));
  h.s.add_request(new_request("a", tokens_from(100, 1), 3));
  h.s.add_request(new_request("b", tokens_from(100, 1001), 3));
  h.s.add_request(new_request("c", tokens_from(100, 2001), 3));

  EXPECT_EQ(h.step().chunks, (std::vector<Chunk>{{"a", 0, 64, false}}));
  EXPECT_EQ(h.step().chunks, (std::vector<Chunk>{{"a", 64, 36, true}, {"b", 0, 28, false}}));
  // A decodes first, B continues its prefill with the rest of the budget.
  EXPECT_EQ(h.step().chunks, (std::vector<Chunk>{{"a", 100, 1, true}, {"b", 28, 63, false}}));
  StepRecord rec = h.step();
  EXPECT_EQ(rec.chunks,
            (std::vector<Chunk>{{"a", 101, 1, true}, {"b", 91, 9, true}, {"c", 0, 54, false}}));
  ASSERT_EQ(rec.finished.size(), 1u);  // A's third token
  EXPECT_EQ(rec.finished[0].request_id, "a");
  EXPECT_EQ(rec.finished[0].reason, FinishReason::kLengthCapped);
  EXPECT_EQ(h.step().chunks, (std::vector<Chunk>{{"b", 100, 1, true}, {"c", 54, 46, true}}));
  h.run_to_completion();
  EXPECT_EQ(h.outputs["a"].size(), 3u);
  EXPECT_EQ(h.outputs["b"].size(), 3u);
  EXPECT_EQ(h.outputs["c"].size(), 3u);
  EXPECT_EQ(h.s.stats().scheduled_tokens, 3u * 100 + 3u * 2);
}

TEST(Scheduler, MaxNumSeqsCapsRunningRequests) {
  Harness h(make_scheduler(scheduler_config(2, 256)));
  int32_t first = 1;
  for (const char* id : {"a", "b", "c", "d"}) {
    h.s.add_request(new_request(id, tokens_from(5, first), 2));  // no shared prefix
    first += 100;
  }
  EXPECT_EQ(h.step().chunks, (std::vector<Chunk>{{"a", 0, 5, true}, {"b", 0, 5, true}}));
  EXPECT_EQ(h.s.num_running(), 2);
  EXPECT_EQ(h.s.num_waiting(), 2);
  // A and B finish in this step, C and D wait for the next.
  StepRecord rec = h.step();
  EXPECT_EQ(rec.chunks, (std::vector<Chunk>{{"a", 5, 1, true}, {"b", 5, 1, true}}));
  EXPECT_EQ(rec.finished.size(), 2u);
  EXPECT_EQ(h.step().chunks, (std::vector<Chunk>{{"c", 0, 5, true}, {"d", 0, 5, true}}));
  h.run_to_completion();
}

TEST(Scheduler, PriorityThenArrivalOrder) {
  Harness h(make_scheduler(scheduler_config(1, 256)));
  h.s.add_request(new_request("low", tokens_from(5, 1), 1, /*priority=*/5));
  h.s.add_request(new_request("high1", tokens_from(5, 1), 1, 0));
  h.s.add_request(new_request("mid", tokens_from(5, 1), 1, 2));
  h.s.add_request(new_request("high2", tokens_from(5, 1), 1, 0));
  EXPECT_EQ(h.s.waiting_ids(), (std::vector<std::string>{"high1", "high2", "mid", "low"}));
  std::vector<std::string> order;
  while (h.s.has_unfinished_requests()) {
    for (const Chunk& c : h.step().chunks) order.push_back(c.id);
  }
  EXPECT_EQ(order, (std::vector<std::string>{"high1", "high2", "mid", "low"}));
}

// ---- Finishing and abort -----------------------------------------------------------------------

TEST(Scheduler, FinishReasons) {
  Harness h(make_scheduler(scheduler_config(4, 256, 16)));
  h.s.add_request(new_request("capped", tokens_from(5, 1), 2));
  h.s.add_request(new_request("stopped", tokens_from(5, 1), 10));
  h.s.add_request(new_request("model_len", tokens_from(10, 1), std::nullopt));
  h.step();             // first tokens
  h.step({"stopped"});  // the engine's stop check ends "stopped"
  h.run_to_completion();
  EXPECT_EQ(h.reasons["capped"], FinishReason::kLengthCapped);
  EXPECT_EQ(h.outputs["capped"].size(), 2u);
  EXPECT_EQ(h.reasons["stopped"], FinishReason::kStopped);
  EXPECT_EQ(h.outputs["stopped"].size(), 2u);
  EXPECT_EQ(h.reasons["model_len"], FinishReason::kLengthCapped);
  EXPECT_EQ(h.outputs["model_len"].size(), 6u);  // 10 + 6 = max_model_len
  EXPECT_EQ(h.s.kv_cache().pool(kF)->num_free_blocks(), 1000);
  EXPECT_EQ(h.s.kv_cache().pool(kS)->num_free_blocks(), 1000);
}

TEST(Scheduler, AbortFreesBlocksAtOnce) {
  Harness h(make_scheduler(scheduler_config(4, 256)));
  h.s.add_request(new_request("a", tokens_from(40, 1), 50));
  h.s.add_request(new_request("b", tokens_from(40, 1001), 50));
  h.step();
  EXPECT_EQ(h.s.kv_cache().pool(kF)->num_free_blocks(), 1000 - 2 * 10);
  EXPECT_TRUE(h.s.abort("a"));
  EXPECT_EQ(h.s.kv_cache().pool(kF)->num_free_blocks(), 1000 - 10);
  EXPECT_FALSE(h.s.kv_cache().has_request("a"));
  EXPECT_EQ(h.s.request("a"), nullptr);
  EXPECT_FALSE(h.s.abort("a"));
  EXPECT_EQ(h.s.running_ids(), (std::vector<std::string>{"b"}));

  // Aborted while its step runs: its result is ignored.
  h.s.add_request(new_request("c", tokens_from(8, 1), 5));
  const SchedulerOutput out = h.s.schedule();
  ASSERT_EQ(out.scheduled.size(), 2u);
  EXPECT_TRUE(h.s.abort("c"));
  const std::vector<StepResult> results = {{"b", 7, false}, {"c", 9, false}};
  EXPECT_TRUE(h.s.update(results).empty());
  EXPECT_EQ(h.s.request("b")->num_output_tokens(), 2);

  // Aborting a waiting request.
  h.s.add_request(new_request("w", tokens_from(8, 1), 5));
  EXPECT_TRUE(h.s.abort("w"));
  EXPECT_EQ(h.s.num_waiting(), 0);
}

TEST(Scheduler, UpdateMisuseIsALogicError) {
  Scheduler s = make_scheduler(scheduler_config(4, 256));
  s.add_request(new_request("a", tokens_from(8, 1), 5));
  s.schedule();
  EXPECT_THROW(s.schedule(), std::logic_error);
  EXPECT_THROW(s.update({}), std::logic_error);  // "a" sampled but got no result
  const std::vector<StepResult> twice = {{"a", 1, false}, {"a", 2, false}};
  EXPECT_THROW(s.update(twice), std::logic_error);
  const std::vector<StepResult> ok = {{"a", 1, false}};
  EXPECT_NO_THROW(s.update(ok));
  EXPECT_TRUE(s.schedule().scheduled.size() == 1);
}

// ---- Preemption --------------------------------------------------------------------------------

// Two requests that cannot both grow to 36 tokens in 12 blocks per group.
void add_pair(Scheduler* s, int priority_a = 0, int priority_b = 0) {
  s->add_request(new_request("a", tokens_from(16, 1), 20, priority_a));
  s->add_request(new_request("b", tokens_from(16, 501), 20, priority_b));
}

TEST(Scheduler, PreemptsTheLatestRequestAndRecomputesItToTheSameOutput) {
  Harness roomy(make_scheduler(scheduler_config(4, 64)));
  add_pair(&roomy.s);
  roomy.run_to_completion();
  EXPECT_EQ(roomy.s.stats().preemptions, 0u);

  Harness tight(make_scheduler(scheduler_config(4, 64), 12, 12));
  add_pair(&tight.s);
  bool saw_preemption = false;
  for (int i = 0; i < 1000 && tight.s.has_unfinished_requests(); ++i) {
    const int b_outputs_before =
        tight.s.request("b") ? tight.s.request("b")->num_output_tokens() : 0;
    const StepRecord rec = tight.step();
    if (rec.preempted.empty()) continue;
    if (!saw_preemption) {
      saw_preemption = true;
      EXPECT_EQ(rec.preempted, (std::vector<std::string>{"b"}));
      const SchedulerRequest* b = tight.s.request("b");
      ASSERT_NE(b, nullptr);
      EXPECT_EQ(b->status, RequestStatus::kPreempted);
      EXPECT_EQ(b->num_computed_tokens, 0);
      EXPECT_EQ(b->num_preemptions, 1);
      // Its generated tokens stay and will be recomputed as prompt.
      EXPECT_EQ(b->num_tokens(), 16 + b_outputs_before);
      EXPECT_EQ(tight.s.kv_cache().num_held_blocks("b", kF), 0);
      EXPECT_EQ(tight.s.kv_cache().num_held_blocks("b", kS), 0);
      EXPECT_FALSE(tight.s.kv_cache().has_request("b"));
      EXPECT_EQ(tight.s.waiting_ids(), (std::vector<std::string>{"b"}));
      EXPECT_EQ(tight.s.running_ids(), (std::vector<std::string>{"a"}));
      // No waiting request is admitted in a step that preempted.
      for (const Chunk& c : rec.chunks) EXPECT_EQ(c.id, "a");
    }
  }
  ASSERT_TRUE(saw_preemption);
  EXPECT_FALSE(tight.s.has_unfinished_requests());
  EXPECT_GE(tight.s.stats().preemptions, 1u);
  EXPECT_EQ(tight.outputs["a"], roomy.outputs["a"]);
  EXPECT_EQ(tight.outputs["b"], roomy.outputs["b"]);
  EXPECT_EQ(tight.outputs["b"].size(), 20u);
}

TEST(Scheduler, PreemptsTheLowestPriorityFirst) {
  // "a" arrives first but has the lower priority (larger value): it is the victim.
  Harness h(make_scheduler(scheduler_config(4, 64), 12, 12));
  add_pair(&h.s, /*priority_a=*/1, /*priority_b=*/0);
  std::vector<std::string> preempted;
  for (int i = 0; i < 1000 && h.s.has_unfinished_requests(); ++i) {
    const StepRecord rec = h.step();
    preempted.insert(preempted.end(), rec.preempted.begin(), rec.preempted.end());
  }
  ASSERT_FALSE(preempted.empty());
  EXPECT_EQ(preempted[0], "a");
  EXPECT_EQ(h.outputs["a"].size(), 20u);
  EXPECT_EQ(h.outputs["b"].size(), 20u);
}

TEST(Scheduler, PreemptingAnAlreadyScheduledRequestGivesBackItsBudget) {
  // "low" runs first; "high" joins later. When "high" needs a block, "low" - already scheduled
  // earlier in the same step - is unscheduled and preempted.
  Harness h(make_scheduler(scheduler_config(4, 64), 12, 12));
  h.s.add_request(new_request("low", tokens_from(16, 1), 20, 1));
  h.step();
  h.s.add_request(new_request("high", tokens_from(16, 501), 20, 0));
  for (int i = 0; i < 1000 && h.s.has_unfinished_requests(); ++i) {
    const StepRecord rec = h.step();
    if (rec.preempted.empty()) continue;
    EXPECT_EQ(rec.preempted, (std::vector<std::string>{"low"}));
    EXPECT_EQ(rec.chunks, (std::vector<Chunk>{{"high", rec.chunks[0].start, 1, true}}));
    EXPECT_EQ(h.s.kv_cache().num_held_blocks("low", kF), 0);
    break;
  }
  h.run_to_completion();
  EXPECT_EQ(h.outputs["low"].size(), 20u);
  EXPECT_EQ(h.outputs["high"].size(), 20u);
}

// ---- Prefix caching through the scheduler ------------------------------------------------------

TEST(Scheduler, PrefixHitComputesOnlyTheUncachedTokens) {
  Harness h(make_scheduler(scheduler_config(4, 64)));
  const std::vector<int32_t> prompt = tokens_from(10 * kWindow, 1);
  h.s.add_request(new_request("a", prompt, 1));
  h.run_to_completion();
  const SchedulerStats before = h.s.stats();
  EXPECT_EQ(before.scheduled_tokens, 320u);
  EXPECT_EQ(before.prefix_cache_hits, 0u);
  EXPECT_EQ(before.prefix_cache_queries, 320u);

  std::vector<int32_t> longer = prompt;
  for (int i = 0; i < 8; ++i) longer.push_back(60000 + i);
  h.s.add_request(new_request("b", longer, 1));
  const StepRecord rec = h.step();
  EXPECT_EQ(rec.chunks, (std::vector<Chunk>{{"b", 320, 8, true}}));
  const SchedulerStats after = h.s.stats();
  EXPECT_EQ(after.scheduled_tokens - before.scheduled_tokens, 8u);
  EXPECT_EQ(after.prefix_cache_hits - before.prefix_cache_hits, 320u);
  EXPECT_EQ(after.prefix_cache_queries - before.prefix_cache_queries, 328u);
  EXPECT_EQ(after.prefix_cache_requests, 2u);

  // A different cache_salt sees none of it.
  NewRequest salted = new_request("c", longer, 1);
  salted.hash_extras.cache_salt = "tenant-x";
  h.s.add_request(salted);
  EXPECT_EQ(h.step().chunks, (std::vector<Chunk>{{"c", 0, 64, false}}));
  h.run_to_completion();
  // Same history, same fake-model output: caching changes nothing but the work.
  EXPECT_EQ(h.outputs["b"], h.outputs["c"]);
}

TEST(Scheduler, SkipPrefixCacheAndCachingOff) {
  Harness h(make_scheduler(scheduler_config(4, 64)));
  const std::vector<int32_t> prompt = tokens_from(40, 1);
  h.s.add_request(new_request("a", prompt, 1));
  h.run_to_completion();
  NewRequest skip = new_request("b", prompt, 1);
  skip.skip_prefix_cache = true;
  h.s.add_request(skip);
  EXPECT_EQ(h.step().chunks, (std::vector<Chunk>{{"b", 0, 40, true}}));

  Harness off(make_scheduler(scheduler_config(4, 64), 1000, 1000, /*prefix_caching=*/false));
  off.s.add_request(new_request("a", prompt, 1));
  off.run_to_completion();
  off.s.add_request(new_request("b", prompt, 1));
  EXPECT_EQ(off.step().chunks, (std::vector<Chunk>{{"b", 0, 40, true}}));
  EXPECT_EQ(off.s.stats().prefix_cache_queries, 0u);
}

TEST(Scheduler, LongPromptLeavesOnlyTheWindowInSlidingGroups) {
  Harness h(make_scheduler(scheduler_config(4, 64)));
  h.s.add_request(new_request("a", tokens_from(10 * kWindow, 1), 4));
  int held_after_prompt = -1;
  for (int i = 0; i < 100 && h.s.has_unfinished_requests(); ++i) {
    const StepRecord rec = h.step();
    if (!rec.chunks.empty() && rec.chunks[0].samples && held_after_prompt < 0) {
      held_after_prompt = h.s.kv_cache().num_held_blocks("a", kS);
      EXPECT_EQ(h.s.kv_cache().num_held_blocks("a", kF), 10 * kWindow / kBlock);
    }
    if (h.s.request("a") != nullptr) {
      EXPECT_LE(h.s.kv_cache().num_held_blocks("a", kS), (kWindow + kBlock - 1) / kBlock + 1);
    }
  }
  EXPECT_GE(held_after_prompt, 0);
  EXPECT_LE(held_after_prompt, (kWindow + kBlock - 1) / kBlock + 1);
}

// ---- Images -------------------------------------------------------------------------------------

NewRequest image_request(const std::string& id, std::vector<int32_t> prompt, int64_t offset,
                         int64_t length, const std::string& hash = "img") {
  NewRequest r = new_request(id, std::move(prompt), 2);
  r.hash_extras.multimodal.push_back({offset, length, hash});
  return r;
}

TEST(Scheduler, ImageIsNeverSplitAcrossSteps) {
  Harness h(make_scheduler(scheduler_config(4, 16)));
  h.image_overrun = 20;
  h.s.add_request(image_request("a", tokens_from(40, 1), 10, 20));
  // Stops before the image, then takes all 20 image tokens past the 16-token budget.
  EXPECT_EQ(h.step().chunks, (std::vector<Chunk>{{"a", 0, 10, false}}));
  EXPECT_EQ(h.step().chunks, (std::vector<Chunk>{{"a", 10, 20, false}}));
  EXPECT_EQ(h.step().chunks, (std::vector<Chunk>{{"a", 30, 10, true}}));
  h.run_to_completion();
}

TEST(Scheduler, ImageBiggerThanTheBudgetEndsTheStep) {
  Harness h(make_scheduler(scheduler_config(4, 8)));
  h.image_overrun = 30;
  h.s.add_request(image_request("a", tokens_from(40, 1), 0, 30));
  h.s.add_request(new_request("b", tokens_from(5, 100), 2));
  // The image takes the whole step (and more); b waits for the next one.
  EXPECT_EQ(h.step().chunks, (std::vector<Chunk>{{"a", 0, 30, false}}));
  EXPECT_EQ(h.step().chunks, (std::vector<Chunk>{{"a", 30, 8, false}}));
  h.run_to_completion();
}

TEST(Scheduler, PrefixHitNeverEndsInsideAnImage) {
  Harness h(make_scheduler(scheduler_config(4, 64)));
  h.s.add_request(image_request("a", tokens_from(40, 1), 6, 24));
  h.run_to_completion();
  // Same image, prompt ending 1 token after it: the hit (at most 30 tokens, so 28: inside the
  // image) is cut to the block boundary before the image.
  h.s.add_request(image_request("b", tokens_from(31, 1), 6, 24));
  EXPECT_EQ(h.step().chunks, (std::vector<Chunk>{{"b", 4, 27, true}}));
  h.run_to_completion();
  // The whole image cached: the hit runs past it.
  h.s.add_request(image_request("c", tokens_from(40, 1), 6, 24));
  EXPECT_EQ(h.step().chunks, (std::vector<Chunk>{{"c", 36, 4, true}}));
  h.run_to_completion();
  // Another image, same tokens: no block from the image's first one on is shared.
  h.s.add_request(image_request("d", tokens_from(40, 1), 6, 24, "other"));
  EXPECT_EQ(h.step().chunks, (std::vector<Chunk>{{"d", 4, 36, true}}));
  h.run_to_completion();
}

// Frames of a video are a few tokens apart: cutting the hit back before one image can land
// inside the one before it, which is cut back in turn.
TEST(Scheduler, PrefixHitCutBeforeAnImageNeverEndsInsideTheImageBefore) {
  Harness h(make_scheduler(scheduler_config(4, 64)));
  auto two_images = [](const std::string& id, int prompt_len) {
    NewRequest r = new_request(id, tokens_from(prompt_len, 1), 2);
    r.hash_extras.multimodal = {{5, 8, "first"}, {14, 8, "second"}};  // [5, 13), [14, 22)
    return r;
  };
  h.s.add_request(two_images("a", 40));
  h.run_to_completion();
  // The hit (at most 22 tokens: 20) ends inside the second image; the block before it (12)
  // is inside the first, so the hit ends at 4.
  h.s.add_request(two_images("b", 23));
  EXPECT_EQ(h.step().chunks, (std::vector<Chunk>{{"b", 4, 19, true}}));
  h.run_to_completion();
}

// An image not encoded yet stops a running request's chunk before it and keeps a waiting
// request from starting (it holds the queue), and the step names both images.
TEST(Scheduler, ChunksStopBeforeImagesThatAreNotReady) {
  std::set<std::pair<std::string, size_t>> ready;
  SchedulerConfig config = scheduler_config(4, 64);
  config.image_ready = [&](const std::string& id, size_t k) { return ready.count({id, k}) > 0; };
  Harness h(make_scheduler(config));
  h.image_overrun = 0;
  h.s.add_request(image_request("a", tokens_from(40, 1), 10, 20));
  h.s.add_request(image_request("b", tokens_from(20, 100), 0, 20, "other"));
  h.s.add_request(new_request("c", tokens_from(5, 200), 2));
  using Blocked = std::vector<std::pair<std::string, size_t>>;
  StepRecord r = h.step();
  EXPECT_EQ(r.chunks, (std::vector<Chunk>{{"a", 0, 10, false}}));
  EXPECT_EQ(r.waiting_for_images, (Blocked{{"a", 0}, {"b", 0}}));
  r = h.step();  // nothing to compute: both wait for their images
  EXPECT_TRUE(r.chunks.empty());
  EXPECT_EQ(r.waiting_for_images, (Blocked{{"a", 0}, {"b", 0}}));
  ready.insert({"a", 0});
  r = h.step();
  EXPECT_EQ(r.chunks, (std::vector<Chunk>{{"a", 10, 30, true}}));
  EXPECT_EQ(r.waiting_for_images, (Blocked{{"b", 0}}));
  ready.insert({"b", 0});
  r = h.step();
  EXPECT_EQ(r.chunks,
            (std::vector<Chunk>{{"a", 40, 1, true}, {"b", 0, 20, true}, {"c", 0, 5, true}}));
  EXPECT_TRUE(r.waiting_for_images.empty());
  h.run_to_completion();
}

TEST(Scheduler, PlaceholderPastThePromptIsRefused) {
  Scheduler s = make_scheduler(scheduler_config(4, 64));
  EXPECT_THROW(s.add_request(image_request("a", tokens_from(10, 1), 4, 8)), InputError);
}

TEST(Scheduler, RejectsBadConfig) {
  EXPECT_THROW(make_scheduler(scheduler_config(0, 64)), InputError);
  EXPECT_THROW(make_scheduler(scheduler_config(4, 0)), InputError);
  EXPECT_THROW(make_scheduler(scheduler_config(4, 64, 0)), InputError);
}

}  // namespace
}  // namespace gemmaserve
