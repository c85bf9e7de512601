// Gemma 4's MoE experts stored one module per expert - `layers.L.experts.E.{gate,up,down}_proj`
// [I, H], [I, H], [H, I], as GPTQ, AWQ and compressed-tensors checkpoints write them (and as
// vLLM maps them onto its fused MoE weights) - fused into the model's experts_gate_up
// [E, 2I, H] (per expert: its gate rows, then its up rows) and experts_down [E, H, I].
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/tensor_binder.h"
#include "model/weights.h"

namespace gemmaserve {

struct FusedExperts {
  WeightMatrix gate_up, down;
};

// Binds `layer` + "experts.E.{gate,up,down}_proj.weight" for E < experts (InputError naming the
// missing or misshapen tensor) and copies their rows into one buffer per fused matrix (kept in
// `owned`), each in one dtype: the experts' own when they agree, Q8_0 when they mix Q4_0 and
// Q8_0 (a Q4_0 block is a Q8_0 block with the same scale), else F32; every conversion exact.
// The per-expert tensors' buffers in `built` (checkpoint/'s take_built_tensors; may be null)
// are released once copied.
FusedExperts fuse_experts(TensorBinder& b, const std::string& layer, int64_t experts,
                          int64_t intermediate, int64_t hidden,
                          std::vector<std::shared_ptr<const void>>* owned,
                          std::map<std::string, std::shared_ptr<const void>>* built);

}  // namespace gemmaserve
