// Matrix product against block-quantized weights (Q8_0, Q4_0, Q4_K): Y[T, N] = X[T, K] · W[N, K]ᵀ.
// X rows are quantized to int8 in blocks of 32 (per-block f32 scale), block dot products are
// exact integers, and every output element is accumulated in one canonical float order (16
// lanes, see quant_matmul_internal.h) that every ISA path reproduces bit for bit, so results do
// not depend on T, tiling, thread count or the CPU's vector width.
#pragma once

#include <span>

#include "core/thread_pool.h"
#include "kernels/cpu/matmul.h"

namespace gemmaserve::cpu {

// kAvx2: vpmaddubsw / vpmaddwd; kAvxVnni: VEX vpdpbusd in 256-bit vectors; kAvx512Vnni.
enum class QuantIsa { kPortable, kAvx2, kAvxVnni, kAvx512Vnni };

// args.w_dtype must be quantized and args.k a multiple of its block size (InputError
// otherwise). Splits N statically over `pool` (nullptr = calling thread only).
void quant_matmul(const MatmulArgs& args, ThreadPool* pool);

// matmul_group for quantized parts: X is quantized once for all of them.
void quant_matmul_group(std::span<const MatmulArgs> parts, ThreadPool* pool);

// Grows the calling thread's quantized-X buffers to `rows` rows of length k (any weight type).
void reserve_quant_act_scratch(int64_t rows, int64_t k);

// The same product on a chosen ISA path (tests and benchmarks); the path must be supported.
void quant_matmul_isa(const MatmulArgs& args, ThreadPool* pool, QuantIsa isa);
bool quant_isa_supported(QuantIsa isa);
QuantIsa quant_best_isa();
const char* quant_isa_name(QuantIsa isa);

}  // namespace gemmaserve::cpu
