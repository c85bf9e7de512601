// Block-quantized weight rows (Q8_0, Q4_0, Q4_K; layouts in core/dtype.h): quantizing f32 /
// f16 / bf16 rows and dequantizing them back to f32.
//
// Byte layouts (llama.cpp-compatible block order, little-endian):
//   Q8_0 block (34 B): f16 d, int8 q[32];            x[i] = d * q[i]
//   Q4_0 block (18 B): f16 d, uint8 qs[16];          x[i] = d * ((qs[i] & 15) - 8),
//                                                    x[i + 16] = d * ((qs[i] >> 4) - 8)
//   Q4_K block (144 B): f16 d, f16 dmin, uint8 scales[12], uint8 qs[128]; sub-block s (32
//     elements) has 6-bit scale sc[s] and min m[s] (packing: see q4k_scale_min) and
//     x = d * sc[s] * q - dmin * m[s]; qs[32c + l] holds sub-block 2c element l in its low
//     nibble and sub-block 2c + 1 element l in its high nibble.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace gemmaserve::cpu {

constexpr int64_t kQ8BlockElems = 32;
constexpr int64_t kQ4KBlockElems = 256;
constexpr size_t kQ8_0BlockBytes = 34;
constexpr size_t kQ4_0BlockBytes = 18;
constexpr size_t kQ4KBlockBytes = 144;

// Quantizes n f32 values into dst (dtype_row_bytes(dtype, n) bytes); n must be a multiple of
// dtype_block_elems(dtype) (InputError otherwise). Deterministic: same input, same bytes.
void quantize_row(DType dtype, const float* src, void* dst, int64_t n);

// Quantizes n elements of a F32 / F16 / BF16 row; `scratch` holds n floats.
void quantize_row_from(DType dtype, DType src_dtype, const void* src, void* dst, int64_t n,
                       float* scratch);

// Dequantizes n values (a multiple of the block size) of a row of any block type (dtype_is_block)
// to f32, bit for bit as ggml's dequantize_row_* (the storage-only types: ggml_dequant.h).
void dequantize_row(DType dtype, const void* src, float* dst, int64_t n);

// Scale and min (6 bits each) of sub-block s (0..7) of a Q4_K block's 12 packed bytes:
// s < 4: sc = b[s] & 63, m = b[s + 4] & 63; s >= 4: the low 4 bits come from b[s + 4] (low /
// high nibble), the top 2 bits from the spare top bits of b[s - 4] / b[s].
inline void q4k_scale_min(const uint8_t* b, int s, uint8_t* sc, uint8_t* m) {
  if (s < 4) {
    *sc = b[s] & 63;
    *m = b[s + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((b[s + 4] & 0xF) | ((b[s - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((b[s + 4] >> 4) | ((b[s] >> 6) << 4));
  }
}

// The quantization type named on the command line: "q8_0", "q4_0", "q4_k" (case-insensitive);
// InputError naming `flag` otherwise.
DType parse_quantization_type(const std::string& text, const std::string& flag);
// "q8_0", "q4_0", "q4_k".
const char* quantization_type_name(DType dtype);

}  // namespace gemmaserve::cpu
