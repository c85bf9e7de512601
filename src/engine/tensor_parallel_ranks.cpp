#include "engine/tensor_parallel_ranks.h"

#include <string>

#include "core/error.h"
#include "core/logging.h"
#include "kernels/cpu/quant.h"
#include "model/gemma4_model.h"
#include "model/tensor_parallel.h"
#include "model/weights.h"
#include "parallel/rank_launch.h"

namespace gemmaserve {

std::shared_ptr<Communicator> join_tensor_parallel_ranks(EngineArgs& args, bool* pin) {
  const int n = args.tensor_parallel_size;
  if (n < 1)
    throw InputError("--tensor-parallel-size must be at least 1, got " + std::to_string(n));
  if (n == 1) return nullptr;
  if (mpirun_size() != n) {
    throw InputError("--tensor-parallel-size " + std::to_string(n) + " needs " + std::to_string(n) +
                     " ranks; this process is one of " + std::to_string(mpirun_size()) +
                     " (use --distributed-executor-backend mp, or mpirun -n " + std::to_string(n) +
                     ")");
  }
  *pin = restrict_to_rank_cpus() && *pin;
  if (args.threads == 0) args.threads = allowed_cpu_count();
  std::shared_ptr<Communicator> comm = make_communicator("mpi");
  GS_LOG_INFO << "tensor parallel rank " << comm->rank() << " of " << comm->size() << ", "
              << args.threads << " threads" << (*pin ? " pinned" : "");
  return comm;
}

void run_tensor_parallel_follower(EngineArgs args) {
  bool pin = true;
  std::shared_ptr<Communicator> comm = join_tensor_parallel_ranks(args, &pin);
  auto pool = std::make_shared<ThreadPool>(static_cast<size_t>(args.threads), pin);
  WeightLoadOptions load;
  load.tensor_parallel_rank = comm->rank();
  load.tensor_parallel_size = comm->size();
  load.expert_parallel = args.enable_expert_parallel;
  if (!args.quantization.empty()) {
    apply_quantization_flag(args.quantization, "--quantization", &load);
    load.pool = pool.get();
  }
  ModelWeights weights = load_model_weights(args.model, nullptr, load);
  GS_LOG_INFO << "tensor parallel rank " << comm->rank() << " holds " << held_weight_bytes(weights)
              << " weight bytes";
  Gemma4ModelOptions options;
  options.matmul_precision =
      parse_matmul_precision(args.cpu_matmul_precision, "--cpu-matmul-precision");
  Gemma4Model model(std::move(weights), pool, options, comm);
  model.follow();
}

}  // namespace gemmaserve
