#include "engine/speculative/draft_model_proposer.h"

#include <algorithm>

#include "engine/sampler.h"

namespace gemmaserve {

DraftModelProposer::DraftModelProposer(std::unique_ptr<Gemma4Model> model, int block_size,
                                       cpu::KvDtype kv_dtype, int max_model_len, int64_t kv_tokens)
    : model_(std::move(model)), max_model_len_(max_model_len) {
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
  for (size_t i = 0; i < requests.size(); ++i) {
    const DraftRequest& r = requests[i];
    const int len = static_cast<int>(r.tokens.size());
    const int k = std::min(r.max_drafts, max_model_len_ - len - 1);
    if (k <= 0 || len == 0) continue;
    std::vector<int32_t>& done = computed_[r.sequence_id];
    // Keep the cached prefix the new history shares; its last token is always fed again.
    const auto mismatch = std::mismatch(done.begin(), done.end(), r.tokens.begin(), r.tokens.end());
    const int keep = std::min(static_cast<int>(mismatch.first - done.begin()), len - 1);
    done.resize(static_cast<size_t>(keep));
    // Room for the new tokens and the drafts fed back (all but the last).
    if (!kv_->allocate_slots(r.sequence_id, keep, len - keep + k - 1)) {
      finished(r.sequence_id);  // no room now: no drafts, start over next time
      continue;
    }
    Active a;
    a.request = i;
    a.num_drafts = k;
    a.start = keep;
    a.pending.assign(r.tokens.begin() + keep, r.tokens.end());
    active.push_back(std::move(a));
  }
  const size_t vocab = static_cast<size_t>(model_->vocab_size());
  for (int step = 0;; ++step) {
    std::vector<Active*> batch;
    for (Active& a : active) {
      if (step < a.num_drafts) batch.push_back(&a);
    }
    if (batch.empty()) break;
    std::vector<SequenceInput> inputs(batch.size());
    for (size_t b = 0; b < batch.size(); ++b) {
      const Active& a = *batch[b];
      const std::string& id = requests[a.request].sequence_id;
      inputs[b].tokens = a.pending;
      inputs[b].start_pos = a.start;
      inputs[b].block_tables = kv_->block_tables(id);
      inputs[b].logits = LogitsWanted::kLast;
    }
    model_->forward(inputs, *cache_, &out_);
    for (size_t b = 0; b < batch.size(); ++b) {
      Active& a = *batch[b];
      const std::string& id = requests[a.request].sequence_id;
      std::vector<int32_t>& done = computed_[id];
      done.insert(done.end(), a.pending.begin(), a.pending.end());
      const int32_t next = argmax(std::span<const float>(out_.logits).subspan(b * vocab, vocab));
      drafts[a.request].push_back(next);
      a.start += static_cast<int32_t>(a.pending.size());
      a.pending.assign(1, next);
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
