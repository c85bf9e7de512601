// Fixed set of worker threads running data-parallel loops; the caller thread takes part.
// Built for many small sections (hundreds per decoded token): a section is published with one
// atomic store, idle workers spin briefly before sleeping on a futex, and the caller spins for
// the last chunks to finish.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <utility>
#include <vector>

#include "core/function_ref.h"

namespace gemmaserve {

class ThreadPool {
 public:
  using RangeFn = FunctionRef<void(size_t, size_t)>;

  // num_threads counts the calling thread; 0 means hardware_concurrency(). pin_to_cpus binds
  // worker i to CPU i of the process's allowed set (round-robin) and the thread that runs a
  // section to CPU 0 of it (at its first section), so no two of them share a CPU. first_cpu
  // shifts that to CPUs first_cpu.. of the set (pools of data-parallel replicas side by side).
  explicit ThreadPool(size_t num_threads = 0, bool pin_to_cpus = false, size_t first_cpu = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  size_t size() const { return workers_.size() + 1; }

  // Splits [0, n) into size() contiguous chunks (a static split, so results never depend on
  // timing) and runs fn(begin, end) on each; returns when all are done. Not reentrant: one
  // caller at a time. A section allocates nothing (fn is referenced, not copied).
  void parallel_for(size_t n, RangeFn fn);

  // Like parallel_for but chunks are multiples of `grain` (the last may be shorter).
  void parallel_for_grain(size_t n, size_t grain, RangeFn fn);

  // The chunk [begin, end) that thread `index` of `parts` gets from parallel_for_grain(n, grain).
  static std::pair<size_t, size_t> chunk(size_t n, size_t grain, size_t parts, size_t index);

 private:
  void worker_loop(size_t index, int cpu);

  std::vector<std::thread> workers_;
  // The current section; written by the caller before generation_ is bumped (release).
  const RangeFn* job_ = nullptr;
  size_t job_n_ = 0;
  size_t job_grain_ = 1;
  bool stop_ = false;
  int caller_cpu_ = -1;            // where a section's caller is pinned; -1 = not pinning
  std::thread::id pinned_caller_;  // the caller thread last pinned
  alignas(64) std::atomic<uint32_t> generation_{0};  // bumped once per section
  alignas(64) std::atomic<uint32_t> pending_{0};     // workers still running the section
};

}  // namespace gemmaserve
