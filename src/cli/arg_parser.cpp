#include "cli/arg_parser.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <utility>

#include "core/error.h"

namespace gemmaserve {

ArgParser& ArgParser::declare(const std::string& name, std::vector<std::string> aliases,
                              FlagKind kind) {
  kinds_[name] = kind;
  alias_to_name_[name] = name;
  for (auto& a : aliases) alias_to_name_[a] = name;
  return *this;
}

ArgParser& ArgParser::value(const std::string& name, std::vector<std::string> aliases) {
  return declare(name, std::move(aliases), FlagKind::kValue);
}

ArgParser& ArgParser::list(const std::string& name, std::vector<std::string> aliases) {
  return declare(name, std::move(aliases), FlagKind::kList);
}

ArgParser& ArgParser::json(const std::string& name, std::vector<std::string> aliases) {
  return declare(name, std::move(aliases), FlagKind::kJson);
}

ArgParser& ArgParser::flag(const std::string& name, std::vector<std::string> aliases) {
  return declare(name, std::move(aliases), FlagKind::kSwitch);
}

std::vector<std::string> ArgParser::declared_flags() const {
  std::vector<std::string> names;
  for (const auto& [name, kind] : kinds_) names.push_back(name);
  return names;
}

std::string ArgParser::canonical(const std::string& spelled) const {
  auto it = alias_to_name_.find(spelled);
  if (it != alias_to_name_.end()) return it->second;
  // vLLM accepts underscores for dashes in flag names.
  std::string dashed = spelled;
  for (size_t i = 2; i < dashed.size(); ++i) {
    if (dashed[i] == '_') dashed[i] = '-';
  }
  it = alias_to_name_.find(dashed);
  return it == alias_to_name_.end() ? "" : it->second;
}

std::optional<ArgParser::Spelling> ArgParser::find(const std::string& spelled) const {
  if (const std::string name = canonical(spelled); !name.empty()) {
    return Spelling{name, kinds_.at(name), false};
  }
  if (spelled.rfind("--no-", 0) == 0 || spelled.rfind("--no_", 0) == 0) {
    const std::string positive = canonical("--" + spelled.substr(5));
    if (!positive.empty() && kinds_.at(positive) == FlagKind::kSwitch) {
      return Spelling{positive, FlagKind::kSwitch, true};
    }
  }
  return std::nullopt;
}

void ArgParser::parse(const std::vector<std::string>& args, size_t max_positionals) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      after_dashes_.assign(args.begin() + static_cast<long>(i) + 1, args.end());
      return;
    }
    // Long flags, and registered single-dash aliases such as -q or -h (anything else that
    // starts with one dash, e.g. -1, stays a positional).
    const bool long_flag = a.size() > 2 && a.rfind("--", 0) == 0;
    const bool short_alias = a.size() >= 2 && a[0] == '-' && a[1] != '-' &&
                             alias_to_name_.count(a.substr(0, a.find('='))) != 0;
    if (long_flag || short_alias) {
      std::string spelled = a, inline_value;
      bool has_inline = false;
      if (auto eq = a.find('='); eq != std::string::npos) {
        spelled = a.substr(0, eq);
        inline_value = a.substr(eq + 1);
        has_inline = true;
      }
      const std::optional<Spelling> flag = find(spelled);
      if (!flag) throw InputError("unknown flag " + spelled);
      const std::string& name = flag->name;
      if (flag->negated) {
        if (has_inline) throw InputError("flag " + spelled + " takes no value");
        bools_[name] = false;
        continue;
      }
      if (flag->kind == FlagKind::kSwitch) {
        if (has_inline) {
          if (inline_value == "true" || inline_value == "1") {
            bools_[name] = true;
          } else if (inline_value == "false" || inline_value == "0") {
            bools_[name] = false;
          } else {
            throw InputError("flag " + spelled + " expects true or false, got '" + inline_value +
                             "'");
          }
        } else {
          bools_[name] = true;
        }
        continue;
      }
      if (!has_inline) {
        if (i + 1 >= args.size()) throw InputError("flag " + spelled + " needs a value");
        inline_value = args[++i];
      }
      values_[name].push_back(inline_value);
      continue;
    }
    positionals_.push_back(a);
    if (positionals_.size() > max_positionals) throw InputError("unexpected argument '" + a + "'");
  }
}

bool ArgParser::has(const std::string& name) const {
  return values_.count(name) || bools_.count(name);
}

std::optional<std::string> ArgParser::get(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end() || it->second.empty()) return std::nullopt;
  return it->second.back();
}

const std::vector<std::string>& ArgParser::all(const std::string& name) const {
  static const std::vector<std::string> kEmpty;
  auto it = values_.find(name);
  return it == values_.end() ? kEmpty : it->second;
}

bool ArgParser::get_flag(const std::string& name, bool fallback) const {
  auto it = bools_.find(name);
  return it == bools_.end() ? fallback : it->second;
}

int ArgParser::get_int(const std::string& name, int fallback) const {
  auto v = get(name);
  if (!v) return fallback;
  errno = 0;
  char* end = nullptr;
  long x = std::strtol(v->c_str(), &end, 10);
  if (v->empty() || *end != '\0' || errno == ERANGE || x < -2147483648L || x > 2147483647L) {
    throw InputError("flag " + name + " expects an integer, got '" + *v + "'");
  }
  return static_cast<int>(x);
}

int ArgParser::get_positive_int(const std::string& name, int fallback) const {
  const int v = get_int(name, fallback);
  if (v <= 0) throw InputError(name + " must be positive, got " + std::to_string(v));
  return v;
}

int ArgParser::get_non_negative_int(const std::string& name, int fallback) const {
  const int v = get_int(name, fallback);
  if (v < 0) throw InputError(name + " must be >= 0, got " + std::to_string(v));
  return v;
}

double ArgParser::get_double(const std::string& name, double fallback) const {
  auto v = get(name);
  if (!v) return fallback;
  char* end = nullptr;
  double x = std::strtod(v->c_str(), &end);
  if (v->empty() || *end != '\0' || !std::isfinite(x)) {
    throw InputError("flag " + name + " expects a number, got '" + *v + "'");
  }
  return x;
}

std::vector<int> parse_int_list(const std::string& text, const std::string& what) {
  std::vector<int> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    std::string item =
        text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    char* end = nullptr;
    errno = 0;
    long x = item.empty() ? 0 : std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || errno == ERANGE || x < -2147483648L || x > 2147483647L) {
      throw InputError(what + ": '" + item + "' is not an integer (expected a list like 2,45,67)");
    }
    out.push_back(static_cast<int>(x));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

}  // namespace gemmaserve
