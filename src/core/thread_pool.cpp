#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <vector>

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#endif

namespace gemmaserve {
namespace {

// How long an idle thread polls before sleeping: longer than the gaps between the parallel
// sections of one decode step, short enough not to burn a core between requests.
constexpr auto kSpinTime = std::chrono::microseconds(100);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ volatile("yield");
#endif
}

// Waits until `value` differs from `old`: polls for kSpinTime, then sleeps (futex).
uint32_t wait_for_change(const std::atomic<uint32_t>& value, uint32_t old) {
  uint32_t now = value.load(std::memory_order_acquire);
  if (now != old) return now;
  const auto deadline = std::chrono::steady_clock::now() + kSpinTime;
  for (int i = 1;; ++i) {
    cpu_relax();
    now = value.load(std::memory_order_acquire);
    if (now != old) return now;
    if (i % 64 == 0 && std::chrono::steady_clock::now() > deadline) break;
  }
  for (;;) {
    value.wait(old, std::memory_order_acquire);
    now = value.load(std::memory_order_acquire);
    if (now != old) return now;
  }
}

#if defined(__linux__)
// The CPUs this process may use, read once, before any pool pins a thread (a pinned thread's
// own mask would otherwise shrink to one CPU for every pool built from it later).
const std::vector<int>& process_cpus() {
  static const std::vector<int> cpus = [] {
    std::vector<int> out;
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) != 0) return out;
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (CPU_ISSET(cpu, &set)) out.push_back(cpu);
    }
    return out;
  }();
  return cpus;
}

// The index-th CPU of the process's allowed set (round-robin), or -1 if unknown.
int nth_allowed_cpu(size_t index) {
  const std::vector<int>& cpus = process_cpus();
  if (cpus.empty()) return -1;
  return cpus[index % cpus.size()];
}

void pin_current_thread(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);  // best effort
}
#else
int nth_allowed_cpu(size_t) { return -1; }
void pin_current_thread(int) {}
#endif

}  // namespace

ThreadPool::ThreadPool(size_t num_threads, bool pin_to_cpus, size_t first_cpu)
    : caller_cpu_(pin_to_cpus ? nth_allowed_cpu(first_cpu) : -1) {
  if (num_threads == 0) num_threads = std::max(1u, std::thread::hardware_concurrency());
  for (size_t i = 1; i < num_threads; ++i) {
    const int cpu = pin_to_cpus ? nth_allowed_cpu(first_cpu + i) : -1;
    workers_.emplace_back([this, i, cpu] { worker_loop(i, cpu); });
  }
}

ThreadPool::~ThreadPool() {
  stop_ = true;
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::parallel_for(size_t n, RangeFn fn) { parallel_for_grain(n, 1, fn); }

std::pair<size_t, size_t> ThreadPool::chunk(size_t n, size_t grain, size_t parts, size_t index) {
  size_t units = (n + grain - 1) / grain;
  size_t per = units / parts, extra = units % parts;
  size_t begin_unit = index * per + std::min(index, extra);
  size_t end_unit = begin_unit + per + (index < extra ? 1 : 0);
  return {std::min(n, begin_unit * grain), std::min(n, end_unit * grain)};
}

void ThreadPool::parallel_for_grain(size_t n, size_t grain, RangeFn fn) {
  if (n == 0) return;
  grain = std::max<size_t>(grain, 1);
  if (caller_cpu_ >= 0 && pinned_caller_ != std::this_thread::get_id()) {
    pinned_caller_ = std::this_thread::get_id();
    pin_current_thread(caller_cpu_);
  }
  if (workers_.empty() || n <= grain) {
    fn(0, n);
    return;
  }
  job_ = &fn;
  job_n_ = n;
  job_grain_ = grain;
  pending_.store(static_cast<uint32_t>(workers_.size()), std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  std::exception_ptr error;
  auto [b, e] = chunk(n, grain, size(), 0);
  try {
    if (b < e) fn(b, e);
  } catch (...) {
    error = std::current_exception();  // the workers still use fn: wait for them first
  }
  for (uint32_t left = pending_.load(std::memory_order_acquire); left != 0;) {
    left = wait_for_change(pending_, left);
  }
  job_ = nullptr;
  if (error) std::rethrow_exception(error);
}

void ThreadPool::worker_loop(size_t index, int cpu) {
  if (cpu >= 0) pin_current_thread(cpu);
  uint32_t seen = 0;
  for (;;) {
    seen = wait_for_change(generation_, seen);
    if (stop_) return;
    auto [b, e] = chunk(job_n_, job_grain_, size(), index);
    if (b < e) (*job_)(b, e);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
  }
}

}  // namespace gemmaserve
