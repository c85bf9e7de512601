// Portable level of the matmul (any CPU, plain C++): 16 scalar lanes per output element with
// the same lane assignment and reduction tree as the SIMD levels (mul then add, not fused).
#include <bit>
#include <cstddef>
#include <cstdint>

#include "kernels/cpu/matmul_kernels.h"
#include "kernels/cpu/matmul_tiling.h"

namespace gemmaserve::cpu::detail {
namespace {

struct PortableVec {
  struct Vec {
    float v[kLanes];
  };
  static Vec zero() { return Vec{}; }
  static Vec load_x(const float* p) {
    Vec r;
    for (int j = 0; j < kLanes; ++j) r.v[j] = p[j];
    return r;
  }
  static Vec load_x_tail(const float* p, int rem) {
    Vec r{};
    for (int j = 0; j < rem; ++j) r.v[j] = p[j];
    return r;
  }
  // Same exact conversion as kernels/cpu/convert.cpp: rescale by 2^112, inf/NaN apart.
  static float half_to_f32(uint16_t h) {
    const uint32_t sign = (h & 0x8000u) << 16;
    const uint32_t em = (h & 0x7fffu) << 13;
    const float mag = std::bit_cast<float>(em) * std::bit_cast<float>(0x77800000u);
    const uint32_t bits =
        (h & 0x7c00u) == 0x7c00u ? (em | 0x7f800000u) : std::bit_cast<uint32_t>(mag);
    return std::bit_cast<float>(bits | sign);
  }
  template <DType D>
  static float element(const std::byte* row, int64_t i) {
    if constexpr (D == DType::kF32) {
      return reinterpret_cast<const float*>(row)[i];
    } else {
      const uint16_t h = reinterpret_cast<const uint16_t*>(row)[i];
      if constexpr (D == DType::kF16) return half_to_f32(h);
      return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
    }
  }
  template <DType D>
  static Vec load_w(const std::byte* row, int64_t i) {
    Vec r;
    for (int j = 0; j < kLanes; ++j) r.v[j] = element<D>(row, i + j);
    return r;
  }
  template <DType D>
  static Vec load_w_tail(const std::byte* row, int64_t i, int rem) {
    Vec r{};
    for (int j = 0; j < rem; ++j) r.v[j] = element<D>(row, i + j);
    return r;
  }
  static Vec fma(const Vec& x, const Vec& w, Vec acc) {
    for (int j = 0; j < kLanes; ++j) acc.v[j] += x.v[j] * w.v[j];
    return acc;
  }
  static float reduce(const Vec& a) {
    float s8[8], s4[4];
    for (int j = 0; j < 8; ++j) s8[j] = a.v[j] + a.v[j + 8];
    for (int j = 0; j < 4; ++j) s4[j] = s8[j] + s8[j + 4];
    return (s4[0] + s4[2]) + (s4[1] + s4[3]);
  }
};

}  // namespace

void matmul_range_portable(const MatmulArgs& a, int64_t n_begin, int64_t n_end) {
  matmul_range_any<PortableVec>(a, n_begin, n_end);
}

float dot_f32_portable(const float* a, const float* b, int64_t n) {
  return dot_f32_any<PortableVec>(a, b, n);
}

}  // namespace gemmaserve::cpu::detail
