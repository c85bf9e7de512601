// Tests that run as several MPI ranks: the test, started normally, runs itself again under
// mpirun (this executable filtered to this one test) and passes when every rank passes.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "parallel/communicator.h"
#include "parallel/rank_launch.h"

namespace gemmaserve::testing {

// Runs the current test as `ranks` ranks under mpirun; returns mpirun's exit status.
inline int run_current_test_as_ranks(int ranks) {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string filter =
      std::string("--gtest_filter=") + info->test_suite_name() + "." + info->name();
  // OpenMPI keeps its start-up allocations to the end and unloads the plugins that made them,
  // so LeakSanitizer reports them and no suppression can name them: the ranks check memory
  // errors only (the last option wins), our code's leaks are checked by the one-process tests.
  const char* asan = std::getenv("ASAN_OPTIONS");
  const std::string options =
      (asan != nullptr && *asan != '\0' ? std::string(asan) + ":" : "") + "detect_leaks=0";
  setenv("ASAN_OPTIONS", options.c_str(), 1);
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return -1;
  self[n] = '\0';
  // A rank stuck in a collective fails the test in a minute instead of CTest's 15.
  return run_under_mpirun(ranks, self, {filter}, 60);
}

}  // namespace gemmaserve::testing

// Starts the test body on `ranks` MPI ranks: outside mpirun it relaunches itself and checks the
// exit status; on a rank the body below it runs.
#define GS_RUN_AS_MPI_RANKS(ranks)                                        \
  if (!::gemmaserve::launched_by_mpirun()) {                              \
    EXPECT_EQ(0, ::gemmaserve::testing::run_current_test_as_ranks(ranks)) \
        << "a rank failed (its output is above)";                         \
    return;                                                               \
  }
