#include "engine/speculative/draft_model_proposer.h"

#include <algorithm>

#include "engine/sampler.h"

namespace gemmaserve {

DraftModelProposer::DraftModelProposer(std::unique_ptr<Gemma4Model> model, int block_size,
                                       cpu::KvDtype kv_dtype, int max_model_len, int64_t kv_tokens,
                                       int max_prefill_tokens)
    : model_(std::move(model)),
      max_model_len_(max_model_len),
      max_prefill_tokens_(std::max(1, max_prefill_tokens)) {
  const TextConfig& text = model_->config().text;
  KvCachePlanOptions opt;
  opt.block_size = block_size;
  opt.kv_dtype = kv_dtype;
  opt.max_model_len = max_model_len;
  const int64_t blocks =
      (std::max<int64_t>(kv_tokens, max_model_len) + block_size - 1) / block_size;
  opt.memory_bytes = blocks * bytes_per_block(text, block_size, kv_dtype);
  plan_ = plan_kv_cache(text, opt);
  cache_ = std::make_unique<KvCache>(text, plan_.num_blocks, block_size, kv_dtype);
  kv_ = std::make_unique<KvCacheManager>(text, plan_.num_blocks, block_size,
                                         /*enable_prefix_caching=*/false);
}

DraftModelProposer::~DraftModelProposer() = default;

void DraftModelProposer::finished(const std::string& sequence_id) {
  kv_->free(sequence_id);
  computed_.erase(sequence_id);
}

int DraftModelProposer::computed_tokens(const std::string& sequence_id) const {
  auto it = computed_.find(sequence_id);
  return it == computed_.end() ? 0 : static_cast<int>(it->second.size());
}

std::vector<std::vector<int32_t>> DraftModelProposer::propose(
    std::span<const DraftRequest> requests) {
  struct Active {
    size_t request = 0;
    int num_drafts = 0;
    int32_t start = 0;             // first position computed this round
    std::vector<int32_t> pending;  // tokens to feed at the next forward
  };
  std::vector<std::vector<int32_t>> drafts(requests.size());
  std::vector<Active> active;
  // The first forward's rows stay within the target's step budget: a long new history is
  // caught up in chunks over several rounds (no drafts meanwhile), as the target's prefill is.
  int budget = max_prefill_tokens_;
  for (size_t i = 0; i < requests.size() && budget > 0; ++i) {
    const DraftRequest& r = requests[i];
    const int len = static_cast<int>(r.tokens.size());
    const int k = std::min(r.max_drafts, max_model_len_ - len - 1);
    if (k <= 0 || len == 0) continue;
    std::vector<int32_t>& done = computed_[r.sequence_id];
    // Keep the cached prefix the new history shares; its last token is always fed again.
    const auto mismatch = std::mismatch(done.begin(), done.end(), r.tokens.begin(), r.tokens.end());
    const int keep = std::min(static_cast<int>(mismatch.first - done.begin()), len - 1);
    done.resize(static_cast<size_t>(keep));
    const bool catch_up = len - keep > budget;
    const int feed = catch_up ? budget : len - keep;
    // Room for the new tokens and the drafts fed back (all but the last).
    if (!kv_->allocate_slots(r.sequence_id, keep, feed + (catch_up ? 0 : k - 1))) {
      finished(r.sequence_id);  // no room now: no drafts, start over next time
      continue;
    }
    budget -= feed;
    Active a;
    a.request = i;
    a.num_drafts = catch_up ? 0 : k;
    a.start = keep;
    a.pending.assign(r.tokens.begin() + keep, r.tokens.begin() + keep + feed);
    active.push_back(std::move(a));
  }
  const size_t vocab = static_cast<size_t>(model_->vocab_size());
  for (int step = 0;; ++step) {
    std::vector<Active*> batch;
    for (Active& a : active) {
      if (step < std::max(a.num_drafts, 1)) batch.push_back(&a);  // a catch-up feeds once
    }
    if (batch.empty()) break;
    std::vector<SequenceInput> inputs(batch.size());
    for (size_t b = 0; b < batch.size(); ++b) {
      const Active& a = *batch[b];
      const std::string& id = requests[a.request].sequence_id;
      inputs[b].tokens = a.pending;
      inputs[b].start_pos = a.start;
      inputs[b].block_tables = kv_->block_tables(id);
      inputs[b].logits = a.num_drafts > 0 ? LogitsWanted::kLast : LogitsWanted::kNone;
    }
    model_->forward(inputs, *cache_, &out_);
    size_t row = 0;
    for (Active* a : batch) {
      const std::string& id = requests[a->request].sequence_id;
      std::vector<int32_t>& done = computed_[id];
      done.insert(done.end(), a->pending.begin(), a->pending.end());
      a->start += static_cast<int32_t>(a->pending.size());
      a->pending.clear();
      if (a->num_drafts == 0) continue;
      const int32_t next =
          argmax(std::span<const float>(out_.logits).subspan(row++ * vocab, vocab));
      drafts[a->request].push_back(next);
      a->pending.assign(1, next);
    }
  }
  // Sliding windows slide behind the drafts fed, less up to a whole draft run: the next round may
  // roll that far back.
  for (const Active& a : active) {
    const std::string& id = requests[a.request].sequence_id;
    kv_->commit(id, {}, std::max(0, a.start - a.num_drafts));
  }
  return drafts;
}

}  // namespace gemmaserve
