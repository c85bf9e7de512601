// A smaller Gemma 4 sharing the target's vocabulary as the draft: it keeps its own paged KV
// cache (its own KvCacheManager and blocks) and drafts k tokens greedily for every sequence, one
// batched forward per draft position. What the target kept is learnt from the histories: a
// sequence's cache is cut back to the longest prefix its cached tokens share with the new
// history (rejected drafts, a preemption) and the rest computed again.
#pragma once

#include <memory>
#include <unordered_map>

#include "engine/kv_cache_manager.h"
#include "engine/speculative/draft_proposer.h"
#include "model/gemma4_model.h"
#include "model/kv_cache.h"

namespace gemmaserve {

class DraftModelProposer final : public DraftProposer {
 public:
  // `kv_tokens`: token slots of the draft's cache (sized like the target's);
  // `max_prefill_tokens`: rows of a round's first forward (the target's step budget).
  DraftModelProposer(std::unique_ptr<Gemma4Model> model, int block_size, cpu::KvDtype kv_dtype,
                     int max_model_len, int64_t kv_tokens, int max_prefill_tokens);
  ~DraftModelProposer() override;

  std::vector<std::vector<int32_t>> propose(std::span<const DraftRequest> requests) override;
  void finished(const std::string& sequence_id) override;
  // Tokens of the sequence the draft cache holds (0 when it holds none).
  int computed_tokens(const std::string& sequence_id) const;

 private:
  std::unique_ptr<Gemma4Model> model_;
  int max_model_len_;
  int max_prefill_tokens_;
  KvCachePlan plan_;
  std::unique_ptr<KvCache> cache_;
  std::unique_ptr<KvCacheManager> kv_;
  // Per sequence: the tokens whose K/V the draft cache holds, in order from position 0.
  std::unordered_map<std::string, std::vector<int32_t>> computed_;
  ForwardOutput out_;
};

}  // namespace gemmaserve
