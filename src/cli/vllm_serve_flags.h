// The `vllm serve` flags gemmaserve does not run through its own options: each is refused with
// the reason, accepted with one WARNING (a GPU-only hint that changes nothing here), or accepted
// silently because what it asks is how gemmaserve always works. docs/PROTOCOL.md ("serve flags")
// shows the same table with every implemented flag, and serve_flag_table_test holds them equal.
#pragma once

#include <string>
#include <vector>

#include "cli/arg_parser.h"

namespace gemmaserve {

enum class FlagArity { kBool, kValue, kValues, kJson };  // kValues: vLLM's nargs="+" (or append)
enum class FlagPolicy { kRefused, kHintWarning, kInEffect };

struct VllmFlagRule {
  std::string name;
  std::vector<std::string> aliases;
  FlagArity arity;
  FlagPolicy policy;
  // Values that are gemmaserve's behaviour already, accepted without a word ("true" for a bool
  // flag given, "false" for --no-...); any other value gets `policy`.
  std::vector<std::string> accepted_values;
  std::string why;  // "<what it does in vLLM>; <why gemmaserve does not>"
};

const std::vector<VllmFlagRule>& vllm_flag_rules();

// Declares every rule's flag (and aliases) on `parser`.
void declare_vllm_flag_rules(ArgParser& parser);

// For each rule's flag given: InputError "<flag>: <why>" (refused), one WARNING "<flag>: <why>"
// (hint), nothing (in effect, or an accepted value).
void apply_vllm_flag_rules(const ArgParser& parser);

}  // namespace gemmaserve
