// Speculative decoding in the engine (vLLM v1's scheme): after a step samples, the proposer
// drafts up to k tokens per sequence; the scheduler computes each decoding sequence's last token
// and its drafts as one small chunk of the next step's single forward (1 + k query tokens, all
// logits kept), verify_drafts accepts a prefix and adds one token of the target's own, and the
// scheduler rolls the rest back (Scheduler::set_draft_tokens, StepResult::accepted_drafts).
// This object holds the proposer and vLLM's spec_decode counters.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/speculative/draft_proposer.h"
#include "engine/speculative/speculative_config.h"

namespace gemmaserve {

struct EngineArgs;
struct ModelConfig;

// vLLM's vllm:spec_decode_* counters.
struct SpeculativeStats {
  uint64_t num_drafts = 0;           // sequences verified with at least one draft, per step
  uint64_t num_draft_tokens = 0;     // drafts verified
  uint64_t num_accepted_tokens = 0;  // drafts accepted
  std::vector<uint64_t> accepted_per_position;  // index i: drafts accepted at position i
};

class SpeculativeDecoding {
 public:
  SpeculativeDecoding(SpeculativeConfig config, std::unique_ptr<DraftProposer> proposer);

  const SpeculativeConfig& config() const { return config_; }
  int num_speculative_tokens() const { return config_.num_speculative_tokens; }
  DraftProposer& proposer() { return *proposer_; }

  // Counts one verified sequence (any thread).
  void record(int num_drafts, int num_accepted);
  SpeculativeStats stats() const;

 private:
  SpeculativeConfig config_;
  std::unique_ptr<DraftProposer> proposer_;
  mutable std::mutex mutex_;
  SpeculativeStats stats_;
};

// The engine's speculative decoding from --speculative-config (nullptr when empty). Checks the
// draft against the target (`target`: its config; `vocab_size`: its vocabulary) and loads it.
// InputError for a bad config, a draft whose vocabulary differs or that does not pair with the
// target. An MTP proposer still needs DraftProposer::bind_target once the target is loaded.
std::unique_ptr<SpeculativeDecoding> make_speculative_decoding(const EngineArgs& args,
                                                               const ModelConfig& target,
                                                               int vocab_size);

}  // namespace gemmaserve
