#include "cli/config_file.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <set>
#include <sstream>

namespace gemmaserve {
namespace {

using ordered_json = nlohmann::ordered_json;

// One key of the file as the command-line arguments it stands for.
struct Setting {
  std::string flag;               // canonical; "" for the positional model
  std::vector<std::string> args;  // {"--max-model-len", "4096"}, {"--no-X"}, {"MODEL_DIR"}
  int line;
};

int line_of(const YAML::Node& node) { return static_cast<int>(node.Mark().line) + 1; }

// Untagged, unquoted: the scalars PyYAML types by their text.
bool is_plain(const YAML::Node& node) { return node.IsScalar() && node.Tag() == "?"; }

// PyYAML's (YAML 1.1) booleans: vLLM reads its config files with yaml.safe_load.
std::optional<bool> yaml_bool(const YAML::Node& node) {
  if (!is_plain(node)) return std::nullopt;
  static const std::set<std::string> kTrue = {"true", "True", "TRUE", "yes", "Yes",
                                              "YES",  "on",   "On",   "ON"};
  static const std::set<std::string> kFalse = {"false", "False", "FALSE", "no", "No",
                                               "NO",    "off",   "Off",   "OFF"};
  if (kTrue.count(node.Scalar())) return true;
  if (kFalse.count(node.Scalar())) return false;
  return std::nullopt;
}

// How a value looks, for errors: "a mapping", "a list", "no value" or its text in quotes.
std::string shape_of(const YAML::Node& node) {
  if (node.IsMap()) return "a mapping";
  if (node.IsSequence()) return "a list";
  if (node.IsNull()) return "no value";
  return "'" + node.Scalar() + "'";
}

std::string without_underscores(std::string text) {
  text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
  return text;
}

class ConfigFileReader {
 public:
  ConfigFileReader(std::string path, const ArgParser& parser, size_t max_positionals)
      : path_(std::move(path)), parser_(parser), max_positionals_(max_positionals) {}

  std::vector<Setting> read() const {
    const YAML::Node root = load();
    std::vector<Setting> settings;
    if (root.IsNull()) return settings;  // empty, or comments only
    if (!root.IsMap()) {
      throw error(line_of(root),
                  "must be a mapping of flag names to values, got " + shape_of(root));
    }
    std::map<std::string, int> first_line;  // canonical flag -> line, for duplicates
    for (auto it = root.begin(); it != root.end(); ++it) {
      const YAML::Node key = it->first;  // a copy: the iterator's pair is a temporary
      const int line = line_of(key);
      if (!key.IsScalar()) throw error(line, "a key must be a flag name, got " + shape_of(key));
      if (auto [seen, inserted] = first_line.emplace(setting_key(key.Scalar()), line); !inserted) {
        throw error(line, "duplicate key '" + key.Scalar() + "' (first set on line " +
                              std::to_string(seen->second) + ")");
      }
      if (auto setting = setting_of(key.Scalar(), it->second, line)) settings.push_back(*setting);
    }
    return settings;
  }

  InputError error(int line, const std::string& what) const {
    return InputError("--config " + path_ + ": line " + std::to_string(line) + ": " + what);
  }

 private:
  YAML::Node load() const {
    const std::string extension = std::filesystem::path(path_).extension().string();
    if (extension != ".yaml" && extension != ".yml") {
      throw InputError("--config " + path_ + ": must be a .yaml or .yml file");
    }
    if (std::filesystem::is_directory(path_)) {
      throw InputError("--config " + path_ + ": cannot be read (it is a directory)");
    }
    std::ifstream in(path_, std::ios::binary);
    if (!in) {
      throw InputError("--config " + path_ + ": cannot be read (" + std::strerror(errno) + ")");
    }
    std::ostringstream text;
    text << in.rdbuf();
    std::vector<YAML::Node> documents;
    try {
      documents = YAML::LoadAll(text.str());
    } catch (const YAML::ParserException& e) {
      throw error(e.mark.line + 1, "invalid YAML: " + e.msg);
    }
    if (documents.size() > 1) {
      throw error(line_of(documents[1]), "a second YAML document; the file must be one mapping");
    }
    return documents.empty() ? YAML::Node() : documents[0];
  }

