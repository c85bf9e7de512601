// The engine side of tensor parallelism: joining the ranks (communicator, CPU share) and the
// loop the ranks other than 0 run instead of an engine.
#pragma once

#include <memory>

#include "gemmaserve/llm.h"
#include "parallel/communicator.h"

namespace gemmaserve {

// For tensor_parallel_size > 1: the MPI communicator of the ranks this process belongs to
// (InputError unless it runs under mpirun with that many ranks); restricts the process to its
// CPU share (*pin stays true only when it got one) and sets args.threads to the share's CPUs
// when it was 0. nullptr for one rank.
std::shared_ptr<Communicator> join_tensor_parallel_ranks(EngineArgs& args, bool* pin);

// A rank other than 0: loads its slice of the model as the engine on rank 0 does and runs the
// steps rank 0 sends until rank 0's engine stops.
void run_tensor_parallel_follower(EngineArgs args);

}  // namespace gemmaserve
