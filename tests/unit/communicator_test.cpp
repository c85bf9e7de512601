// The communicator's collectives on one process and on 2 and 4 MPI ranks (4 oversubscribe this
// machine's CPUs): values, the fixed summation order, and the backend names.
#include "parallel/communicator.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "mpi_test_support.h"

namespace gemmaserve {
namespace {

// Rank r's contribution: values whose float sum depends on the order they are added in.
std::vector<float> rank_data(int r, size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    const float big = (i % 3 == 0) ? 1e8f : 1.0f;
    v[i] = (r % 2 == 0 ? big : -big) + 0.25f * static_cast<float>(r + 1) + static_cast<float>(i);
  }
  return v;
}

void check_collectives(Communicator& comm) {
  const int N = comm.size(), R = comm.rank();
  // Sizes below, equal to and above the rank count (chunks of 0 elements included).
  for (size_t n : {size_t{1}, size_t{3}, size_t{64}, size_t{1001}}) {
    std::vector<float> data = rank_data(R, n);
    comm.all_reduce_sum(data);
    std::vector<float> expected = rank_data(0, n);
    for (int r = 1; r < N; ++r) {
      const std::vector<float> other = rank_data(r, n);
      for (size_t i = 0; i < n; ++i) expected[i] += other[i];
    }
    ASSERT_EQ(0, std::memcmp(expected.data(), data.data(), n * sizeof(float)))
        << "all-reduce of " << n << " on rank " << R << " is not the rank-order sum";
  }
  // Uneven all-gather / gather: rank r sends r + 2 values equal to 100 r + i.
  std::vector<int64_t> counts;
  int64_t total = 0;
  for (int r = 0; r < N; ++r) {
    counts.push_back(r + 2);
    total += r + 2;
  }
  std::vector<float> mine(static_cast<size_t>(R + 2));
  for (size_t i = 0; i < mine.size(); ++i) mine[i] = static_cast<float>(100 * R + i);
  std::vector<float> expected;
  for (int r = 0; r < N; ++r) {
    for (int i = 0; i < r + 2; ++i) expected.push_back(static_cast<float>(100 * r + i));
  }
  std::vector<float> all(static_cast<size_t>(total), -1.0f);
  comm.all_gather(mine, counts, all.data());
  EXPECT_EQ(expected, all);
  std::vector<float> gathered(static_cast<size_t>(total), -1.0f);
  comm.gather(mine, counts, gathered.data(), 0);
  if (R == 0) {
    EXPECT_EQ(expected, gathered);
  }
  // Broadcast resizes the receivers.
  std::vector<uint8_t> bytes;
  if (R == 0) bytes = {1, 2, 3, 250};
  comm.broadcast(bytes, 0);
  EXPECT_EQ((std::vector<uint8_t>{1, 2, 3, 250}), bytes);
  comm.barrier();
}

TEST(Communicator, SingleProcessCollectives) {
  auto comm = make_communicator("single");
  EXPECT_EQ(0, comm->rank());
  EXPECT_EQ(1, comm->size());
  EXPECT_EQ("single", comm->backend_name());
  check_collectives(*comm);
}

TEST(Communicator, UnknownBackendIsAnInputError) {
  try {
    make_communicator("nccl");
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_STREQ("unknown communicator backend 'nccl' (expected single, mpi or auto)", e.what());
  }
}

TEST(Communicator, MpiTwoRanks) {
  GS_RUN_AS_MPI_RANKS(2);
  auto comm = make_communicator("auto");
  ASSERT_EQ("mpi", comm->backend_name());
  ASSERT_EQ(2, comm->size());
  check_collectives(*comm);
  // An all-reduce of n floats sends the other rank's half twice (reduce-scatter, all-gather).
  const CommunicatorStats before = comm->stats();
  std::vector<float> data(1000, 1.0f);
  comm->all_reduce_sum(data);
  EXPECT_EQ(before.calls + 1, comm->stats().calls);
  EXPECT_EQ(before.bytes_sent + 2 * 500 * sizeof(float), comm->stats().bytes_sent);
}

TEST(Communicator, MpiFourRanksOversubscribed) {
  GS_RUN_AS_MPI_RANKS(4);
  auto comm = make_communicator("mpi");
  ASSERT_EQ(4, comm->size());
  check_collectives(*comm);
}

}  // namespace
}  // namespace gemmaserve