  // Keys that name the same flag collide: max_model_len and max-model-len, an alias, no-X and X.
  std::string setting_key(const std::string& key) const {
    if (is_model_positional(key)) return "model";
    const std::optional<ArgParser::Spelling> flag = parser_.find("--" + key);
    return flag ? flag->name : key;
  }

  bool is_model_positional(const std::string& key) const {
    return key == "model" && max_positionals_ > 0;
  }

  // The setting of one key; nullopt for a `no-X: false` (vLLM adds nothing for it).
  std::optional<Setting> setting_of(const std::string& key, const YAML::Node& value,
                                    int line) const {
    if (is_model_positional(key)) return Setting{"", {scalar_text(key, value, line)}, line};
    const std::optional<ArgParser::Spelling> flag = parser_.find("--" + key);
    if (!flag) {
      if (key.rfind('-', 0) == 0) {
        throw error(line, "unknown key '" + key + "' (keys are flag names without the dashes)");
      }
      throw error(line, "unknown key '" + key + "' (no flag --" + key + ")");
    }
    if (flag->name == "--config") throw error(line, "a config file cannot name another (config)");
    Setting setting{flag->name, {}, line};
    const std::string& name = flag->name;
    switch (flag->kind) {
      case FlagKind::kSwitch: {
        const std::optional<bool> on = yaml_bool(value);
        if (!on) {
          throw error(line,
                      "'" + key + "' is a switch: expected true or false, got " + shape_of(value));
        }
        if (flag->negated && !*on) return std::nullopt;
        const bool set = flag->negated ? false : *on;
        setting.args = {set ? name : "--no-" + name.substr(2)};
        break;
      }
      case FlagKind::kValue:
        setting.args = {name, scalar_text(key, value, line)};
        break;
      case FlagKind::kJson:
        if (value.IsMap() || value.IsSequence()) {
          setting.args = {name, to_json(value, key).dump()};
        } else {
          setting.args = {name, scalar_text(key, value, line)};
        }
        break;
      case FlagKind::kList:
        if (!value.IsSequence()) {
          setting.args = {name, scalar_text(key, value, line)};
          break;
        }
        for (const YAML::Node& item : value) {
          if (!item.IsScalar()) {
            throw error(line_of(item),
                        "'" + key + "' takes a list of values, got " + shape_of(item) + " in it");
          }
          setting.args.push_back(name);
          setting.args.push_back(item.Scalar());
        }
        break;
    }
    return setting;
  }

  // The text of a one-value key, as written (vLLM passes str(value) on).
  std::string scalar_text(const std::string& key, const YAML::Node& value, int line) const {
    if (value.IsNull()) throw error(line, "'" + key + "' has no value");
    if (!value.IsScalar())
      throw error(line, "'" + key + "' takes one value, got " + shape_of(value));
    return value.Scalar();
  }

  // A YAML value as the JSON vLLM's json.dumps writes of what yaml.safe_load read.
  ordered_json to_json(const YAML::Node& node, const std::string& where) const {
    if (node.IsNull()) return nullptr;
    if (node.IsScalar()) return scalar_json(node, where);
    if (node.IsSequence()) {
      ordered_json array = ordered_json::array();
      for (size_t i = 0; i < node.size(); ++i) {
        array.push_back(to_json(node[i], where + "[" + std::to_string(i) + "]"));
      }
      return array;
    }
    ordered_json object = ordered_json::object();
    std::map<std::string, int> first_line;
    for (auto it = node.begin(); it != node.end(); ++it) {
      const YAML::Node key = it->first;  // a copy: the iterator's pair is a temporary
      if (!key.IsScalar() && !key.IsNull()) {
        throw error(line_of(key), "a key of '" + where + "' must be text, got " + shape_of(key));
      }
      const std::string name = key.IsNull() ? "null" : key.Scalar();
      if (auto [seen, inserted] = first_line.emplace(name, line_of(key)); !inserted) {
        throw error(line_of(key), "duplicate key '" + where + "." + name + "' (first set on line " +
                                      std::to_string(seen->second) + ")");
      }
      object[name] = to_json(it->second, where + "." + name);
    }
    return object;
  }

