// Starts the real `gemmaserve serve` on loopback for end-to-end tests: the tiny random-weight
// Gemma 4 model with the real vocabulary and chat template, a free port, /health polled with a
// bounded retry, and the process stopped (SIGTERM, then SIGKILL) when the object dies.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "test_support.h"

namespace gemmaserve::testing {

// Writes the tiny Gemma 4 model with the real vocabulary and the 31B chat template into `dir`.
// Returns an empty string on success, else what failed.
inline std::string make_tiny_chat_model(const std::filesystem::path& shared,
                                        const std::filesystem::path& dir) {
  const std::string bin = cli_binary().string();
  const auto made = run_command(
      bin + " make-test-model --preset tiny --dtype bf16 --seed 0 --out " + dir.string() + " 2>&1");
  if (made.exit_code != 0) return "make-test-model failed: " + made.out;
  const auto exported =
      run_command(bin + " export-tokenizer --from " +
                  (shared / "data/gemma4-tokenizer/ggml-vocab-gemma-4.gguf").string() + " --out " +
                  (dir / "tokenizer.json").string() + " 2>&1");
  if (exported.exit_code != 0) return "export-tokenizer failed: " + exported.out;
  std::filesystem::copy_file(shared / "data/chat-templates/google-gemma-4-31B-it.jinja",
                             dir / "chat_template.jinja");
  return "";
}

// A port nobody listens on right now.
inline int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

class ServerProcess {
 public:
  // Starts `gemmaserve serve MODEL --host 127.0.0.1 --port P extra...`, logging to `log`.
  ServerProcess(const std::filesystem::path& model, const std::vector<std::string>& extra,
                const std::filesystem::path& log)
      : port_(free_port()), log_(log) {
    std::vector<std::string> args = {
        cli_binary().string(), "serve",  model.string(),       "--host",
        "127.0.0.1",           "--port", std::to_string(port_)};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    if (posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&actions);
  }
  ~ServerProcess() { stop(); }
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  // Polls /health (bounded: up to `timeout`); false when the server never answered.
  bool wait_healthy(std::chrono::seconds timeout = std::chrono::seconds(60)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (pid_ <= 0 || waitpid(pid_, nullptr, WNOHANG) != 0) return false;
      httplib::Client c("127.0.0.1", port_);
      c.set_connection_timeout(1, 0);
      auto r = c.Get("/health");
      if (r && r->status == 200) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }

  bool running() const { return pid_ > 0 && kill(pid_, 0) == 0; }

  void stop() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    for (int i = 0; i < 100; ++i) {
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

  int port() const { return port_; }
  std::string log_text() const {
    std::ifstream in(log_);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

 private:
  pid_t pid_ = -1;
  int port_;
  std::filesystem::path log_;
};

// Makes the tiny chat model under `dir` and starts `serve` on it with `flags` (logging to
// dir/server.log). Returns what failed, or "" with `server` healthy.
inline std::string start_tiny_chat_server(const std::filesystem::path& shared,
                                          const std::filesystem::path& dir,
                                          const std::vector<std::string>& flags,
                                          std::unique_ptr<ServerProcess>& server) {
  const auto model = dir / "model";
  const std::string error = make_tiny_chat_model(shared, model);
  if (!error.empty()) return error;
  server = std::make_unique<ServerProcess>(model, flags, dir / "server.log");
  if (!server->wait_healthy()) return "server did not start:\n" + server->log_text();
  return "";
}

// A test suite sharing one server on the tiny chat model, started once for the suite with
// `Suite::server_flags()`; each test skips (or fails under CI) without shared data.
template <typename Suite>
class TinyChatServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto shared = shared_dir();
    if (!shared) return;
    dir_ = std::make_unique<TempDir>();
    setup_error_ = start_tiny_chat_server(*shared, dir_->path(), Suite::server_flags(), server_);
  }
  static void TearDownTestSuite() {
    server_.reset();
    dir_.reset();
  }
  void SetUp() override {
    GS_REQUIRE_SHARED(shared);
    ASSERT_TRUE(setup_error_.empty()) << setup_error_;
  }

  static inline std::unique_ptr<TempDir> dir_;
  static inline std::unique_ptr<ServerProcess> server_;
  static inline std::string setup_error_;
};

// The text outside JSON strings, each string left as "".
inline std::string outside_strings(const std::string& text) {
  std::string out;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    if (in_string) {
      if (text[i] == '\\') {
        ++i;
      } else if (text[i] == '"') {
        in_string = false;
        out += '"';
      }
    } else if (text[i] == '"') {
      in_string = true;
      out += '"';
    } else {
      out += text[i];
    }
  }
  return out;
}

}  // namespace gemmaserve::testing
