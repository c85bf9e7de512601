// GPTQ checkpoints (AutoGPTQ, GPTQModel; vLLM's gptq.py reads the same): per module `qweight`
// int32 [K * bits / 32, N] (input dim packed, element j of a word at bits * j), `qzeros` int32
// [G, N * bits / 32] (output dim packed the same way; checkpoint_format gptq stores zero - 1,
// gptq_v2 the zero), `scales` f16 [G, N], `g_idx` int32 [K] (the group of each input column;
// act-order when desc_act). Bits 4 and 8, any group size (-1: one group), GPTQModel's
// `dynamic` per-module rules (`-:regex` excludes a module, `+:regex` or a bare regex overrides
// bits / group_size / desc_act; the first rule matching the start of the name wins).
#pragma once

#include "checkpoint/checkpoint.h"
#include "checkpoint/packed_tensors.h"

namespace gemmaserve {

// Every module stored as `X.qweight` in `base`; InputError naming the module for anything the
// reader does not support (bits other than 4 and 8, another checkpoint_format or pack_dtype)
// and naming the tensor for shapes that disagree.
PackedPlan plan_gptq(const Checkpoint& base, const QuantizationConfig& config);

}  // namespace gemmaserve
