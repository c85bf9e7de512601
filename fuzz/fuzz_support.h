// Shared pieces of the libFuzzer targets: the expected-error rule, in-memory files and the
// repository's data paths.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>

#include "core/error.h"
#include "server/shared/api_error.h"

namespace gemmaserve::fuzz {

// A finding that is not a sanitizer report (a wrong result, an unexpected exception type):
// print it and abort so libFuzzer saves the input.
[[noreturn]] inline void fail(std::string_view what) {
  std::fprintf(stderr, "FUZZ FAILURE: %.*s\n", static_cast<int>(what.size()), what.data());
  std::abort();
}

inline void check(bool ok, std::string_view what) {
  if (!ok) fail(what);
}

// Text shown in a failure message: printable ASCII as is, other bytes as \xNN.
inline std::string escaped(std::string_view text) {
  std::string out;
  for (unsigned char c : text) {
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

// Runs `f`; the errors bad input may raise (the ones the server maps to a 4xx) are expected,
// anything else is a finding.
template <typename F>
void expect_input_errors_only(F&& f) {
  try {
    f();
  } catch (const ApiError& e) {
    check(e.status() >= 400 && e.status() < 600, "ApiError with a non-error status");
  } catch (const InputError&) {
  } catch (const nlohmann::json::exception&) {
  } catch (const std::exception& e) {
    fail(std::string("unexpected exception: ") + e.what());
  }
}

// Bytes as a file the loaders can open by path (an anonymous memory file, no disk).
class MemoryFile {
 public:
  explicit MemoryFile(std::span<const uint8_t> bytes) : fd_(memfd_create("fuzz", 0)) {
    check(fd_ >= 0, "memfd_create failed");
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = write(fd_, bytes.data() + done, bytes.size() - done);
      check(n > 0, "write to memfd failed");
      done += static_cast<size_t>(n);
    }
  }
  ~MemoryFile() { close(fd_); }
  MemoryFile(const MemoryFile&) = delete;
  MemoryFile& operator=(const MemoryFile&) = delete;
  std::filesystem::path path() const { return "/proc/self/fd/" + std::to_string(fd_); }

 private:
  int fd_;
};

// The repository root (fuzz/CMakeLists.txt defines it), for the demo model's files.
inline std::filesystem::path source_root() { return GEMMASERVE_SOURCE_DIR; }

}  // namespace gemmaserve::fuzz
