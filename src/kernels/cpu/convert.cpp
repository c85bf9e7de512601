#include "kernels/cpu/convert.h"

#include <bit>
#include <cstdint>
#include <cstring>
#include <string>

#include "core/error.h"
#include "kernels/cpu/quant.h"

namespace gemmaserve::cpu {
namespace {

// 16-bit elements are read with memcpy: a GGUF tensor may start at any even-or-odd offset.
inline uint32_t load_u16(const std::byte* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

void bf16_to_f32_n(const std::byte* __restrict src, float* __restrict dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = std::bit_cast<float>(load_u16(src + 2 * i) << 16);
}

// Shifts exponent+mantissa into f32 position and rescales by 2^112, which is exact for normal
// and subnormal halves alike; inf/NaN get the all-ones exponent instead.
void f16_to_f32_n(const std::byte* __restrict src, float* __restrict dst, size_t n) {
  const float kScale = std::bit_cast<float>(0x77800000u);  // 2^112
  for (size_t i = 0; i < n; ++i) {
    const uint32_t h = load_u16(src + 2 * i);
    const uint32_t sign = (h & 0x8000u) << 16;
    const uint32_t em = (h & 0x7fffu) << 13;
    const float mag = std::bit_cast<float>(em) * kScale;
    const uint32_t finite = std::bit_cast<uint32_t>(mag);
    const uint32_t special = em | 0x7f800000u;
    const uint32_t bits = (h & 0x7c00u) == 0x7c00u ? special : finite;
    dst[i] = std::bit_cast<float>(bits | sign);
  }
}

}  // namespace

void to_f32(DType dtype, const void* src, float* dst, size_t n) {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case DType::kBF16:
      bf16_to_f32_n(static_cast<const std::byte*>(src), dst, n);
      return;
    case DType::kF16:
      f16_to_f32_n(static_cast<const std::byte*>(src), dst, n);
      return;
    default:
      if (!dtype_is_block(dtype)) {
        throw InputError(std::string("to_f32: unsupported dtype ") + dtype_name(dtype));
      }
      dequantize_row(dtype, src, dst, static_cast<int64_t>(n));
      return;
  }
}

}  // namespace gemmaserve::cpu