  // PyYAML's typing of a plain scalar (boolean, integer, float, else text); quoted is text.
  ordered_json scalar_json(const YAML::Node& node, const std::string& where) const {
    if (!is_plain(node)) return node.Scalar();
    if (const std::optional<bool> b = yaml_bool(node)) return *b;
    static const std::regex kInt(R"([-+]?(0|[1-9][0-9_]*))");
    static const std::regex kFloat(
        R"([-+]?[0-9][0-9_]*\.[0-9_]*([eE][-+][0-9]+)?|\.[0-9][0-9_]*([eE][-+][0-9]+)?)");
    static const std::regex kInfNan(R"([-+]?\.(inf|Inf|INF)|\.(nan|NaN|NAN))");
    const std::string& text = node.Scalar();
    if (std::regex_match(text, kInt)) {
      const std::string digits = without_underscores(text);
      errno = 0;
      const long long x = std::strtoll(digits.c_str(), nullptr, 10);
      if (errno != ERANGE) return x;
      return std::strtod(digits.c_str(), nullptr);
    }
    if (std::regex_match(text, kFloat)) {
      return std::strtod(without_underscores(text).c_str(), nullptr);
    }
    if (std::regex_match(text, kInfNan)) {
      throw error(line_of(node), "'" + where + "' is " + text + ", which JSON cannot hold");
    }
    return text;
  }

  std::string path_;
  const ArgParser& parser_;
  size_t max_positionals_;
};

bool is_flag_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
}

// Where `flag` appears in `text` as a whole word, npos when it does not.
size_t find_flag_word(const std::string& text, const std::string& flag) {
  for (size_t pos = text.find(flag); pos != std::string::npos; pos = text.find(flag, pos + 1)) {
    const size_t end = pos + flag.size();
    const bool starts = pos == 0 || !is_flag_char(text[pos - 1]);
    const bool ends = end == text.size() || !is_flag_char(text[end]);
    if (starts && ends) return pos;
  }
  return std::string::npos;
}

}  // namespace

InputError ConfigFileFlags::explain(const InputError& error) const {
  const std::string message = error.what();
  size_t first = std::string::npos;
  int line = 0;
  for (const auto& [flag, flag_line] : lines_) {
    const size_t pos = find_flag_word(message, flag);
    if (pos < first) {
      first = pos;
      line = flag_line;
    }
  }
  if (first == std::string::npos) return error;
  return InputError(message + " (line " + std::to_string(line) + " of --config " + path_ + ")");
}

ConfigFileFlags parse_with_config_file(ArgParser& parser, const std::vector<std::string>& args,
                                       size_t max_positionals) {
  parser.parse(args, max_positionals);
  const std::vector<std::string>& paths = parser.all("--config");
  if (paths.empty()) return {};
  if (paths.size() > 1) throw InputError("--config given more than once (one file only)");
  const std::string path = paths[0];
  const std::vector<Setting> settings = ConfigFileReader(path, parser, max_positionals).read();
  const bool model_given =
      !parser.positionals().empty() || (parser.find("--model") && parser.has("--model"));
  std::vector<std::string> file_args;
  std::map<std::string, int> lines;
  for (const Setting& setting : settings) {
    const bool overridden = setting.flag.empty() ? model_given : parser.has(setting.flag);
    if (overridden) continue;
    file_args.insert(file_args.end(), setting.args.begin(), setting.args.end());
    if (!setting.flag.empty()) lines[setting.flag] = setting.line;
  }
  parser.parse(file_args, max_positionals);
  return ConfigFileFlags(path, std::move(lines));
}

}  // namespace gemmaserve
