// compressed-tensors checkpoints (llm-compressor; Google's QAT `-it-qat-w4a16-ct` releases;
// vLLM's compressed_tensors reads the same). Weight-only integer schemes:
//   pack-quantized: `weight_packed` int32 [N, ceil(K * bits / 32)] (input dim packed, element j
//     of a word at bits * j), signed q stored as q + 2^(bits-1); `weight_scale` [N, G] (group),
//     [N, 1] (channel) or [1] (tensor); asymmetric: `weight_zero_point` int32
//     [ceil(N * bits / 32), G] packed along the output dim, stored zp + 2^(bits-1);
//     `weight_shape` [2] = (N, K); optional `weight_g_idx` int32 [K] (actorder group).
//   naive-quantized / int-quantized: `weight` int8 [N, K] holding q, `weight_zero_point` int8
//     [N, G] holding zp (asymmetric).
// w = scale * (q - zp). A module takes the scheme of the config group whose targets match it
// (an exact name first, then `re:` patterns matching the start of the name, then the class
// `Linear`); `ignore` entries (names or `re:` patterns) and modules no target matches stay as
// stored.
#pragma once

#include "checkpoint/checkpoint.h"
#include "checkpoint/packed_tensors.h"

namespace gemmaserve {

// Every module stored as `X.weight_packed`, or as an integer `X.weight` with `X.weight_scale`,
// in `base`; InputError for what the reader does not support (float-quantized FP8, activation
// quantization, bits other than 4 and 8, block strategies, sparsity and transforms), a
// quantized module the config ignores or no target matches, and shapes that disagree.
PackedPlan plan_compressed_tensors(const Checkpoint& base, const QuantizationConfig& config);

}  // namespace gemmaserve
