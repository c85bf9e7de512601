// Collective operations between the ranks that share one model (tensor parallelism). Every sum
// runs in a fixed order (rank 0's part first, then rank 1's, ...), so a result never depends on
// message timing and every rank holds the same bits. Backends: one process (size 1, no copies)
// and MPI (mpi_communicator.cpp); a device backend can slot in behind the same interface.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace gemmaserve {

// What the collectives moved so far (this rank's sends), for benchmarks and tests.
struct CommunicatorStats {
  uint64_t calls = 0;
  uint64_t bytes_sent = 0;
  double seconds = 0.0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend_name() const = 0;

  // data <- the element-wise sum of every rank's data, summed in rank order; all ranks pass the
  // same length.
  virtual void all_reduce_sum(std::span<float> data) = 0;
  // out <- the concatenation of every rank's `mine`, in rank order; counts[r] is rank r's length
  // and out holds their sum.
  virtual void all_gather(std::span<const float> mine, std::span<const int64_t> counts,
                          float* out) = 0;
  // Like all_gather, but only `root` receives (`out` is ignored elsewhere).
  virtual void gather(std::span<const float> mine, std::span<const int64_t> counts, float* out,
                      int root) = 0;
  // `bytes` on every rank becomes root's (resized to its length).
  virtual void broadcast(std::vector<uint8_t>& bytes, int root) = 0;
  virtual void barrier() = 0;

  // A snapshot; safe to take from any thread while collectives run on another.
  CommunicatorStats stats() const {
    return {calls_.load(std::memory_order_relaxed), bytes_sent_.load(std::memory_order_relaxed),
            static_cast<double>(nanoseconds_.load(std::memory_order_relaxed)) * 1e-9};
  }

 protected:
  // Counts one collective that sent `bytes` from this rank and took `seconds`.
  void count(uint64_t bytes, double seconds) {
    calls_.fetch_add(1, std::memory_order_relaxed);
    bytes_sent_.fetch_add(bytes, std::memory_order_relaxed);
    nanoseconds_.fetch_add(static_cast<uint64_t>(seconds * 1e9), std::memory_order_relaxed);
  }

 private:
  std::atomic<uint64_t> calls_{0}, bytes_sent_{0}, nanoseconds_{0};
};

// The size-1 communicator: every collective is a copy or nothing.
class SingleProcessCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend_name() const override { return "single"; }
  void all_reduce_sum(std::span<float>) override {}
  void all_gather(std::span<const float> mine, std::span<const int64_t> counts,
                  float* out) override;
  void gather(std::span<const float> mine, std::span<const int64_t> counts, float* out,
              int root) override;
  void broadcast(std::vector<uint8_t>&, int) override {}
  void barrier() override {}
};

// True when this process was started by mpirun (OpenMPI's OMPI_COMM_WORLD_SIZE is set).
bool launched_by_mpirun();

// "single", "mpi", or "auto" (mpi when launched_by_mpirun(), else single); InputError on any
// other name. The MPI backend initialises MPI once per process and finalises it when the last
// MPI communicator is destroyed.
std::unique_ptr<Communicator> make_communicator(const std::string& backend);

}  // namespace gemmaserve
