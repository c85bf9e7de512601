#include "cli/tokenize_command.h"

#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/arg_parser.h"
#include "core/error.h"
#include "io/gguf.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/hf_tokenizer_json.h"
#include "tokenizer/tokenizer.h"

namespace gemmaserve {
namespace {

namespace fs = std::filesystem;

constexpr const char* kTokenizeUsage =
    "usage: gemmaserve tokenize --tokenizer PATH [--json] [--add-special] [--no-parse-special]\n"
    "                           -- TEXT\n"
    "       gemmaserve tokenize --tokenizer PATH --jsonl FILE\n"
    "  PATH is a tokenizer.json, a .gguf or a model folder. --add-special adds <bos>;\n"
    "  --no-parse-special tokenizes special tokens written in TEXT as plain text.\n"
    "  --jsonl tokenizes each line of FILE (a JSON string; - for stdin), one JSON line each.\n";

constexpr const char* kDetokenizeUsage =
    "usage: gemmaserve detokenize --tokenizer PATH [--json] [--skip-special] -- 2,45,67\n";

constexpr const char* kExportUsage =
    "usage: gemmaserve export-tokenizer --from GGUF --out PATH\n"
    "  PATH ending in .json gets the tokenizer.json; any other PATH is a folder that gets\n"
    "  tokenizer.json and tokenizer_config.json.\n";

Tokenizer load_tokenizer(const ArgParser& p, const char* usage) {
  auto path = p.get("--tokenizer");
  if (!path) throw InputError("missing --tokenizer PATH\n" + std::string(usage));
  return Tokenizer::from_path(*path);
}

std::string join(const std::vector<std::string>& parts, const std::string& separator) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += separator;
    out += parts[i];
  }
  return out;
}

// The text after "--" (words joined by spaces, as the shell split them), else the positional.
std::optional<std::string> free_text(const ArgParser& p) {
  if (!p.after_dashes().empty()) return join(p.after_dashes(), " ");
  if (!p.positionals().empty()) return p.positionals().front();
  return std::nullopt;
}

std::string tokens_json(const std::vector<int32_t>& ids) {
  return nlohmann::json{{"tokens", ids}}.dump();
}

void tokenize_jsonl(const Tokenizer& tokenizer, const std::string& file, bool add_special,
                    bool parse_special, std::ostream& out) {
  std::ifstream in_file;
  std::istream* in = &std::cin;
  if (file != "-") {
    in_file.open(file, std::ios::binary);
    if (!in_file) throw InputError(file + ": cannot open");
    in = &in_file;
  }
  std::string line;
  for (size_t number = 1; std::getline(*in, line); ++number) {
    nlohmann::json text;
    try {
      text = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception&) {
      text = nullptr;
    }
    if (!text.is_string()) {
      throw InputError(file + ":" + std::to_string(number) + ": expected a JSON string per line");
    }
    out << tokens_json(tokenizer.encode(text.get<std::string>(), add_special, parse_special))
        << '\n';
  }
}

void write_file(const fs::path& path, const std::string& content) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f || !f.write(content.data(), static_cast<std::streamsize>(content.size()))) {
    throw InputError(path.string() + ": cannot write");
  }
}

}  // namespace

int run_tokenize_command(const std::vector<std::string>& args) {
  return run_tokenize(args, std::cout);
}

