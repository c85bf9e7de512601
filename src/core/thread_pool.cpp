#include "core/thread_pool.h"

#include <algorithm>

namespace gemmaserve {
namespace {

// Chunk `index` of `parts` over [0, n) in units of `grain`.
std::pair<size_t, size_t> chunk(size_t n, size_t grain, size_t parts, size_t index) {
  size_t units = (n + grain - 1) / grain;
  size_t per = units / parts, extra = units % parts;
  size_t begin_unit = index * per + std::min(index, extra);
  size_t end_unit = begin_unit + per + (index < extra ? 1 : 0);
  return {std::min(n, begin_unit * grain), std::min(n, end_unit * grain)};
}

}  // namespace

ThreadPool::ThreadPool(size_t num_threads) {
  if (num_threads == 0) num_threads = std::max(1u, std::thread::hardware_concurrency());
  for (size_t i = 1; i < num_threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::parallel_for(size_t n, const std::function<void(size_t, size_t)>& fn) {
  parallel_for_grain(n, 1, fn);
}

void ThreadPool::parallel_for_grain(size_t n, size_t grain,
                                    const std::function<void(size_t, size_t)>& fn) {
  if (n == 0) return;
  grain = std::max<size_t>(grain, 1);
  if (workers_.empty() || n <= grain) {
    fn(0, n);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = &fn;
    job_n_ = n;
    job_grain_ = grain;
    pending_ = workers_.size();
    ++generation_;
  }
  start_cv_.notify_all();
  auto [b, e] = chunk(n, grain, size(), 0);
  if (b < e) fn(b, e);
  std::unique_lock<std::mutex> lock(mutex_);
  done_cv_.wait(lock, [this] { return pending_ == 0; });
  job_ = nullptr;
}

void ThreadPool::worker_loop(size_t index) {
  size_t seen = 0;
  for (;;) {
    const std::function<void(size_t, size_t)>* job;
    size_t n, grain;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
      n = job_n_;
      grain = job_grain_;
    }
    auto [b, e] = chunk(n, grain, size(), index);
    if (b < e) (*job)(b, e);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (--pending_ == 0) done_cv_.notify_one();
    }
  }
}

}  // namespace gemmaserve
