// Dequantizers of ggml's storage-only block formats (dtype_is_storage_only: Q4_1 ... Q2_0), for
// cpu::dequantize_row. They follow ggml's dequantize_row_* f32 operations in ggml's order, so
// the floats match ggml's bit for bit (the file compiles without fused multiply-adds).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace gemmaserve::cpu {

// Dequantizes n_blocks whole blocks of `dtype` (a storage-only type) at src, which needs no
// alignment, into n_blocks * dtype_block_elems(dtype) floats. Any bit pattern is safe input:
// NaN / inf scales give NaN / inf values, never undefined behaviour.
void dequantize_ggml_blocks(DType dtype, const std::byte* src, float* dst, int64_t n_blocks);

}  // namespace gemmaserve::cpu
