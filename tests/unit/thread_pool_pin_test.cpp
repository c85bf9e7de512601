// ThreadPool(n, pin_to_cpus = true): every thread that runs a chunk - the workers and the caller -
// ends up bound to exactly one CPU, no two of them the same; without pinning nothing is bound.
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <mutex>
#include <set>
#include <vector>

#include "core/thread_pool.h"

namespace gemmaserve {
namespace {

// CPUs the calling thread may run on.
std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(pthread_getaffinity_np(pthread_self(), sizeof(set), &set), 0);
  std::vector<int> out;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) out.push_back(cpu);
  }
  return out;
}

// Pinning binds the test's own thread: give the next test its mask back.
class ThreadPoolPinning : public ::testing::Test {
 protected:
  void SetUp() override {
    CPU_ZERO(&saved_);
    ASSERT_EQ(pthread_getaffinity_np(pthread_self(), sizeof(saved_), &saved_), 0);
  }
  void TearDown() override { pthread_setaffinity_np(pthread_self(), sizeof(saved_), &saved_); }
  cpu_set_t saved_;
};

TEST_F(ThreadPoolPinning, EachThreadOnItsOwnCpu) {
  const std::vector<int> before = allowed_cpus();
  if (before.size() < 2) GTEST_SKIP() << "needs 2 allowed CPUs, this process has " << before.size();
  ThreadPool pool(2, true);
  std::mutex mu;
  std::vector<std::vector<int>> seen;
  pool.parallel_for(2, [&](size_t, size_t) {
    const std::vector<int> cpus = allowed_cpus();
    std::lock_guard<std::mutex> lock(mu);
    seen.push_back(cpus);
  });
  ASSERT_EQ(seen.size(), 2u);
  std::set<int> distinct;
  for (const std::vector<int>& cpus : seen) {
    ASSERT_EQ(cpus.size(), 1u);
    distinct.insert(cpus[0]);
  }
  EXPECT_EQ(distinct.size(), 2u);
  EXPECT_EQ(allowed_cpus(), std::vector<int>{before[0]});  // the caller took the first CPU
}

TEST_F(ThreadPoolPinning, PoolBuiltByAPinnedThreadStillSpreads) {
  if (allowed_cpus().size() < 2) GTEST_SKIP() << "needs 2 allowed CPUs";
  ThreadPool first(2, true);
  first.parallel_for(2, [](size_t, size_t) {});  // pins this thread to one CPU
  ASSERT_EQ(allowed_cpus().size(), 1u);
  ThreadPool second(2, true);
  std::mutex mu;
  std::set<int> cpus;
  second.parallel_for(2, [&](size_t, size_t) {
    const std::vector<int> mine = allowed_cpus();
    std::lock_guard<std::mutex> lock(mu);
    cpus.insert(mine.begin(), mine.end());
  });
  EXPECT_EQ(cpus.size(), 2u);
}

// Data-parallel replicas: a one-thread pool per replica, the second from the process's second
// CPU, so the two engine threads never share one.
TEST_F(ThreadPoolPinning, FirstCpuPlacesPoolsSideBySide) {
  const std::vector<int> before = allowed_cpus();
  if (before.size() < 2) GTEST_SKIP() << "needs 2 allowed CPUs";
  ThreadPool second_replica(1, true, 1);
  second_replica.parallel_for(1, [](size_t, size_t) {});
  EXPECT_EQ(allowed_cpus(), std::vector<int>{before[1]});
}

TEST_F(ThreadPoolPinning, UnpinnedPoolBindsNothing) {
  const std::vector<int> before = allowed_cpus();
  ThreadPool pool(2, false);
  std::mutex mu;
  std::vector<size_t> widths;
  pool.parallel_for(2, [&](size_t, size_t) {
    const size_t n = allowed_cpus().size();
    std::lock_guard<std::mutex> lock(mu);
    widths.push_back(n);
  });
  for (size_t n : widths) EXPECT_EQ(n, before.size());
  EXPECT_EQ(allowed_cpus(), before);
}

}  // namespace
}  // namespace gemmaserve
