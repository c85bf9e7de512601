// What the Engine benchmarks (bench image, bench audio) share: their greedy requests, one
// request's token times as a client sees them, waited on from the bench's thread, and a
// temporary model folder.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace gemmaserve {

using BenchClock = std::chrono::steady_clock;

inline double seconds_of(BenchClock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// A request decoding greedily past its stop tokens: the same work every run.
EngineRequest greedy_request(const std::string& id, std::vector<int32_t> prompt, int max_tokens);

// Token times of one request, and whether it finished.
class RequestWatch {
 public:
  // For Engine::add_request; the watch must outlive the request.
  OutputCallback callback();
  // Until the request has `n` tokens or finished.
  void wait_tokens(size_t n);
  // Until it finished; returns when that was.
  BenchClock::time_point wait_done();
  std::vector<BenchClock::time_point> times();

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<BenchClock::time_point> times_;
  BenchClock::time_point finished_{};
  bool done_ = false;
};

// A folder under the system's temporary directory named PREFIX-<clock>, removed with its
// contents however the bench ends.
class TempModelDir {
 public:
  explicit TempModelDir(const std::string& prefix);
  ~TempModelDir();
  TempModelDir(const TempModelDir&) = delete;
  TempModelDir& operator=(const TempModelDir&) = delete;
  const std::filesystem::path& path() const { return dir_; }

 private:
  std::filesystem::path dir_;
};

}  // namespace gemmaserve
