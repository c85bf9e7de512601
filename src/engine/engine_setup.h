// Engine start-up decisions that need no running engine: generation defaults from
// --generation-config / --override-generation-config, the stop-token set, and the KV cache size.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "gemmaserve/llm.h"
#include "gemmaserve/sampling_params.h"
#include "kernels/cpu/kv_format.h"
#include "model/config.h"

namespace gemmaserve {

// The sampling defaults vLLM takes from a generation config (get_diff_sampling_param).
struct GenerationDefaults {
  std::optional<double> temperature, top_p, min_p, repetition_penalty;
  std::optional<int> top_k;
  std::optional<int> max_tokens;       // from max_new_tokens
  std::vector<int32_t> eos_token_ids;  // eos_token_id of the chosen config and the override
  std::string source;                  // what the defaults came from, for the log
};

// `generation_config`: "auto" reads the model folder's generation_config.json, "vllm" uses
// none, anything else is a folder holding one. `override_json` (empty = none) is a JSON object
// whose keys replace the loaded ones. Throws InputError for a missing folder or bad JSON.
GenerationDefaults resolve_generation_defaults(const std::filesystem::path& model_dir,
                                               const std::string& generation_config,
                                               const std::string& override_json);

// SamplingParams() with the defaults applied.
SamplingParams apply_generation_defaults(const GenerationDefaults& defaults);

// The union of every eos id: the checkpoint's generation_config.json and config.json, the
// tokenizer's, and the chosen/overridden generation config's. Sorted, unique.
std::vector<int32_t> collect_eos_token_ids(const GenerationConfig& checkpoint_generation,
                                           const ModelConfig& config,
                                           const std::vector<int32_t>& tokenizer_eos,
                                           const GenerationDefaults& defaults);

// MemAvailable from /proc/meminfo in bytes, or nullopt when unreadable.
std::optional<int64_t> available_memory_bytes();

struct KvCacheBudget {
  int64_t bytes = 0;
  std::string reason;  // how it was chosen, for the start-up log
};

// KV cache bytes: --kv-cache-memory-bytes as given; else --gpu-memory-utilization times
// `available_bytes`; else min(4 GiB, half of it). Without explicit bytes, never more than twice
// what max_num_seqs sequences of max_model_len tokens hold (the split between attention types
// cannot fit every mix of lengths exactly, hence the factor). Throws InputError for bad values.
// `kv_dtype` is what the cache stores (sets the bytes of that cap).
KvCacheBudget choose_kv_cache_budget(const EngineArgs& args, const TextConfig& config,
                                     int max_model_len, std::optional<int64_t> available_bytes,
                                     cpu::KvDtype kv_dtype);

}  // namespace gemmaserve
