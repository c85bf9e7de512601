// Element types of checkpoint tensors and exact conversions to float.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace gemmaserve {

enum class DType { kF32, kF16, kBF16, kF64, kI64, kI32, kI16, kI8, kU8, kBool };

// Size of one element in bytes.
size_t dtype_size(DType dtype);
// Safetensors spelling: "F32", "BF16", ...
const char* dtype_name(DType dtype);
// Parses a safetensors dtype string; returns false for unknown names.
bool parse_dtype(const std::string& name, DType* out);

inline float bf16_to_f32(uint16_t v) { return std::bit_cast<float>(static_cast<uint32_t>(v) << 16); }

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
