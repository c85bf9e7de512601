// Command-line flags in vLLM's style: --name value, --name=value, repeatable flags, booleans
// (--flag / --no-flag), positionals, and "--" ending the flags.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace gemmaserve {

// What a flag takes; a --config file checks its values' YAML shapes by it (cli/config_file.h).
enum class FlagKind {
  kSwitch,  // no value: --flag / --no-flag
  kValue,   // one value (the last one given counts)
  kList,    // one or more values (vLLM's nargs="+" or append), all() has them all
  kJson,    // one value, JSON text
};

class ArgParser {
 public:
  // Declares a flag taking a value; aliases are other spellings of the same flag.
  ArgParser& value(const std::string& name, std::vector<std::string> aliases = {});
  // Declares a flag that may be given several times, each value kept.
  ArgParser& list(const std::string& name, std::vector<std::string> aliases = {});
  // Declares a flag whose value is JSON text.
  ArgParser& json(const std::string& name, std::vector<std::string> aliases = {});
  // Declares a boolean flag; --no-NAME sets it false.
  ArgParser& flag(const std::string& name, std::vector<std::string> aliases = {});

  // Parses args (without program and subcommand names). Throws InputError for unknown flags,
  // missing values and stray positionals beyond max_positionals. A second call adds to what the
  // first one parsed.
  void parse(const std::vector<std::string>& args, size_t max_positionals);

  // A declared flag as spelled: "--max_model_len", an alias, or "--no-X" of a switch X.
  struct Spelling {
    std::string name;  // canonical
    FlagKind kind;
    bool negated;  // --no-X
  };
  std::optional<Spelling> find(const std::string& spelled) const;

  bool has(const std::string& name) const;
  std::optional<std::string> get(const std::string& name) const;  // last occurrence
  const std::vector<std::string>& all(const std::string& name) const;
  bool get_flag(const std::string& name, bool fallback = false) const;
  int get_int(const std::string& name, int fallback) const;
  // get_int, InputError "NAME must be positive, got V" unless > 0.
  int get_positive_int(const std::string& name, int fallback) const;
  // get_int, InputError "NAME must be >= 0, got V" unless >= 0 (0: a default such as all cores).
  int get_non_negative_int(const std::string& name, int fallback) const;
  double get_double(const std::string& name, double fallback) const;
  const std::vector<std::string>& positionals() const { return positionals_; }
  // Every declared flag under its canonical name (aliases left out), sorted.
  std::vector<std::string> declared_flags() const;
  const std::vector<std::string>& after_dashes() const { return after_dashes_; }

 private:
  ArgParser& declare(const std::string& name, std::vector<std::string> aliases, FlagKind kind);
  std::string canonical(const std::string& spelled) const;
  std::map<std::string, std::string> alias_to_name_;
  std::map<std::string, FlagKind> kinds_;
  std::map<std::string, std::vector<std::string>> values_;
  std::map<std::string, bool> bools_;
  std::vector<std::string> positionals_, after_dashes_;
};

// Parses "2,45,67" into ids; throws InputError naming `what` on bad input.
std::vector<int> parse_int_list(const std::string& text, const std::string& what);

}  // namespace gemmaserve
