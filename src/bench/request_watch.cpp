#include "bench/request_watch.h"

#include <system_error>

namespace gemmaserve {

EngineRequest greedy_request(const std::string& id, std::vector<int32_t> prompt, int max_tokens) {
  EngineRequest r;
  r.request_id = id;
  r.prompt_token_ids = std::move(prompt);
  r.params.temperature = 0;
  r.params.max_tokens = max_tokens;
  r.params.ignore_eos = true;
  return r;
}

OutputCallback RequestWatch::callback() {
  return [this](const RequestOutput& out, const RequestOutputDelta&) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (out.finished) {
      finished_ = BenchClock::now();
      done_ = true;
    } else {
      times_.push_back(BenchClock::now());
    }
    cv_.notify_all();
  };
}

void RequestWatch::wait_tokens(size_t n) {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return times_.size() >= n || done_; });
}

BenchClock::time_point RequestWatch::wait_done() {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return done_; });
  return finished_;
}

std::vector<BenchClock::time_point> RequestWatch::times() {
  std::lock_guard<std::mutex> lock(mutex_);
  return times_;
}

TempModelDir::TempModelDir(const std::string& prefix)
    : dir_(std::filesystem::temp_directory_path() /
           (prefix + "-" + std::to_string(BenchClock::now().time_since_epoch().count()))) {
  std::filesystem::create_directories(dir_);
}

TempModelDir::~TempModelDir() {
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

}  // namespace gemmaserve
