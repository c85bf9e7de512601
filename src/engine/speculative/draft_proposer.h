// Draft proposers for speculative decoding: after each step, every running sequence that just
// got tokens may bring up to k drafted tokens; the next step's forward verifies them all at
// once (see speculative_decoding.h). A proposer may keep per-sequence state (a draft model's KV
// cache): it learns what was kept through the token histories it is given and forgets a
// sequence on finished().
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/config.h"

namespace gemmaserve {

struct DraftRequest {
  std::string sequence_id;          // stable for the sequence's life
  std::span<const int32_t> tokens;  // prompt + every accepted output token
  int max_drafts = 0;               // at most this many (k, less near the length limits)
  // MTP drafters (wants_hidden_states): the target's final-normed hidden row (hidden_size
  // floats) at the position before the newest token, and the sequence's block tables in the
  // target's KV cache (covering every position before the newest token). Empty otherwise.
  std::span<const float> target_hidden;
  std::array<std::span<const int32_t>, kNumAttentionTypes> target_block_tables;
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
};

}  // namespace gemmaserve
