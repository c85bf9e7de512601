// The engine's side of speculative decoding: one sample's tokens (a draw, or drafts verified)
// and the drafts of the sequences a step sampled. See engine/speculative/speculative_decoding.h.
#include <algorithm>
#include <stdexcept>

#include "core/error.h"
#include "core/logging.h"
#include "engine/engine_state.h"
#include "engine/fault_injection.h"
#include "engine/speculative/rejection_sampler.h"
#include "engine/speculative/speculative_decoding.h"

namespace gemmaserve {

void Engine::sample_item(const StepPlan& plan, std::span<const float> rows, Sampled* s) {
  const StepPlan::Item& item = plan.items[s->item];
  const Sequence& seq = *item.seq;
  const EngineRequest& r = item.request->request;
  const std::vector<int32_t>& output = item.request->output.outputs[seq.index].token_ids;
  const size_t vocab = static_cast<size_t>(model_->vocab_size());
  if (sampler_fault(r.params.seed)) throw std::runtime_error("injected sampler fault");
  if (item.num_drafts == 0) {
    s->tokens = {seq.sampler->sample(rows, output)};
  } else {
    const std::span<const int32_t> drafts =
        std::span<const int32_t>(item.tokens).last(item.num_drafts);
    VerifiedDrafts v = verify_drafts(*seq.sampler, rows, vocab, drafts, output);
    s->tokens = std::move(v.tokens);
    s->num_accepted = v.num_accepted;
  }
  if (!r.params.logprobs) return;
  // Each token's logprobs from the row that predicted it: as without speculation.
  for (size_t i = 0; i < s->tokens.size(); ++i) {
    s->logprobs.push_back(
        RequestSampler::logprobs(rows.subspan(i * vocab, vocab), *r.params.logprobs, s->tokens[i]));
  }
}

void Engine::propose_drafts(const StepPlan& plan, const ForwardOutput& forward,
                            std::vector<Sampled>* sampled, std::vector<StepFailure>* failed) {
  if (!speculative_) return;
  std::vector<std::string> ended;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ended.swap(speculative_ended_);
  }
  DraftProposer& proposer = speculative_->proposer();
  for (const std::string& id : ended) proposer.finished(id);
  // Histories first: the requests' spans point into them.
  std::vector<Sampled*> targets;
  std::vector<std::vector<int32_t>> histories;
  for (Sampled& s : *sampled) {
    if (s.update.finished) continue;
    const StepPlan::Item& item = plan.items[s.item];
    const std::vector<int32_t>& prompt = item.request->request.prompt_token_ids;
    const std::vector<int32_t>& output = item.request->output.outputs[item.seq->index].token_ids;
    std::vector<int32_t> h;
    h.reserve(prompt.size() + output.size() + s.tokens.size());
    h.insert(h.end(), prompt.begin(), prompt.end());
    h.insert(h.end(), output.begin(), output.end());
    h.insert(h.end(), s.tokens.begin(), s.tokens.end());
    histories.push_back(std::move(h));
    targets.push_back(&s);
  }
  if (targets.empty()) return;
  std::vector<DraftRequest> requests(targets.size());
  for (size_t i = 0; i < targets.size(); ++i) {
    const StepPlan::Item& item = plan.items[targets[i]->item];
    requests[i].sequence_id = item.seq->scheduler_id;
    requests[i].tokens = histories[i];
    // Drafts past max_tokens or the model length would be dropped unverified: ask for none.
    const int generated = static_cast<int>(
        item.request->output.outputs[item.seq->index].token_ids.size() + targets[i]->tokens.size());
    const int room = std::min(max_model_len_ - static_cast<int>(histories[i].size()) - 1,
                              item.request->request.params.max_tokens - generated - 1);
    requests[i].max_drafts = std::clamp(room, 0, speculative_->num_speculative_tokens());
    if (forward.hidden.empty()) continue;
    // MTP: the hidden row of the position before the newest token (the one predicting it).
    const size_t width = forward.hidden.size() / static_cast<size_t>(forward.rows);
    const size_t row = targets[i]->row + targets[i]->tokens.size() - 1;
    requests[i].target_hidden = std::span<const float>(forward.hidden).subspan(row * width, width);
    for (int t = 0; t < kNumAttentionTypes; ++t)
      requests[i].target_block_tables[t] = item.tables[t];
  }
  std::vector<std::vector<int32_t>> drafts;
  try {
    drafts = proposer.propose(requests);
  } catch (const std::exception& e) {
    // Which sequence raised is unknown: each starts its drafting over, alone, and one whose
    // own proposal fails ends with its error (the step's tokens of the others stand).
    GS_LOG_WARNING << "draft proposal failed (" << e.what() << "); proposing one by one";
    drafts.assign(targets.size(), {});
    for (size_t i = 0; i < targets.size(); ++i) {
      proposer.finished(requests[i].sequence_id);
      try {
        std::vector<std::vector<int32_t>> one =
            proposer.propose(std::span<const DraftRequest>(&requests[i], 1));
        if (!one.empty()) drafts[i] = std::move(one.front());
      } catch (const std::exception& alone) {
        proposer.finished(requests[i].sequence_id);
        failed->push_back({targets[i]->item, request_error_of(alone)});
      }
    }
  }
  for (size_t i = 0; i < targets.size() && i < drafts.size(); ++i) {
    targets[i]->drafts = std::move(drafts[i]);
  }
}

}  // namespace gemmaserve
