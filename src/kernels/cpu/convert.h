// Branch-free (auto-vectorisable) conversion of checkpoint elements to f32.
#pragma once

#include <cstddef>

#include "core/dtype.h"

namespace gemmaserve::cpu {

// Converts n elements of type dtype (F32, BF16 or F16) to f32; exact, same values as
// core/dtype.h's scalar converters (NaN payloads aside); src needs no alignment. Block types
// (dtype_is_block) are dequantized as cpu::dequantize_row does: src must start at a block and n
// be a multiple of the block size.
void to_f32(DType dtype, const void* src, float* dst, size_t n);

}  // namespace gemmaserve::cpu
