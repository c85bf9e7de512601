#include "engine/speculative/speculative_config.h"

#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"

namespace gemmaserve {
namespace {

constexpr const char* kFlag = "--speculative-config";

[[noreturn]] void fail(const std::string& message) {
  throw InputError(std::string(kFlag) + ": " + message);
}

int positive_int(const nlohmann::json& v, const std::string& key) {
  if (!v.is_number_integer()) fail("'" + key + "' must be an integer, got " + v.dump());
  const int64_t n = v.get<int64_t>();
  if (n < 1 || n > 1024) fail("'" + key + "' must be in [1, 1024], got " + v.dump());
  return static_cast<int>(n);
}

std::string string_of(const nlohmann::json& v, const std::string& key) {
  if (!v.is_string()) fail("'" + key + "' must be a string, got " + v.dump());
  return v.get<std::string>();
}

// vLLM's other SpeculativeConfig keys: known, but gemmaserve has nothing they could change.
const std::set<std::string>& unsupported_vllm_keys() {
  static const std::set<std::string> keys = {"max_model_len",
                                             "revision",
                                             "code_revision",
                                             "disable_padded_drafter_batch",
                                             "disable_by_batch_size",
                                             "speculative_token_tree",
                                             "parallel_drafting",
                                             "moe_backend",
                                             "attention_backend",
                                             "kv_cache_dtype",
                                             "suffix_decoding_max_tree_depth",
                                             "suffix_decoding_max_cached_requests",
                                             "suffix_decoding_max_spec_factor",
                                             "suffix_decoding_min_token_prob",
                                             "use_local_argmax_reduction",
                                             "use_heterogeneous_vocab",
                                             "num_speculative_tokens_per_batch_size",
                                             "draft_load_config",
                                             "synthetic_acceptance_rates",
                                             "synthetic_acceptance_length",
                                             "disable_logprobs",
                                             "disable_log_stats",
                                             "hf_overrides",
                                             "index_share_for_mtp_iteration"};
  return keys;
}

}  // namespace

std::optional<SpeculativeConfig> parse_speculative_config(const std::string& json_text) {
  if (json_text.empty()) return std::nullopt;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::parse_error& e) {
    fail("not valid JSON (" + std::string(e.what()) + ")");
  }
  if (j.is_null()) return std::nullopt;
  if (!j.is_object()) fail("must be a JSON object, got " + j.dump());
  SpeculativeConfig c;
  bool has_tokens = false;
  for (const auto& [key, v] : j.items()) {
    if (v.is_null()) continue;  // vLLM's None: the default
    if (key == "method") {
      c.method = string_of(v, key);
    } else if (key == "model") {
      c.model = string_of(v, key);
    } else if (key == "num_speculative_tokens") {
      c.num_speculative_tokens = positive_int(v, key);
      has_tokens = true;
    } else if (key == "prompt_lookup_max") {
      c.prompt_lookup_max = positive_int(v, key);
    } else if (key == "prompt_lookup_min") {
      c.prompt_lookup_min = positive_int(v, key);
    } else if (key == "draft_tensor_parallel_size") {
      if (positive_int(v, key) != 1) {
        fail("'draft_tensor_parallel_size' must be 1: the draft runs unsplit on rank 0");
      }
    } else if (key == "tensor_parallel_size") {
      fail(
          "'tensor_parallel_size' is not a valid argument in the speculative config; use "
          "'draft_tensor_parallel_size'");
    } else if (key == "quantization") {
      c.quantization = string_of(v, key);
    } else if (key == "enforce_eager") {
      if (!v.is_boolean()) fail("'enforce_eager' must be a boolean, got " + v.dump());
    } else if (key == "draft_sample_method") {
      if (string_of(v, key) != "greedy") {
        fail("'draft_sample_method' " + v.dump() + " is not supported (only \"greedy\")");
      }
    } else if (key == "rejection_sample_method") {
      if (string_of(v, key) != "standard") {
        fail("'rejection_sample_method' " + v.dump() + " is not supported (only \"standard\")");
      }
    } else if (unsupported_vllm_keys().count(key) > 0) {
      fail("'" + key + "' is a vLLM option gemmaserve does not support");
    } else {
      fail("unknown key '" + key + "'");
    }
  }
  // vLLM's legacy spelling: {"model": "ngram"}.
  if (c.method.empty() && (c.model == "ngram" || c.model == "[ngram]")) {
    c.method = "ngram";
    c.model.clear();
  }
  if (c.method.empty() && !c.model.empty()) c.method = "draft_model";
  if (c.method == "gemma4_mtp") c.method = "mtp";
  static const std::set<std::string> known_vllm = {
      "medusa",       "mlp_speculator", "suffix", "eagle",  "eagle3",
      "custom_class", "ngram_gpu",      "dflash", "dspark", "extract_hidden_states"};
  if (c.method.empty()) fail("'method' or 'model' is required");
  if (known_vllm.count(c.method) > 0) {
    fail("method '" + c.method + "' is not supported by gemmaserve (ngram, draft_model, mtp)");
  }
  if (c.method != "ngram" && c.method != "draft_model" && c.method != "mtp") {
    fail("unknown method '" + c.method + "' (ngram, draft_model, mtp)");
  }
  if (!has_tokens) fail("'num_speculative_tokens' is required");
  if (c.method == "ngram") {
    if (!c.model.empty()) fail("method 'ngram' takes no 'model'");
    if (!c.quantization.empty()) fail("method 'ngram' takes no 'quantization'");
    // vLLM's defaults: 5 for both when neither is given, else the other's value.
    if (c.prompt_lookup_min == 0 && c.prompt_lookup_max == 0) {
      c.prompt_lookup_min = c.prompt_lookup_max = 5;
    } else if (c.prompt_lookup_min == 0) {
      c.prompt_lookup_min = c.prompt_lookup_max;
    } else if (c.prompt_lookup_max == 0) {
      c.prompt_lookup_max = c.prompt_lookup_min;
    }
    if (c.prompt_lookup_min > c.prompt_lookup_max) {
      fail("prompt_lookup_min=" + std::to_string(c.prompt_lookup_min) +
           " must be <= prompt_lookup_max=" + std::to_string(c.prompt_lookup_max));
    }
  } else {
    if (c.prompt_lookup_min != 0 || c.prompt_lookup_max != 0) {
      fail("prompt_lookup_min / prompt_lookup_max apply to method 'ngram' only");
    }
    if (c.method == "draft_model" && c.model.empty()) {
      fail("method 'draft_model' needs 'model' (the draft checkpoint folder)");
    }
  }
  return c;
}

}  // namespace gemmaserve
