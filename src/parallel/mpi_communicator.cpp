// The MPI backend (OpenMPI from Debian). The only file that includes <mpi.h>: CMake gives it
// MPI's include path alone, so no other compile command changes.
// The C API only: OpenMPI's C++ bindings do not build under -Werror.
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include <chrono>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "parallel/communicator.h"

namespace gemmaserve {
namespace {

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw std::runtime_error(std::string("MPI ") + what + " failed: " + std::string(text, len));
}

int as_count(int64_t n) {
  if (n < 0 || n > std::numeric_limits<int>::max()) {
    throw std::runtime_error("MPI message of " + std::to_string(n) + " elements is too long");
  }
  return static_cast<int>(n);
}

// MPI may be initialised once per process and must be finalised before it exits (mpirun
// reports a rank that exits without MPI_Finalize as failed), so the runtime lives as long as
// the process, like MPI's own state.
class MpiRuntime {
 public:
  static MpiRuntime& get() {
    static MpiRuntime runtime;
    return runtime;
  }
  ~MpiRuntime() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && owned_) MPI_Finalize();
  }

 private:
  MpiRuntime() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized) return;
    int provided = 0;
    // Collectives come from one thread at a time, not always the main one (the engine thread).
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
    owned_ = true;
    if (provided < MPI_THREAD_SERIALIZED) {
      throw std::runtime_error("this MPI library does not support MPI_THREAD_SERIALIZED");
    }
  }
  bool owned_ = false;
};

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator() {
    MpiRuntime::get();
    check(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiCommunicator() override { MPI_Comm_free(&comm_); }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend_name() const override { return "mpi"; }

  // Reduce-scatter then all-gather: rank r receives chunk r of every rank's data, sums the
  // parts in rank order, and the summed chunks are gathered back to everyone.
  void all_reduce_sum(std::span<float> data) override {
    Timer timer(*this);
    const int n = as_count(static_cast<int64_t>(data.size()));
    const int N = size_;
    chunk_counts_.resize(static_cast<size_t>(N));
    chunk_offsets_.resize(static_cast<size_t>(N));
    for (int r = 0; r < N; ++r) {
      const int begin = static_cast<int>(static_cast<int64_t>(n) * r / N);
      const int end = static_cast<int>(static_cast<int64_t>(n) * (r + 1) / N);
      chunk_offsets_[static_cast<size_t>(r)] = begin;
      chunk_counts_[static_cast<size_t>(r)] = end - begin;
    }
    const int mine = chunk_counts_[static_cast<size_t>(rank_)];
    parts_.resize(static_cast<size_t>(mine) * static_cast<size_t>(N));
    recv_counts_.assign(static_cast<size_t>(N), mine);
    recv_offsets_.resize(static_cast<size_t>(N));
    for (int r = 0; r < N; ++r) recv_offsets_[static_cast<size_t>(r)] = r * mine;
    check(MPI_Alltoallv(data.data(), chunk_counts_.data(), chunk_offsets_.data(), MPI_FLOAT,
                        parts_.data(), recv_counts_.data(), recv_offsets_.data(), MPI_FLOAT, comm_),
          "MPI_Alltoallv");
    float* out = data.data() + chunk_offsets_[static_cast<size_t>(rank_)];
    for (int i = 0; i < mine; ++i) {
      float s = parts_[static_cast<size_t>(i)];
      for (int r = 1; r < N; ++r) s += parts_[static_cast<size_t>(r * mine + i)];
      out[i] = s;
    }
    check(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, data.data(), chunk_counts_.data(),
                         chunk_offsets_.data(), MPI_FLOAT, comm_),
          "MPI_Allgatherv");
    timer.bytes = 2 * static_cast<uint64_t>(n - mine) * sizeof(float);
  }

  void all_gather(std::span<const float> mine, std::span<const int64_t> counts,
                  float* out) override {
    Timer timer(*this);
    set_counts(mine, counts);
    check(MPI_Allgatherv(mine.data(), as_count(static_cast<int64_t>(mine.size())), MPI_FLOAT, out,
                         chunk_counts_.data(), chunk_offsets_.data(), MPI_FLOAT, comm_),
          "MPI_Allgatherv");
    timer.bytes = static_cast<uint64_t>(size_ - 1) * mine.size_bytes();
  }

  void gather(std::span<const float> mine, std::span<const int64_t> counts, float* out,
              int root) override {
    Timer timer(*this);
    set_counts(mine, counts);
    check(MPI_Gatherv(mine.data(), as_count(static_cast<int64_t>(mine.size())), MPI_FLOAT, out,
                      chunk_counts_.data(), chunk_offsets_.data(), MPI_FLOAT, root, comm_),
          "MPI_Gatherv");
    if (rank_ != root) timer.bytes = mine.size_bytes();
  }

  void broadcast(std::vector<uint8_t>& bytes, int root) override {
    Timer timer(*this);
    uint64_t n = bytes.size();
    check(MPI_Bcast(&n, 1, MPI_UINT64_T, root, comm_), "MPI_Bcast");
    bytes.resize(static_cast<size_t>(n));
    check(MPI_Bcast(bytes.data(), as_count(static_cast<int64_t>(n)), MPI_BYTE, root, comm_),
          "MPI_Bcast");
    if (rank_ == root) timer.bytes = static_cast<uint64_t>(size_ - 1) * n;
  }

  void barrier() override { check(MPI_Barrier(comm_), "MPI_Barrier"); }

 private:
  // Counts one call (its wall time and the bytes set) when it ends.
  struct Timer {
    explicit Timer(MpiCommunicator& c) : comm(c) {}
    ~Timer() {
      comm.count(bytes,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    MpiCommunicator& comm;
    uint64_t bytes = 0;  // sent by this rank
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  };

  void set_counts(std::span<const float> mine, std::span<const int64_t> counts) {
    if (static_cast<int>(counts.size()) != size_ ||
        counts[static_cast<size_t>(rank_)] != static_cast<int64_t>(mine.size())) {
      throw std::logic_error("communicator: counts do not match the data");
    }
    chunk_counts_.resize(counts.size());
    chunk_offsets_.resize(counts.size());
    int64_t offset = 0;
    for (size_t r = 0; r < counts.size(); ++r) {
      chunk_counts_[r] = as_count(counts[r]);
      chunk_offsets_[r] = as_count(offset);
      offset += counts[r];
    }
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  // Reused so a step's collectives allocate nothing once warm.
  std::vector<int> chunk_counts_, chunk_offsets_, recv_counts_, recv_offsets_;
  std::vector<float> parts_;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator() {
  return std::make_unique<MpiCommunicator>();
}

}  // namespace gemmaserve
