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
#include "kernels/cpu/kv_format.h"

namespace gemmaserve {

struct EngineArgs;
struct ModelConfig;
class ThreadPool;
class KvCache;
struct ModelWeights;

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

// What a draft model needs of the target.
struct SpeculativeTarget {
  int vocab_size = 0;
  int max_model_len = 0;
  int64_t kv_tokens = 0;  // token slots of the target's cache: the draft's gets as many
  cpu::KvDtype kv_dtype = cpu::KvDtype::kBF16;
  std::shared_ptr<ThreadPool> pool;  // the target's: the draft runs between its steps
  // The MTP drafter reads the target's embedding table and KV cache (both outlive it).
  const ModelWeights* weights = nullptr;
  const KvCache* cache = nullptr;
};

// The engine's speculative decoding from --speculative-config (nullptr when empty); loads a
// draft model or the Gemma 4 assistant drafter (method "mtp", or a `model` whose model_type is
// gemma4_assistant). InputError for a bad config, a draft whose vocabulary differs from the
// target's, and "mtp" without a `model`.
std::unique_ptr<SpeculativeDecoding> make_speculative_decoding(const EngineArgs& args,
                                                               const SpeculativeTarget& target);

}  // namespace gemmaserve
