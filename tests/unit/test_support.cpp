#include "test_support.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>

#include "tokenizer/text_pipeline.h"

namespace gemmaserve::testing {

std::optional<std::filesystem::path> shared_dir() {
  if (const char* env = std::getenv("GEMMASERVE_SHARED"); env && *env) {
    std::filesystem::path p(env);
    if (std::filesystem::is_directory(p)) return p;
    return std::nullopt;
  }
  auto p = source_dir().parent_path() / "shared";
  if (std::filesystem::is_directory(p)) return p;
  return std::nullopt;
}

bool running_in_ci() {
  const char* ci = std::getenv("CI");
  return ci && std::string(ci) == "true";
}

std::filesystem::path source_dir() { return GEMMASERVE_SOURCE_DIR; }

std::filesystem::path cli_binary() { return GEMMASERVE_BINARY; }

TempDir::TempDir() {
  std::random_device rd;
  auto base = std::filesystem::temp_directory_path();
  for (int i = 0; i < 100; ++i) {
    auto p = base / ("gemmaserve-test-" + std::to_string(rd()));
    if (std::filesystem::create_directory(p)) {
      path_ = p;
      return;
    }
  }
  throw std::runtime_error("cannot create temp dir");
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string read_text_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

CommandResult run_command(const std::string& command) {
  CommandResult r;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.out.append(buf.data(), n);
  int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

Tokenizer pieces_tokenizer(std::vector<std::string> pieces, int specials) {
  TokenizerSpec spec;
  spec.source = "test pieces";
  spec.vocab = std::move(pieces);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    spec.vocab.push_back(name);
  }
  spec.bpe.byte_fallback = true;
  for (int i = 0; i < specials; ++i) {
    spec.added_tokens.push_back(
        AddedToken{i, spec.vocab[static_cast<size_t>(i)], true, false, false, false});
  }
  spec.normalizer = gemma_normalizer();
  spec.pre_tokenizer = gemma_pre_tokenizer();
  spec.decoder = gemma_decoder();
  spec.bos_id = 0;
  return Tokenizer(std::move(spec));
}

void expect_flag_errors(const std::string& command, const std::vector<FlagError>& cases,
                        const std::string& usage) {
  for (const FlagError& c : cases) {
    const CommandResult r = run_command(command + " " + c.flags + " 2>&1");
    EXPECT_NE(r.exit_code, 0) << c.flags;
    EXPECT_NE(r.out.find(c.message), std::string::npos) << c.flags << "\n" << r.out;
  }
  const CommandResult help = run_command(command + " --help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find(usage), std::string::npos) << help.out;
}

}  // namespace gemmaserve::testing
