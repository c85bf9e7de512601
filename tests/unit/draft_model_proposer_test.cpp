// The draft-model proposer on its own: a history longer than the step budget is caught up in
// chunks (no drafts until it has), after which its drafts are those of an unbudgeted draft;
// finished() drops a sequence's cache.
#include "engine/speculative/draft_model_proposer.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "engine_test_support.h"
#include "model/weights.h"

namespace gemmaserve {
namespace {

using Ids = std::vector<int32_t>;

std::unique_ptr<DraftModelProposer> proposer(int max_prefill_tokens) {
  auto pool = std::make_shared<ThreadPool>(2);
  auto model =
      std::make_unique<Gemma4Model>(load_model_weights(enginetest::golden_model("dense")), pool);
  return std::make_unique<DraftModelProposer>(std::move(model), /*block_size=*/16,
                                              cpu::KvDtype::kF32, /*max_model_len=*/256,
                                              /*kv_tokens=*/1024, max_prefill_tokens);
}

std::vector<Ids> propose(DraftModelProposer& p, const std::string& id, const Ids& tokens, int k) {
  DraftRequest r;
  r.sequence_id = id;
  r.tokens = tokens;
  r.max_drafts = k;
  return p.propose(std::span<const DraftRequest>(&r, 1));
}

Ids history(int n) {
  Ids t{2};
  for (int i = 1; i < n; ++i) t.push_back(5 + (i * 37) % 200);
  return t;
}

TEST(DraftModelProposer, LongHistoriesCatchUpWithinTheStepBudget) {
  const Ids tokens = history(40);
  auto whole = proposer(/*max_prefill_tokens=*/2048);
  const Ids expected = propose(*whole, "a", tokens, 3)[0];
  ASSERT_EQ(expected.size(), 3u);

  auto chunked = proposer(/*max_prefill_tokens=*/8);
  // 40 tokens at 8 a round: four rounds of 8 without drafts, then the last 8 and the drafts.
  for (int round = 1; round <= 4; ++round) {
    EXPECT_TRUE(propose(*chunked, "a", tokens, 3)[0].empty()) << "round " << round;
    EXPECT_EQ(chunked->computed_tokens("a"), 8 * round);
  }
  EXPECT_EQ(propose(*chunked, "a", tokens, 3)[0], expected);
  // The history grows by the accepted drafts and one more token: drafting continues at once.
  Ids longer = tokens;
  longer.insert(longer.end(), expected.begin(), expected.end());
  longer.push_back(7);
  EXPECT_EQ(propose(*chunked, "a", longer, 3)[0], propose(*whole, "a", longer, 3)[0]);

  chunked->finished("a");
  EXPECT_EQ(chunked->computed_tokens("a"), 0);
}

TEST(DraftModelProposer, NoDraftsAskedNoneComputed) {
  auto p = proposer(/*max_prefill_tokens=*/64);
  EXPECT_TRUE(propose(*p, "a", history(20), 0)[0].empty());
  EXPECT_EQ(p->computed_tokens("a"), 0);
}

}  // namespace
}  // namespace gemmaserve
