// docs/PROTOCOL.md's serve flag table, row by row against what `serve` says at start (its flag
// parsing, which loads nothing): a refused row's flag stops the start with "<flag>: <why>", a
// hint-warning row's flag logs exactly one WARNING "<flag>: <why>", an implemented row's flag
// is taken without a word. Every flag serve declares and every rule in vllm_serve_flags has a
// row, so a flag cannot be added without saying what it does.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <sstream>

#include "cli/serve_command.h"
#include "cli/vllm_serve_flags.h"
#include "core/logging.h"
#include "test_support.h"

namespace gemmaserve {
namespace {

struct FlagRow {
  std::string flag;
  std::vector<std::string> aliases;
  std::string status;
  std::vector<std::string> argv;
  std::string why;
  std::string line;
};

std::string without_backticks(std::string s) {
  s.erase(std::remove(s.begin(), s.end(), '`'), s.end());
  return s;
}

std::string trimmed(const std::string& s) {
  const size_t begin = s.find_first_not_of(' ');
  return begin == std::string::npos ? "" : s.substr(begin, s.find_last_not_of(' ') - begin + 1);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  std::stringstream in(s);
  for (std::string part; std::getline(in, part, sep);) parts.push_back(part);
  return parts;
}

// The rows of the "## `serve` flags" table: | flag (aliases) | status | test argv | why |.
std::vector<FlagRow> read_flag_table() {
  const std::string doc = testing::read_text_file(testing::source_dir() / "docs/PROTOCOL.md");
  const size_t begin = doc.find("\n## `serve` flags");
  EXPECT_NE(begin, std::string::npos) << "docs/PROTOCOL.md has no '## `serve` flags' section";
  if (begin == std::string::npos) return {};
  const size_t end = doc.find("\n## ", begin + 1);
  std::vector<FlagRow> rows;
  for (const std::string& line : split(doc.substr(begin, end - begin), '\n')) {
    if (line.rfind("| `-", 0) != 0) continue;
    const std::vector<std::string> cells = split(line, '|');
    EXPECT_EQ(cells.size(), 5u) << "a row needs 4 cells: " << line;
    if (cells.size() != 5) continue;
    FlagRow row;
    row.line = line;
    const std::vector<std::string> names = split(cells[1], '`');  // `--a` (`-b`, `-c`)
    for (size_t i = 1; i < names.size(); i += 2) {
      if (row.flag.empty()) {
        row.flag = names[i];
      } else {
        row.aliases.push_back(names[i]);
      }
    }
    row.status = trimmed(cells[2]);
    for (const std::string& arg : split(without_backticks(trimmed(cells[3])), ' ')) {
      if (!arg.empty()) row.argv.push_back(arg);
    }
    row.why = without_backticks(trimmed(cells[4]));
    rows.push_back(row);
  }
  return rows;
}

struct StartResult {
  std::string error;  // the InputError's text, "" when serve would go on to load the model
  std::string log;
};

StartResult parse_as_serve(const std::vector<std::string>& argv, const std::string& model) {
  std::vector<std::string> args = {model};
  for (const std::string& a : argv) {
    if (a == "MODEL") {
      args.push_back(model);
    } else if (a.rfind("REPO/", 0) == 0) {  // a file of the repository, e.g. a --config
      args.push_back((testing::source_dir() / a.substr(5)).string());
    } else {
      args.push_back(a);
    }
  }
  StartResult r;
  ::testing::internal::CaptureStderr();
  try {
    parse_serve_args(args);
  } catch (const InputError& e) {
    r.error = e.what();
  }
  r.log = ::testing::internal::GetCapturedStderr();
  log::set_level(log::Level::kInfo);  // --uvicorn-log-level's row changes it
  return r;
}

std::vector<std::string> lines_naming(const std::string& log, const std::string& flag) {
  std::vector<std::string> out;
  for (const std::string& line : split(log, '\n')) {
    if (line.find(flag) != std::string::npos) out.push_back(line);
  }
  return out;
}

TEST(ServeFlagTable, EveryRowsStartupLogSaysWhatItsStatusSays) {
  const std::vector<FlagRow> rows = read_flag_table();
  ASSERT_GT(rows.size(), 200u);
  testing::TempDir tmp;
  const std::string model = (tmp.path() / "model").string();
  for (const FlagRow& row : rows) {
    SCOPED_TRACE(row.line);
    const StartResult r = parse_as_serve(row.argv, model);
    if (row.status == "implemented") {
      EXPECT_EQ(r.error, "");
      EXPECT_EQ(lines_naming(r.log, row.flag), std::vector<std::string>{}) << r.log;
    } else if (row.status == "refused") {
      EXPECT_EQ(r.error, row.flag + ": " + row.why);
    } else if (row.status == "hint-warning") {
      EXPECT_EQ(r.error, "");
      const std::vector<std::string> lines = lines_naming(r.log, row.flag);
      ASSERT_EQ(lines.size(), 1u) << r.log;
      EXPECT_EQ(lines[0].rfind("WARNING ", 0), 0u) << lines[0];
      EXPECT_NE(lines[0].find(row.flag + ": " + row.why), std::string::npos) << lines[0];
    } else {
      ADD_FAILURE() << "status must be implemented, refused or hint-warning: " << row.status;
    }
  }
}

TEST(ServeFlagTable, EveryFlagServeTakesAndEveryRuleHasItsRow) {
  const std::vector<FlagRow> rows = read_flag_table();
  std::set<std::string> documented;
  for (const FlagRow& row : rows) documented.insert(row.flag);
  for (const std::string& flag : serve_arg_parser().declared_flags()) {
    if (flag == "--help") continue;
    EXPECT_TRUE(documented.count(flag)) << flag << " has no row in docs/PROTOCOL.md's serve flags";
  }
  for (const VllmFlagRule& rule : vllm_flag_rules()) {
    const std::string status = rule.policy == FlagPolicy::kRefused       ? "refused"
                               : rule.policy == FlagPolicy::kHintWarning ? "hint-warning"
                                                                         : "implemented";
    const auto row = std::find_if(rows.begin(), rows.end(), [&](const FlagRow& r) {
      return r.flag == rule.name && r.status == status;
    });
    ASSERT_NE(row, rows.end()) << rule.name << " needs a row with status " << status;
    EXPECT_EQ(row->aliases, rule.aliases) << rule.name;
    if (rule.policy != FlagPolicy::kInEffect) {
      EXPECT_EQ(row->why, rule.why) << rule.name;
    }
  }
}

// Aliases, the `--flag=value` spelling and vLLM's -O3 reach the same rule.
TEST(ServeFlagTable, AliasesAndSpellingsReachTheSameRule) {
  testing::TempDir tmp;
  const std::string model = (tmp.path() / "model").string();
  EXPECT_EQ(parse_as_serve({"-pp", "2"}, model).error.rfind("--pipeline-parallel-size: ", 0), 0u);
  EXPECT_EQ(parse_as_serve({"--pipeline_parallel_size=2"}, model)
                .error.rfind("--pipeline-parallel-size: ", 0),
            0u);
  EXPECT_EQ(parse_as_serve({"-pp", "1"}, model).error, "");
  EXPECT_EQ(lines_naming(parse_as_serve({"-O3"}, model).log, "--compilation-config: ").size(), 1u);
  EXPECT_EQ(
      parse_as_serve({"--lora-modules", "a=/x", "b=/y"}, model).error.rfind("--lora-modules: ", 0),
      0u);
}

}  // namespace
}  // namespace gemmaserve
