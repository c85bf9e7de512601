// Command-line flags in vLLM's style: --name value, --name=value, repeatable flags, booleans
// (--flag / --no-flag), positionals, and "--" ending the flags.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace gemmaserve {

class ArgParser {
 public:
  // Declares a flag taking a value; aliases are other spellings of the same flag.
  ArgParser& value(const std::string& name, std::vector<std::string> aliases = {});
  // Declares a boolean flag; --no-NAME sets it false.
  ArgParser& flag(const std::string& name, std::vector<std::string> aliases = {});

  // Parses args (without program and subcommand names). Throws InputError for unknown flags,
  // missing values and stray positionals beyond max_positionals.
  void parse(const std::vector<std::string>& args, size_t max_positionals);

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
  std::string canonical(const std::string& spelled) const;
  std::map<std::string, std::string> alias_to_name_;
  std::set<std::string> value_flags_, bool_flags_;
  std::map<std::string, std::vector<std::string>> values_;
  std::map<std::string, bool> bools_;
  std::vector<std::string> positionals_, after_dashes_;
};

// Parses "2,45,67" into ids; throws InputError naming `what` on bad input.
std::vector<int> parse_int_list(const std::string& text, const std::string& what);

}  // namespace gemmaserve
