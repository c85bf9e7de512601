// Element types of checkpoint tensors and exact conversions to float.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace gemmaserve {

// kQ8_0, kQ4_0 and kQ4_K are block-quantized weight rows with native matmul kernels:
//   Q8_0: blocks of 32 = f16 scale + 32 x int8                               (34 bytes)
//   Q4_0: blocks of 32 = f16 scale + 16 bytes of 4-bit values, offset 8      (18 bytes)
//   Q4_K: blocks of 256 = f16 d, f16 dmin, 12 bytes of 6-bit scales/mins for 8 sub-blocks
//         of 32, 128 bytes of 4-bit values                                   (144 bytes)
// The types after kQ4_K are ggml's other block formats as GGUF files store them (byte layouts
// in kernels/cpu/ggml_dequant.cpp): storage only, dequantized at load (dtype_is_storage_only).
enum class DType {
  kF32,
  kF16,
  kBF16,
  kF64,
  kI64,
  kI32,
  kI16,
  kI8,
  kU8,
  kBool,
  kQ8_0,
  kQ4_0,
  kQ4_K,
  kQ4_1,
  kQ5_0,
  kQ5_1,
  kQ2_K,
  kQ3_K,
  kQ5_K,
  kQ6_K,
  kIQ2_XXS,
  kIQ2_XS,
  kIQ3_XXS,
  kIQ1_S,
  kIQ4_NL,
  kIQ3_S,
  kIQ2_S,
  kIQ4_XS,
  kIQ1_M,
  kTQ1_0,
  kTQ2_0,
  kMXFP4,
  kNVFP4,
  kQ1_0,
  kQ2_0
};

// How a quantized weight matrix's rows lie in memory. kRows: row after row (checkpoint and
// llama.cpp order). kInterleaved16: Q8_0 / Q4_0 regrouped 16 rows at a time for the AVX-512
// VNNI kernels (layout in kernels/cpu/interleave.h); a group takes the bytes of its 16
// rows, so row r still starts group r / 16 at byte (r - r % 16) * row_bytes.
enum class WeightLayout { kRows, kInterleaved16 };

// Size of one element in bytes (of one block for the quantized types).
size_t dtype_size(DType dtype);
// Elements per block: 1 for element types, 32 to 256 for the block types.
int64_t dtype_block_elems(DType dtype);
// The block types with native matmul kernels: Q8_0, Q4_0, Q4_K.
inline bool dtype_is_quantized(DType d) {
  return d == DType::kQ8_0 || d == DType::kQ4_0 || d == DType::kQ4_K;
}
// Any block-quantized type, with a native kernel or not.
inline bool dtype_is_block(DType d) { return dtype_block_elems(d) > 1; }
// Block types without a kernel: they must be converted at load.
inline bool dtype_is_storage_only(DType d) { return dtype_is_block(d) && !dtype_is_quantized(d); }
// Bytes of one row of `cols` elements; cols must be a multiple of dtype_block_elems.
inline size_t dtype_row_bytes(DType dtype, int64_t cols) {
  return static_cast<size_t>(cols / dtype_block_elems(dtype)) * dtype_size(dtype);
}
// Safetensors spelling: "F32", "BF16", ...; ggml's upper-cased for block types: "Q6_K", "IQ2_XXS".
const char* dtype_name(DType dtype);
// Parses a safetensors dtype string; returns false for unknown names.
bool parse_dtype(const std::string& name, DType* out);

inline float bf16_to_f32(uint16_t v) {
  return std::bit_cast<float>(static_cast<uint32_t>(v) << 16);
}

// Round-to-nearest-even, NaN preserved (quiet).
inline uint16_t f32_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// Converts n elements of `src` (of type dtype: F32, F16 or BF16) to float.
void convert_to_f32(DType dtype, const void* src, float* dst, size_t n);

}  // namespace gemmaserve
