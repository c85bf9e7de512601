// Fixed set of worker threads running data-parallel loops; the caller thread takes part.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace gemmaserve {

class ThreadPool {
 public:
  // num_threads counts the calling thread; 0 means hardware_concurrency().
  explicit ThreadPool(size_t num_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  size_t size() const { return workers_.size() + 1; }

  // Splits [0, n) into size() contiguous chunks (a static split, so results never depend on
  // timing) and runs fn(begin, end) on each; returns when all are done. Not reentrant.
  void parallel_for(size_t n, const std::function<void(size_t, size_t)>& fn);

  // Like parallel_for but chunks are multiples of `grain` (the last may be shorter).
  void parallel_for_grain(size_t n, size_t grain, const std::function<void(size_t, size_t)>& fn);

 private:
  void worker_loop(size_t index);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable start_cv_;
  std::condition_variable done_cv_;
  const std::function<void(size_t, size_t)>* job_ = nullptr;
  size_t job_n_ = 0;
  size_t job_grain_ = 1;
  size_t generation_ = 0;
  size_t pending_ = 0;
  bool stop_ = false;
};

}  // namespace gemmaserve
