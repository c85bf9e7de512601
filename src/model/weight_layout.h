// How the loaded weights lie in memory for the kernels: matrices regrouped 16 rows at a time
// (kernels/cpu/interleave.h) where the chosen kernels run faster that way.
#pragma once

#include "core/thread_pool.h"
#include "model/weights.h"

namespace gemmaserve {

// Regroups every matrix the forward pass multiplies (the tied embedding with the head) into
// WeightLayout::kInterleaved16 where cpu::interleave_preferred(its dtype) holds and its shape
// allows (rows, and each expert's rows, a multiple of 16; row length a multiple of 32). The
// row-major buffers this replaces are released (mapped checkpoint pages stay clean and
// reclaimable). Logs what it did.
void interleave_weights(ModelWeights& w, ThreadPool* pool);

}  // namespace gemmaserve
