// AutoAWQ GEMM checkpoints (awq/modules/linear/gemm.py; vLLM's awq.py reads the same): per
// module `qweight` int32 [K, N / 8] (output dim packed, nibble j of word c holding column
// 8c + [0, 2, 4, 6, 1, 3, 5, 7][j]), `qzeros` int32 [G, N / 8] in the same order (real zeros),
// `scales` f16 [G, N]; w = s * (q - z). 4 bits, any group size, version gemm;
// `modules_to_not_convert` names (substrings of module names) stay float.
#pragma once

#include "checkpoint/checkpoint.h"
#include "checkpoint/packed_tensors.h"

namespace gemmaserve {

// Every module stored as `X.qweight` in `base`; InputError for another version (gemv,
// gemv_fast, marlin), bits other than 4, a listed module stored packed, shapes that disagree.
PackedPlan plan_awq(const Checkpoint& base, const QuantizationConfig& config);

}  // namespace gemmaserve
