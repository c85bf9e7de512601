#include "model/gemma4_model.h"

#include <utility>

#include "model/gemma4_forward.h"

namespace gemmaserve {

// Per-model plan plus buffers reused by every forward() call.
struct Gemma4Model::Scratch {
  detail::Gemma4Plan plan;
  detail::Gemma4Workspace ws;
};

Gemma4Model::Gemma4Model(ModelWeights weights, std::shared_ptr<ThreadPool> pool)
    : weights_(std::move(weights)), pool_(std::move(pool)), scratch_(std::make_unique<Scratch>()) {
  scratch_->plan = detail::make_gemma4_plan(weights_);
}

Gemma4Model::~Gemma4Model() = default;

void Gemma4Model::forward(std::span<const SequenceInput> batch, KvCache& cache,
                          ForwardOutput* out) {
  detail::Gemma4Forward runner(weights_, scratch_->plan, pool_.get(), scratch_->ws, matmul_calls_);
  runner.run(batch, cache, out);
}

}  // namespace gemmaserve
