// Shared helpers for unit tests: locating ../shared data, temp dirs, the built CLI.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace gemmaserve::testing {

// The shared data folder (GEMMASERVE_SHARED or ../shared beside the repo), or nullopt when absent.
// Under CI=true an absent folder is a test failure, never a skip: callers use
// GS_REQUIRE_SHARED() which does the right thing.
std::optional<std::filesystem::path> shared_dir();

// True when the CI environment variable is "true".
bool running_in_ci();

// The repository root (compile-time constant).
std::filesystem::path source_dir();

// Path to the built gemmaserve executable.
std::filesystem::path cli_binary();

// A fresh, empty temporary directory removed when the object dies.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// The bytes of a file ("" when it cannot be read).
std::string read_text_file(const std::filesystem::path& path);

// Runs a shell command, returning its exit code and capturing stdout (stderr goes to the log).
struct CommandResult {
  int exit_code = -1;
  std::string out;
};
CommandResult run_command(const std::string& command);

// Runs `command` + each case's flags (stderr too): each must fail with output holding its
// message; then `command --help` must succeed and print `usage`.
struct FlagError {
  std::string flags;
  std::string message;
};
void expect_flag_errors(const std::string& command, const std::vector<FlagError>& cases,
                        const std::string& usage);

// A Gemma-style BPE tokenizer without merges for sampler tests: `pieces` as ids 0.., the first
// `specials` of them special added tokens (the first is also BOS), then the 256 byte-fallback
// tokens <0x00>..<0xFF>.
Tokenizer pieces_tokenizer(std::vector<std::string> pieces, int specials);

// The message of the InputError `f` throws, or "no error".
template <typename F>
std::string input_error_of(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace gemmaserve::testing

// Binds `var` to the shared dir or skips (outside CI) / fails (in CI) with a message.
#define GS_REQUIRE_SHARED(var)                                                                  \
  auto var##_opt = ::gemmaserve::testing::shared_dir();                                         \
  if (!var##_opt) {                                                                             \
    if (::gemmaserve::testing::running_in_ci()) {                                               \
      FAIL() << "shared/ data folder not found (set GEMMASERVE_SHARED); required under CI";     \
    }                                                                                           \
    GTEST_SKIP() << "shared/ data folder not found (set GEMMASERVE_SHARED or place ../shared)"; \
  }                                                                                             \
  const std::filesystem::path var = *var##_opt
