#include "engine/engine_setup.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/error.h"
#include "engine/kv_cache_manager.h"

namespace gemmaserve {
namespace {

using nlohmann::json;

constexpr int64_t kDefaultKvCacheCap = int64_t{4} << 30;  // vLLM's CPU default KV space
constexpr double kDefaultMemoryFraction = 0.5;

std::optional<double> number_field(const json& obj, const char* key, const std::string& source) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) {
    throw InputError(source + ": field '" + key + "' must be a number");
  }
  return it->get<double>();
}

std::optional<int> int_field(const json& obj, const char* key, const std::string& source) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  if (!it->is_number_integer()) {
    throw InputError(source + ": field '" + key + "' must be an integer");
  }
  return it->get<int>();
}

std::vector<int32_t> id_list_field(const json& obj, const char* key, const std::string& source) {
  std::vector<int32_t> ids;
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return ids;
  if (it->is_number_integer()) return {it->get<int32_t>()};
  if (it->is_array()) {
    for (const json& e : *it) {
      if (!e.is_number_integer()) break;
      ids.push_back(e.get<int32_t>());
    }
    if (ids.size() == it->size()) return ids;
  }
  throw InputError(source + ": field '" + key + "' must be an integer or a list of integers");
}

std::string mib(int64_t bytes) {
  std::ostringstream s;
  s.precision(1);
  s << std::fixed << static_cast<double>(bytes) / (1 << 20) << " MiB";
  return s.str();
}

// Bytes `max_num_seqs` sequences of max_model_len tokens hold at most, plus the blocks of the
// largest prefill chunk one step can write.
int64_t bytes_for_full_batch(const EngineArgs& args, const TextConfig& config, int max_model_len,
                             cpu::KvDtype kv_dtype) {
  int64_t total = 0;
  const int chunk = args.long_prefill_token_threshold > 0
                        ? std::min(args.long_prefill_token_threshold, args.max_num_batched_tokens)
                        : args.max_num_batched_tokens;
  for (int t = 0; t < kNumAttentionTypes; ++t) {
    const auto type = static_cast<AttentionType>(t);
    const int64_t block_bytes = group_bytes_per_block(config, type, args.block_size, kv_dtype);
    if (block_bytes == 0) continue;
    const int window = type == AttentionType::kSliding ? config.sliding_window : 0;
    const int64_t steady = steady_blocks_per_sequence(max_model_len, args.block_size, window);
    const int64_t chunk_blocks = (chunk + args.block_size - 1) / args.block_size;
    total += block_bytes * (steady * args.max_num_seqs + chunk_blocks);
  }
  return total;
}

}  // namespace

GenerationDefaults resolve_generation_defaults(const std::filesystem::path& model_dir,
                                               const std::string& generation_config,
                                               const std::string& override_json) {
  GenerationDefaults d;
  json merged = json::object();
  if (generation_config == "auto") {
    merged = load_generation_config(model_dir).raw;
    d.source = (model_dir / "generation_config.json").string();
  } else if (generation_config != "vllm") {
    const std::filesystem::path dir(generation_config);
    if (!std::filesystem::is_directory(dir)) {
      throw InputError("--generation-config: '" + generation_config +
                       "' is not 'auto', 'vllm' or a folder");
    }
    merged = load_generation_config(dir).raw;
    d.source = (dir / "generation_config.json").string();
  }
  if (!merged.is_object()) merged = json::object();
  if (!override_json.empty()) {
    json patch;
    try {
      patch = json::parse(override_json);
    } catch (const json::parse_error& e) {
      throw InputError(std::string("--override-generation-config: invalid JSON: ") + e.what());
    }
    if (!patch.is_object()) {
      throw InputError("--override-generation-config: must be a JSON object");
    }
    merged.update(patch);
    d.source +=
        d.source.empty() ? "--override-generation-config" : " + --override-generation-config";
  }
  const std::string src = d.source.empty() ? "generation config" : d.source;
  d.temperature = number_field(merged, "temperature", src);
  d.top_p = number_field(merged, "top_p", src);
  d.min_p = number_field(merged, "min_p", src);
  d.repetition_penalty = number_field(merged, "repetition_penalty", src);
  d.top_k = int_field(merged, "top_k", src);
  d.max_tokens = int_field(merged, "max_new_tokens", src);
  d.eos_token_ids = id_list_field(merged, "eos_token_id", src);
  return d;
}

