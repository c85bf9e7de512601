// `--config FILE.yaml`, as vLLM's FlexibleArgumentParser reads it: a YAML mapping of flag names
// (dashes or underscores) to values, which the command line overrides flag by flag.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "cli/arg_parser.h"
#include "core/error.h"

namespace gemmaserve {

// The flags a --config file set, each with the line that set it.
class ConfigFileFlags {
 public:
  ConfigFileFlags() = default;
  ConfigFileFlags(std::string path, std::map<std::string, int> lines)
      : path_(std::move(path)), lines_(std::move(lines)) {}

  // `error` with " (line N of --config FILE)" added when it names a flag the file set, so that a
  // bad value (a text where a number goes) points at its line; otherwise `error` as it is.
  InputError explain(const InputError& error) const;

  // read_flags(), its InputError explained.
  template <typename ReadFlags>
  auto explaining(ReadFlags&& read_flags) const -> decltype(read_flags()) {
    try {
      return read_flags();
    } catch (const InputError& e) {
      throw explain(e);
    }
  }

 private:
  std::string path_;
  std::map<std::string, int> lines_;  // canonical flag -> 1-based line
};

// Parses `args` into `parser` (which declares --config); a `--config FILE` among them adds the
// file's settings for every flag the command line does not give, whatever the order. The values
// as YAML: a boolean for a switch (false: its --no- form), a scalar for a value, a scalar or a
// list of scalars for a list flag, a mapping or list for a JSON flag (written as JSON text). When
// the command takes a positional (max_positionals > 0), the key `model` is its first one unless
// the command line gives a positional or --model. InputError "--config FILE: line N: ..." for an
// unknown key, a duplicate, a value of the wrong shape, invalid YAML; "--config FILE: ..." for a
// file that cannot be read.
ConfigFileFlags parse_with_config_file(ArgParser& parser, const std::vector<std::string>& args,
                                       size_t max_positionals);

}  // namespace gemmaserve
