// Draft proposers for speculative decoding: after each step, every running sequence that just
// got tokens may bring up to k drafted tokens; the next step's forward verifies them all at
// once (see speculative_decoding.h). A proposer may keep per-sequence state (a draft model's KV
// cache): it learns what was kept through the token histories it is given and forgets a
// sequence on finished().
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model/config.h"

namespace gemmaserve {

class Gemma4Model;
class KvCache;
class ThreadPool;

struct DraftRequest {
  std::string sequence_id;          // stable for the sequence's life
  std::span<const int32_t> tokens;  // prompt + every accepted output token
  int max_drafts = 0;               // at most this many (k, less near the length limits)
  // The target's final hidden states (rows of hidden_size floats) of the positions the last
  // step verified, oldest first: what an MTP drafter conditions on. Empty unless the proposer
  // asked for them (wants_hidden_states) and the step had them.
  std::span<const float> target_hidden;
  // The sequence's block tables in the target's KV cache, covering every position before the
  // newest token (an MTP drafter attends over the target's own K/V).
  std::array<std::span<const int32_t>, kNumAttentionTypes> block_tables;
};

class DraftProposer {
 public:
  virtual ~DraftProposer() = default;
  // One draft per request (possibly empty), in order.
  virtual std::vector<std::vector<int32_t>> propose(std::span<const DraftRequest> requests) = 0;
  // The sequence ended (finished, aborted or preempted): drop its state.
  virtual void finished(const std::string& sequence_id) { (void)sequence_id; }
  // Whether propose() needs DraftRequest::target_hidden (MTP).
  virtual bool wants_hidden_states() const { return false; }
  // Called once the target is loaded and its KV cache exists (both outlive the proposer).
  virtual void bind_target(const Gemma4Model& target, const KvCache& cache,
                           std::shared_ptr<ThreadPool> pool) {
    (void)target;
    (void)cache;
    (void)pool;
  }
};

}  // namespace gemmaserve