SamplingParams apply_generation_defaults(const GenerationDefaults& d) {
  SamplingParams p;
  if (d.temperature) p.temperature = *d.temperature;
  if (d.top_p) p.top_p = *d.top_p;
  if (d.min_p) p.min_p = *d.min_p;
  if (d.repetition_penalty) p.repetition_penalty = *d.repetition_penalty;
  if (d.top_k) p.top_k = *d.top_k;
  if (d.max_tokens) p.max_tokens = *d.max_tokens;
  return p;
}

std::vector<int32_t> collect_eos_token_ids(const GenerationConfig& checkpoint_generation,
                                           const ModelConfig& config,
                                           const std::vector<int32_t>& tokenizer_eos,
                                           const GenerationDefaults& defaults) {
  std::set<int32_t> ids(checkpoint_generation.eos_token_ids.begin(),
                        checkpoint_generation.eos_token_ids.end());
  ids.insert(config.eos_token_ids.begin(), config.eos_token_ids.end());
  ids.insert(tokenizer_eos.begin(), tokenizer_eos.end());
  ids.insert(defaults.eos_token_ids.begin(), defaults.eos_token_ids.end());
  return {ids.begin(), ids.end()};
}

std::optional<int64_t> available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (in >> key >> kib) {
    std::getline(in, unit);
    if (key == "MemAvailable:") return kib * 1024;
  }
  return std::nullopt;
}

KvCacheBudget choose_kv_cache_budget(const EngineArgs& args, const TextConfig& config,
                                     int max_model_len, std::optional<int64_t> available_bytes,
                                     cpu::KvDtype kv_dtype) {
  KvCacheBudget b;
  if (args.kv_cache_memory_bytes) {
    if (*args.kv_cache_memory_bytes <= 0) {
      throw InputError("--kv-cache-memory-bytes must be positive, got " +
                       std::to_string(*args.kv_cache_memory_bytes));
    }
    b.bytes = *args.kv_cache_memory_bytes;
    b.reason = "--kv-cache-memory-bytes";
    return b;
  }
  if (args.gpu_memory_utilization) {
    const double u = *args.gpu_memory_utilization;
    if (!(u > 0.0 && u <= 1.0)) {
      throw InputError("--gpu-memory-utilization must be in (0, 1], got " + std::to_string(u));
    }
  }
  if (!available_bytes) {
    b.bytes = kDefaultKvCacheCap;
    b.reason = "4 GiB default (MemAvailable unreadable)";
  } else if (args.gpu_memory_utilization) {
    b.bytes =
        static_cast<int64_t>(*args.gpu_memory_utilization * static_cast<double>(*available_bytes));
    b.reason = "--gpu-memory-utilization " + std::to_string(*args.gpu_memory_utilization) + " of " +
               mib(*available_bytes) + " available";
  } else {
    b.bytes = std::min(
        kDefaultKvCacheCap,
        static_cast<int64_t>(kDefaultMemoryFraction * static_cast<double>(*available_bytes)));
    b.reason = "min(4 GiB, half of " + mib(*available_bytes) +
               " available); set --kv-cache-memory-bytes to choose";
  }
  const int64_t useful = 2 * bytes_for_full_batch(args, config, max_model_len, kv_dtype);
  if (useful > 0 && useful < b.bytes) {
    b.bytes = useful;
    b.reason += ", capped at twice what --max-num-seqs sequences of --max-model-len use";
  }
  return b;
}

}  // namespace gemmaserve
