#include "parallel/communicator.h"

#include <cstdlib>
#include <cstring>
#include <numeric>
#include <stdexcept>

#include "core/error.h"

namespace gemmaserve {

std::unique_ptr<Communicator> make_mpi_communicator();  // mpi_communicator.cpp

namespace {

void copy_whole(std::span<const float> mine, std::span<const int64_t> counts, float* out) {
  if (counts.size() != 1 || counts[0] != static_cast<int64_t>(mine.size())) {
    throw std::logic_error("communicator: counts do not match the data");
  }
  if (!mine.empty()) std::memcpy(out, mine.data(), mine.size_bytes());
}

}  // namespace

void SingleProcessCommunicator::all_gather(std::span<const float> mine,
                                           std::span<const int64_t> counts, float* out) {
  copy_whole(mine, counts, out);
}

void SingleProcessCommunicator::gather(std::span<const float> mine, std::span<const int64_t> counts,
                                       float* out, int) {
  copy_whole(mine, counts, out);
}

bool launched_by_mpirun() { return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr; }

std::unique_ptr<Communicator> make_communicator(const std::string& backend) {
  if (backend == "single") return std::make_unique<SingleProcessCommunicator>();
  if (backend == "mpi") return make_mpi_communicator();
  if (backend == "auto") {
    if (launched_by_mpirun()) return make_mpi_communicator();
    return std::make_unique<SingleProcessCommunicator>();
  }
  throw InputError("unknown communicator backend '" + backend + "' (expected single, mpi or auto)");
}

}  // namespace gemmaserve
