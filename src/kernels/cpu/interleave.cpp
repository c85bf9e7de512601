#include "kernels/cpu/interleave.h"

#include <cmath>
#include <cstring>
#include <string>

#include "core/error.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matmul_kernels.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/quant_matmul.h"
#include "kernels/cpu/quant_matmul_internal.h"

namespace gemmaserve::cpu {
namespace {

constexpr size_t kScaleBytes = 2 * kInterleaveRows;  // one block's 16 f16 scales
constexpr size_t kQ4KHeaderBytes = 256;  // a Q4_K super-block unit's d, dmin and scale bytes

inline size_t block_bytes(DType dtype) {
  return dtype == DType::kQ8_0 ? kQ8_0BlockBytes : kQ4_0BlockBytes;
}

// Bytes of the quantized values of one block of 16 rows: 512 (Q8_0) or 256 (Q4_0).
inline size_t values_bytes(DType dtype) { return kInterleaveRows * (block_bytes(dtype) - 2); }

inline float load_f16(const std::byte* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// One BF16 / F32 group: line j holds 4-byte word j (two bf16 or one f32) of the 16 rows.
void interleave_word_group(const std::byte* src, std::byte* dst, size_t row_bytes) {
  for (size_t j = 0; j < row_bytes / 4; ++j) {
    for (size_t r = 0; r < kInterleaveRows; ++r) {
      std::memcpy(dst + 64 * j + 4 * r, src + r * row_bytes + 4 * j, 4);
    }
  }
}

// Group `g` of a row-major matrix -> the interleaved bytes at dst.
void interleave_group(DType dtype, const std::byte* src, std::byte* dst, int64_t nb) {
  const size_t bb = block_bytes(dtype), row_bytes = static_cast<size_t>(nb) * bb;
  std::byte* values = dst + static_cast<size_t>(nb) * kScaleBytes;
  for (int64_t b = 0; b < nb; ++b) {
    std::byte* sc = dst + static_cast<size_t>(b) * kScaleBytes;
    std::byte* vb = values + static_cast<size_t>(b) * values_bytes(dtype);
    for (int64_t r = 0; r < kInterleaveRows; ++r) {
      const std::byte* blk = src + static_cast<size_t>(r) * row_bytes + static_cast<size_t>(b) * bb;
      std::memcpy(sc + 2 * r, blk, 2);
      // Q8_0: 8 quads of signed values, stored + 128; Q4_0: 4 lines of qs bytes as they are.
      const int lines = dtype == DType::kQ8_0 ? 8 : 4;
      for (int j = 0; j < lines; ++j) {
        std::byte* out = vb + 64 * j + 4 * r;
        for (int i = 0; i < 4; ++i) {
          const std::byte v = blk[2 + 4 * j + i];
          out[i] = dtype == DType::kQ8_0 ? (v ^ std::byte{0x80}) : v;
        }
      }
    }
  }
}

// Q4_K group (16 rows of ns super-blocks): per super-block its header and values (interleave.h).
void interleave_q4k_group(const std::byte* src, std::byte* dst, int64_t ns) {
  const size_t row_bytes = static_cast<size_t>(ns) * kQ4KBlockBytes;
  for (int64_t sb = 0; sb < ns; ++sb) {
    std::byte* unit = dst + static_cast<size_t>(sb) * kInterleaveRows * kQ4KBlockBytes;
    for (int64_t r = 0; r < kInterleaveRows; ++r) {
      const std::byte* blk =
          src + static_cast<size_t>(r) * row_bytes + static_cast<size_t>(sb) * kQ4KBlockBytes;
      std::memcpy(unit + 2 * r, blk, 2);
      std::memcpy(unit + 32 + 2 * r, blk + 2, 2);
      for (int j = 0; j < 12; ++j) unit[64 + 16 * j + r] = blk[4 + j];
      for (int c = 0; c < 4; ++c) {
        for (int m = 0; m < 8; ++m) {
          std::memcpy(unit + kQ4KHeaderBytes + 512 * c + 64 * m + 4 * r, blk + 16 + 32 * c + 4 * m,
                      4);
        }
      }
    }
  }
}

// Row r's original 144-byte block of super-block unit `unit` (the inverse of the above).
void q4k_block_of_row(const std::byte* unit, int r, std::byte* blk) {
  std::memcpy(blk, unit + 2 * r, 2);
  std::memcpy(blk + 2, unit + 32 + 2 * r, 2);
  for (int j = 0; j < 12; ++j) blk[4 + j] = unit[64 + 16 * j + r];
  for (int c = 0; c < 4; ++c) {
    for (int m = 0; m < 8; ++m) {
      std::memcpy(blk + 16 + 32 * c + 4 * m, unit + kQ4KHeaderBytes + 512 * c + 64 * m + 4 * r, 4);
    }
  }
}

// The stored (unsigned) value of element e of row r (0..15) in block b of a group, and the
// offset to subtract from it.
inline int stored_value(DType dtype, const std::byte* values_block, int r, int e) {
  if (dtype == DType::kQ8_0) {
    return std::to_integer<int>(values_block[64 * (e / 4) + 4 * r + e % 4]);
  }
  const int in_half = e % 16;
  const int byte = std::to_integer<int>(values_block[64 * (in_half / 4) + 4 * r + in_half % 4]);
  return e < 16 ? (byte & 15) : (byte >> 4);
}

inline int stored_offset(DType dtype) { return dtype == DType::kQ8_0 ? 128 : 8; }

using quant_detail::QuantActs;

// The canonical order (interleave.h) in scalar code.
template <DType kType>
void portable_interleaved_range(const MatmulArgs& args, const QuantActs& a, int64_t n_begin,
                                int64_t n_end) {
  const int64_t nb = a.blocks();
  const size_t group_bytes = static_cast<size_t>(kInterleaveRows) * dtype_row_bytes(kType, a.k);
  for (int64_t n = n_begin; n < n_end; ++n) {
    const std::byte* group = static_cast<const std::byte*>(args.w) +
                             static_cast<size_t>(n / kInterleaveRows) * group_bytes;
    const std::byte* values = group + static_cast<size_t>(nb) * kScaleBytes;
    const int r = static_cast<int>(n % kInterleaveRows);
    for (int64_t t = 0; t < args.t; ++t) {
      const int8_t* xq = a.q + t * a.k;
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const std::byte* vb = values + static_cast<size_t>(b) * values_bytes(kType);
        int32_t p = a.corr[t * nb + b];
        for (int e = 0; e < 32; ++e) p += stored_value(kType, vb, r, e) * xq[b * 32 + e];
        const float dw = load_f16(group + static_cast<size_t>(b) * kScaleBytes + 2 * r);
        acc = std::fma(dw * a.d[t * nb + b], static_cast<float>(p), acc);
      }
      args.y[static_cast<size_t>(t) * args.ldy + n] = acc;
    }
  }
}

// Q4_K's canonical order (interleave.h) in scalar code.
void portable_interleaved_q4k(const MatmulArgs& args, const QuantActs& a, int64_t n_begin,
                              int64_t n_end) {
  const int64_t ns = a.k / kQ4KBlockElems;
  const size_t unit_bytes = kInterleaveRows * kQ4KBlockBytes;
  for (int64_t n = n_begin; n < n_end; ++n) {
    const std::byte* group = static_cast<const std::byte*>(args.w) +
                             static_cast<size_t>(n / kInterleaveRows) * unit_bytes * ns;
    const int r = static_cast<int>(n % kInterleaveRows);
    for (int64_t t = 0; t < args.t; ++t) {
      const int8_t* xq = a.q + t * a.k;
      const int64_t nb = a.blocks();
      float acc = 0.0f;
      for (int64_t sb = 0; sb < ns; ++sb) {
        const std::byte* unit = group + static_cast<size_t>(sb) * unit_bytes;
        uint8_t packed[12];
        for (int j = 0; j < 12; ++j) packed[j] = std::to_integer<uint8_t>(unit[64 + 16 * j + r]);
        const float d = load_f16(unit + 2 * r), dmin = load_f16(unit + 32 + 2 * r);
        for (int s = 0; s < 8; ++s) {
          const int64_t b = sb * 8 + s;
          uint8_t sc, m;
          q4k_scale_min(packed, s, &sc, &m);
          const std::byte* line = unit + kQ4KHeaderBytes + 512 * (s / 2);
          int32_t p = 0;
          for (int e = 0; e < 32; ++e) {
            const int byte = std::to_integer<int>(line[64 * (e / 4) + 4 * r + e % 4]);
            p += (s % 2 == 0 ? byte & 15 : byte >> 4) * xq[b * 32 + e];
          }
          const float dsc = d * static_cast<float>(sc), dmm = dmin * static_cast<float>(m);
          acc = std::fma(dsc * a.d[t * nb + b], static_cast<float>(p), acc);
          acc = std::fma(-dmm, a.xs[t * nb + b], acc);
        }
      }
      args.y[static_cast<size_t>(t) * args.ldy + n] = acc;
    }
  }
}

}  // namespace

bool interleave_supported(DType dtype, int64_t rows, int64_t cols) {
  const int64_t block = dtype == DType::kQ4_K ? kQ4KBlockElems : kQ8BlockElems;
  return (dtype == DType::kQ8_0 || dtype == DType::kQ4_0 || dtype == DType::kQ4_K ||
          dtype == DType::kBF16 || dtype == DType::kF32) &&
         rows > 0 && rows % kInterleaveRows == 0 && cols > 0 && cols % block == 0;
}

bool interleave_preferred(DType dtype) {
  if (dtype == DType::kBF16 || dtype == DType::kF32) return cpu_isa() == CpuIsa::kAvx512;
  return (dtype == DType::kQ8_0 || dtype == DType::kQ4_0 || dtype == DType::kQ4_K) &&
         quant_best_isa() != QuantIsa::kPortable;
}

void interleave_rows(DType dtype, const void* src, void* dst, int64_t rows, int64_t cols,
                     ThreadPool* pool) {
  if (!interleave_supported(dtype, rows, cols)) {
    throw InputError(std::string("interleave: a ") + dtype_name(dtype) + " matrix of " +
                     std::to_string(rows) + " x " + std::to_string(cols) +
                     " cannot be interleaved (F32, BF16, Q8_0 or Q4_0 with columns a multiple "
                     "of 32, Q4_K of 256; rows a multiple of 16)");
  }
  const size_t group_bytes = static_cast<size_t>(kInterleaveRows) * dtype_row_bytes(dtype, cols);
  const auto* in = static_cast<const std::byte*>(src);
  auto* out = static_cast<std::byte*>(dst);
  const auto groups = static_cast<size_t>(rows / kInterleaveRows);
  auto run = [&](size_t b, size_t e) {
    for (size_t g = b; g < e; ++g) {
      if (dtype == DType::kBF16 || dtype == DType::kF32) {
        interleave_word_group(in + g * group_bytes, out + g * group_bytes,
                              dtype_row_bytes(dtype, cols));
      } else if (dtype == DType::kQ4_K) {
        interleave_q4k_group(in + g * group_bytes, out + g * group_bytes, cols / kQ4KBlockElems);
      } else {
        interleave_group(dtype, in + g * group_bytes, out + g * group_bytes, cols / kQ8BlockElems);
      }
    }
  };
  if (pool && groups > 1) {
    pool->parallel_for(groups, run);
  } else {
    run(0, groups);
  }
}

void interleaved_row_to_f32(DType dtype, const void* w, int64_t row, int64_t cols, float* out) {
  if (!interleave_supported(dtype, kInterleaveRows, cols)) {
    throw InputError(std::string("interleaved_row_to_f32: ") + dtype_name(dtype) +
                     " is not an interleaved type or cols is not a multiple of its block");
  }
  if (dtype == DType::kQ4_K) {
    const size_t unit_bytes = kInterleaveRows * kQ4KBlockBytes;
    const int64_t ns = cols / kQ4KBlockElems;
    const std::byte* group = static_cast<const std::byte*>(w) +
                             static_cast<size_t>(row / kInterleaveRows) * unit_bytes * ns;
    std::byte blk[kQ4KBlockBytes];
    for (int64_t sb = 0; sb < ns; ++sb) {
      q4k_block_of_row(group + static_cast<size_t>(sb) * unit_bytes,
                       static_cast<int>(row % kInterleaveRows), blk);
      dequantize_row(DType::kQ4_K, blk, out + sb * kQ4KBlockElems, kQ4KBlockElems);
    }
    return;
  }
  const int64_t nb = cols / kQ8BlockElems;
  const std::byte* group =
      static_cast<const std::byte*>(w) +
      static_cast<size_t>(row / kInterleaveRows) * kInterleaveRows * dtype_row_bytes(dtype, cols);
  const std::byte* values = group + static_cast<size_t>(nb) * kScaleBytes;
  const int r = static_cast<int>(row % kInterleaveRows);
  if (dtype == DType::kBF16) {
    for (int64_t p = 0; p < cols / 2; ++p) {
      uint16_t h[2];
      std::memcpy(h, group + 64 * p + 4 * r, 4);
      out[2 * p] = bf16_to_f32(h[0]);
      out[2 * p + 1] = bf16_to_f32(h[1]);
    }
    return;
  }
  if (dtype == DType::kF32) {
    for (int64_t i = 0; i < cols; ++i) std::memcpy(out + i, group + 64 * i + 4 * r, 4);
    return;
  }
  for (int64_t b = 0; b < nb; ++b) {
    const float d = load_f16(group + static_cast<size_t>(b) * kScaleBytes + 2 * r);
    const std::byte* vb = values + static_cast<size_t>(b) * values_bytes(dtype);
    for (int e = 0; e < 32; ++e) {
      out[b * 32 + e] =
          d * static_cast<float>(stored_value(dtype, vb, r, e) - stored_offset(dtype));
    }
  }
}

namespace detail {

void matmul_range_interleaved_portable(const MatmulArgs& a, int64_t n_begin, int64_t n_end) {
  const bool f32 = a.w_dtype == DType::kF32;
  const size_t group_bytes = static_cast<size_t>(kInterleaveRows) * dtype_row_bytes(a.w_dtype, a.k);
  for (int64_t n = n_begin; n < n_end; ++n) {
    const std::byte* group =
        static_cast<const std::byte*>(a.w) + static_cast<size_t>(n / kInterleaveRows) * group_bytes;
    const int r = static_cast<int>(n % kInterleaveRows);
    for (int64_t t = 0; t < a.t; ++t) {
      const float* x = a.x + static_cast<size_t>(t) * a.ldx;
      float even = 0.0f, odd = 0.0f;
      for (int64_t p = 0; p < a.k / 2; ++p) {
        float w[2];
        if (f32) {
          std::memcpy(&w[0], group + 128 * p + 4 * r, 4);
          std::memcpy(&w[1], group + 128 * p + 64 + 4 * r, 4);
        } else {
          uint16_t h[2];
          std::memcpy(h, group + 64 * p + 4 * r, 4);
          w[0] = bf16_to_f32(h[0]);
          w[1] = bf16_to_f32(h[1]);
        }
        even = std::fma(x[2 * p], w[0], even);
        odd = std::fma(x[2 * p + 1], w[1], odd);
      }
      a.y[static_cast<size_t>(t) * a.ldy + n] = even + odd;
    }
  }
}

}  // namespace detail

namespace quant_detail {

RangeKernel portable_interleaved_kernel(DType dtype) {
  switch (dtype) {
    case DType::kQ8_0:
      return portable_interleaved_range<DType::kQ8_0>;
    case DType::kQ4_0:
      return portable_interleaved_range<DType::kQ4_0>;
    case DType::kQ4_K:
      return portable_interleaved_q4k;
    default:
      return nullptr;
  }
}

}  // namespace quant_detail

}  // namespace gemmaserve::cpu
