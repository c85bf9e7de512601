// --speculative-config: vLLM's SpeculativeConfig JSON (the same keys, defaults and checks for
// what gemmaserve runs), parsed and validated before any weights load.
#pragma once

#include <optional>
#include <string>

namespace gemmaserve {

struct SpeculativeConfig {
  // "ngram" (prompt lookup), "draft_model" (a smaller Gemma 4 as draft) or "mtp" (Gemma 4's
  // assistant drafter). With only `model` given: "draft_model", or "mtp" when the checkpoint's
  // model_type is gemma4_assistant.
  std::string method;
  std::string model;  // the draft checkpoint folder (draft_model / mtp)
  int num_speculative_tokens = 0;
  int prompt_lookup_min = 0;  // ngram: shortest suffix matched
  int prompt_lookup_max = 0;  // ngram: longest suffix matched
  std::string quantization;   // the draft model's load-time quantization ("" = none)
};

// Parses the flag's JSON text (empty: speculation off). Throws InputError naming the key for
// unknown keys, wrong types, bad values and methods gemmaserve does not run.
std::optional<SpeculativeConfig> parse_speculative_config(const std::string& json_text);

}  // namespace gemmaserve
