// Shared pieces of the ggml block dequantizers (ggml_dequant.cpp, ggml_dequant_iq.cpp).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/dtype.h"

namespace gemmaserve::cpu::ggml_dequant_detail {

// ggml's blocks are little-endian, and it reads codebook entries as byte arrays (memcpy here).
static_assert(std::endian::native == std::endian::little,
              "ggml blocks are little-endian; loads below assume the host is too");

// Unaligned little-endian loads: rows of 18- or 50-byte blocks start at any address.
inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline float load_f16(const uint8_t* p) { return f16_to_f32(load_u16(p)); }

// Runs a one-block dequantizer over n consecutive blocks of `dtype`.
template <void (*kBlock)(const uint8_t*, float*)>
void run_blocks(DType dtype, const std::byte* src, float* dst, int64_t n) {
  const size_t bytes = dtype_size(dtype);
  const int64_t elems = dtype_block_elems(dtype);
  const auto* b = reinterpret_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n; ++i, b += bytes, dst += elems) kBlock(b, dst);
}

// run_blocks of one block format.
using BlockRunner = void (*)(DType, const std::byte*, float*, int64_t);

// The IQ types' runners (IQ2_XXS ... IQ4_XS); nullptr for any other dtype.
BlockRunner iq_block_runner(DType dtype);

}  // namespace gemmaserve::cpu::ggml_dequant_detail
