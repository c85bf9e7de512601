// Products with bound weight matrices and row-parallel loops, as the encoders (vision tower,
// unified embedders) run them outside the decoder's forward pass.
#pragma once

#include <cstdint>

#include "core/function_ref.h"
#include "core/thread_pool.h"
#include "kernels/cpu/matmul.h"
#include "model/weights.h"

namespace gemmaserve {

// Y[t, w.rows] = X[t, w.cols] Wᵀ with the matrix's dtype, layout and input permutation, on
// `pool` (nullptr: the calling thread).
void matmul_weights(const WeightMatrix& w, const float* x, int64_t ldx, int64_t t, float* y,
                    int64_t ldy, cpu::MatmulPrecision precision, ThreadPool* pool);

// fn(begin, end) over [0, rows) in pieces on `pool`; one call when pool is null or rows < 2.
void for_row_ranges(ThreadPool* pool, int64_t rows, FunctionRef<void(int64_t, int64_t)> fn);

}  // namespace gemmaserve
