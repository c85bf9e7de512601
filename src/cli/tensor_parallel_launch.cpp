#include "cli/tensor_parallel_launch.h"

#include <string>

#include "core/error.h"
#include "engine/tensor_parallel_ranks.h"
#include "parallel/communicator.h"
#include "parallel/rank_launch.h"

namespace gemmaserve {

bool run_as_tensor_parallel_follower(const EngineArgs& args) {
  const std::string& backend = args.distributed_executor_backend;
  if (backend != "mp" && backend != "mpi") {
    throw InputError("--distributed-executor-backend: unknown backend '" + backend +
                     "' (expected mp or mpi)");
  }
  if (args.tensor_parallel_size <= 1) return false;
  if (!launched_by_mpirun()) {
    if (backend == "mpi") {
      throw InputError("--distributed-executor-backend mpi: start gemmaserve under mpirun -n " +
                       std::to_string(args.tensor_parallel_size));
    }
    exec_self_under_mpirun(args.tensor_parallel_size);
  }
  if (mpirun_rank() == 0) return false;
  run_tensor_parallel_follower(args);
  return true;
}

}  // namespace gemmaserve