int run_tokenize(const std::vector<std::string>& args, std::ostream& out) {
  ArgParser p;
  p.value("--tokenizer").value("--jsonl");
  p.flag("--json").flag("--add-special").flag("--parse-special").flag("--help", {"-h"});
  p.parse(args, 1);
  if (p.get_flag("--help")) {
    out << kTokenizeUsage;
    return 0;
  }
  const bool add_special = p.get_flag("--add-special");
  const bool parse_special = p.get_flag("--parse-special", true);
  const std::optional<std::string> text = free_text(p);
  const std::optional<std::string> jsonl = p.get("--jsonl");
  if (text.has_value() == jsonl.has_value()) {
    throw InputError("tokenize needs the text after -- (or --jsonl FILE)\n" +
                     std::string(kTokenizeUsage));
  }
  const Tokenizer tokenizer = load_tokenizer(p, kTokenizeUsage);
  if (jsonl) {
    tokenize_jsonl(tokenizer, *jsonl, add_special, parse_special, out);
    return 0;
  }
  const std::vector<int32_t> ids = tokenizer.encode(*text, add_special, parse_special);
  if (p.get_flag("--json")) {
    out << tokens_json(ids) << '\n';
  } else {
    for (size_t i = 0; i < ids.size(); ++i) out << (i > 0 ? "," : "") << ids[i];
    out << '\n';
  }
  return 0;
}

int run_detokenize_command(const std::vector<std::string>& args) {
  return run_detokenize(args, std::cout);
}

int run_detokenize(const std::vector<std::string>& args, std::ostream& out) {
  ArgParser p;
  p.value("--tokenizer");
  p.flag("--json").flag("--skip-special").flag("--help", {"-h"});
  p.parse(args, 1);
  if (p.get_flag("--help")) {
    out << kDetokenizeUsage;
    return 0;
  }
  std::vector<std::string> parts = p.after_dashes();
  if (parts.empty() && !p.positionals().empty()) parts = p.positionals();
  if (parts.empty()) {
    throw InputError("detokenize needs token ids after --, like 2,45,67\n" +
                     std::string(kDetokenizeUsage));
  }
  // "2,45,67", "2, 45" and "2 45 67" all work: spaces separate like commas.
  std::string list = join(parts, ",");
  for (char& c : list) {
    if (c == ' ' || c == '\t' || c == '\n') c = ',';
  }
  std::vector<std::string> items;
  for (size_t pos = 0; pos <= list.size();) {
    size_t comma = list.find(',', pos);
    if (comma == std::string::npos) comma = list.size();
    if (comma > pos) items.push_back(list.substr(pos, comma - pos));
    pos = comma + 1;
  }
  const std::vector<int> ids = parse_int_list(join(items, ","), "token ids");
  const Tokenizer tokenizer = load_tokenizer(p, kDetokenizeUsage);
  const std::vector<int32_t> ids32(ids.begin(), ids.end());
  const std::string text = tokenizer.decode(ids32, p.get_flag("--skip-special"));
  if (p.get_flag("--json")) {
    out << nlohmann::json{{"text", text}}.dump() << '\n';
  } else {
    out << text;
  }
  return 0;
}

int run_export_tokenizer_command(const std::vector<std::string>& args) {
  return run_export_tokenizer(args, std::cout);
}

int run_export_tokenizer(const std::vector<std::string>& args, std::ostream& out) {
  ArgParser p;
  p.value("--from").value("--out");
  p.flag("--help", {"-h"});
  p.parse(args, 0);
  if (p.get_flag("--help")) {
    out << kExportUsage;
    return 0;
  }
  auto from = p.get("--from");
  auto to = p.get("--out");
  if (!from || !to)
    throw InputError("export-tokenizer needs --from and --out\n" + std::string(kExportUsage));
  const GgufFile gguf(*from);
  const TokenizerSpec spec = tokenizer_spec_from_gguf(gguf);
  const fs::path out_path(*to);
  if (out_path.extension() == ".json") {
    write_file(out_path, to_hf_tokenizer_json(spec));
    out << "wrote " << out_path.string() << '\n';
    return 0;
  }
  std::error_code ec;
  fs::create_directories(out_path, ec);
  if (ec) throw InputError(out_path.string() + ": cannot create folder: " + ec.message());
  write_file(out_path / "tokenizer.json", to_hf_tokenizer_json(spec));
  write_file(out_path / "tokenizer_config.json",
             to_hf_tokenizer_config_json(spec, gguf_chat_template(gguf)));
  out << "wrote " << (out_path / "tokenizer.json").string() << " and tokenizer_config.json\n";
  return 0;
}

}  // namespace gemmaserve
