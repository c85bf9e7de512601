// How a model-running command (serve, generate, bench) becomes N tensor-parallel ranks.
#pragma once

#include "gemmaserve/llm.h"

namespace gemmaserve {

// With tensor_parallel_size > 1: outside mpirun and backend "mp", re-executes this command as
// that many ranks under mpirun (does not return); backend "mpi" outside mpirun is an
// InputError. Inside mpirun a rank other than 0 runs the model for rank 0 and returns true
// (the command then exits 0); rank 0 returns false and runs the command.
bool run_as_tensor_parallel_follower(const EngineArgs& args);

}  // namespace gemmaserve
