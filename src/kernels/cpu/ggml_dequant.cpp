// ggml's legacy, K-, ternary, FP4 and 1-/2-bit block formats to f32; the IQ types are in
// ggml_dequant_iq.cpp. Each comment gives the block's byte layout (little-endian, f16 = IEEE
// half); each expression keeps ggml's operand order and conversions, so results match ggml's
// dequantize_row_* bit for bit.
#include "kernels/cpu/ggml_dequant.h"

#include <cmath>
#include <string>

#include "core/error.h"
#include "kernels/cpu/ggml_codebooks.h"
#include "kernels/cpu/ggml_dequant_internal.h"
#include "kernels/cpu/quant.h"

namespace gemmaserve::cpu {
namespace {

using ggml_dequant_detail::load_f16;
using ggml_dequant_detail::load_u32;
using ggml_dequant_detail::run_blocks;

// Bit 4 of Q5 value j (low nibbles) and j + 16 (high nibbles) from the 32 high bits qh.
inline int q5_high_lo(uint32_t qh, int j) { return static_cast<int>(((qh >> j) << 4) & 0x10); }
inline int q5_high_hi(uint32_t qh, int j) { return static_cast<int>((qh >> (j + 12)) & 0x10); }

// Q4_1 (20 B, 32 values): f16 d, f16 m, qs[16]; x = q * d + m, value j in the low nibble of
// qs[j], value j + 16 in its high nibble.
void q4_1(const uint8_t* b, float* y) {
  const float d = load_f16(b), m = load_f16(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(qs[j] & 15) * d + m;
    y[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
  }
}

// Q5_0 (22 B, 32 values): f16 d, qh (u32: bit j = 5th bit of value j), qs[16] as Q4_1;
// x = (q - 16) * d.
void q5_0(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const uint32_t qh = load_u32(b + 2);
  const uint8_t* qs = b + 6;
  for (int j = 0; j < 16; ++j) {
    const int x0 = ((qs[j] & 15) | q5_high_lo(qh, j)) - 16;
    const int x1 = ((qs[j] >> 4) | q5_high_hi(qh, j)) - 16;
    y[j] = static_cast<float>(x0) * d;
    y[j + 16] = static_cast<float>(x1) * d;
  }
}

// Q5_1 (24 B, 32 values): f16 d, f16 m, qh (u32), qs[16]; x = q * d + m.
void q5_1(const uint8_t* b, float* y) {
  const float d = load_f16(b), m = load_f16(b + 2);
  const uint32_t qh = load_u32(b + 4);
  const uint8_t* qs = b + 8;
  for (int j = 0; j < 16; ++j) {
    const int x0 = (qs[j] & 15) | q5_high_lo(qh, j);
    const int x1 = (qs[j] >> 4) | q5_high_hi(qh, j);
    y[j] = static_cast<float>(x0) * d + m;
    y[j + 16] = static_cast<float>(x1) * d + m;
  }
}

// Q2_K (84 B, 256 values): scales[16] (low nibble scale, high nibble min of 16 values each),
// qs[64] (2-bit values), f16 d, f16 dmin. Each 128 values use 32 bytes of qs, four 2-bit
// planes of 32 (shift 0, 2, 4, 6), each plane two groups of 16: x = d * sc * q - dmin * m.
void q2_k(const uint8_t* b, float* y) {
  const uint8_t* scales = b;
  const uint8_t* q = b + 16;
  const float d = load_f16(b + 80), min = load_f16(b + 82);
  int is = 0;
  for (int n = 0; n < 256; n += 128, q += 32) {
    for (int shift = 0; shift < 8; shift += 2) {
      for (int half = 0; half < 32; half += 16) {
        const uint8_t sc = scales[is++];
        const float dl = d * static_cast<float>(sc & 15);
        const float ml = min * static_cast<float>(sc >> 4);
        for (int l = 0; l < 16; ++l) {
          *y++ = dl * static_cast<float>((q[half + l] >> shift) & 3) - ml;
        }
      }
    }
  }
}

// Q3_K (110 B, 256 values): hmask[32] (high bits), qs[64] (low 2 bits, planes as Q2_K),
// scales[12] (16 6-bit scales: low nibbles in bytes 0-7, top 2 bits in bytes 8-11), f16 d.
// x = d * (sc - 32) * (q - (high bit ? 0 : 4)); value plane p (0..7) reads hmask bit p.
void q3_k(const uint8_t* b, float* y) {
  const uint8_t* hm = b;
  const uint8_t* q = b + 32;
  const uint8_t* packed = b + 96;
  const float d_all = load_f16(b + 108);
  int scales[16];
  for (int s = 0; s < 16; ++s) {
    const int low = s < 8 ? packed[s] & 15 : packed[s - 8] >> 4;
    const int high = (packed[8 + s % 4] >> (2 * (s / 4))) & 3;
    scales[s] = (low | high << 4) - 32;
  }
  int is = 0, m = 1;
  for (int n = 0; n < 256; n += 128, q += 32) {
    for (int shift = 0; shift < 8; shift += 2, m <<= 1) {
      for (int half = 0; half < 32; half += 16) {
        const float dl = d_all * static_cast<float>(scales[is++]);
        for (int l = 0; l < 16; ++l) {
          const int v = ((q[half + l] >> shift) & 3) - ((hm[half + l] & m) ? 0 : 4);
          *y++ = dl * static_cast<float>(v);
        }
      }
    }
  }
}

// Q5_K (176 B, 256 values): f16 d, f16 dmin, scales[12] (as Q4_K), qh[32], qs[128]. Each 64
// values: 32 low nibbles then 32 high nibbles of 32 qs bytes, 5th bits from qh bits 2c, 2c + 1;
// x = d * sc * q - dmin * m.
void q5_k(const uint8_t* b, float* y) {
  const float d = load_f16(b), min = load_f16(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* ql = b + 48;
  for (int is = 0; is < 8; is += 2, ql += 32) {
    uint8_t sc, m;
    q4k_scale_min(scales, is, &sc, &m);
    const float d1 = d * static_cast<float>(sc), m1 = min * static_cast<float>(m);
    q4k_scale_min(scales, is + 1, &sc, &m);
    const float d2 = d * static_cast<float>(sc), m2 = min * static_cast<float>(m);
    const int u1 = 1 << is, u2 = 2 << is;
    for (int l = 0; l < 32; ++l) {
      *y++ = d1 * static_cast<float>((ql[l] & 15) + (qh[l] & u1 ? 16 : 0)) - m1;
    }
    for (int l = 0; l < 32; ++l) {
      *y++ = d2 * static_cast<float>((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
    }
  }
}

// Q6_K (210 B, 256 values): ql[128] (low 4 bits), qh[64] (top 2 bits), int8 scales[16] (one per
// 16 values), f16 d. Each 128 values: 64 ql bytes, 32 qh bytes; x = d * sc * (q - 32).
void q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const uint8_t* sc = b + 192;
  const float d = load_f16(b + 208);
  for (int n = 0; n < 256; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
    for (int is = 0; is < 2; ++is) {  // 16 values a scale: hoisted, the products are the same
      const float d1 = d * static_cast<float>(static_cast<int8_t>(sc[is]));
      const float d2 = d * static_cast<float>(static_cast<int8_t>(sc[is + 2]));
      const float d3 = d * static_cast<float>(static_cast<int8_t>(sc[is + 4]));
      const float d4 = d * static_cast<float>(static_cast<int8_t>(sc[is + 6]));
      for (int l = 16 * is; l < 16 * is + 16; ++l) {
        const int q1 = ((ql[l] & 15) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d1 * static_cast<float>(q1);
        y[l + 32] = d2 * static_cast<float>(q2);
        y[l + 64] = d3 * static_cast<float>(q3);
        y[l + 96] = d4 * static_cast<float>(q4);
      }
    }
  }
}

// A base-3 digit of a TQ1_0 byte: the byte holds 5 (or 4) trits as a fixed-point fraction of
// 3^5, so multiplying by 3^n (mod 256) brings digit n to the top; x = (trit - 1) * d.
inline float tq1_value(uint8_t byte, int n, float d) {
  constexpr uint8_t kPow3[5] = {1, 3, 9, 27, 81};
  const auto q = static_cast<uint8_t>(byte * kPow3[n]);
  const int trit = (q * 3) >> 8;
  return static_cast<float>(trit - 1) * d;
}

// TQ1_0 (54 B, 256 values): qs[48] (5 trits a byte), qh[4] (4 trits a byte), f16 d. Values:
// qs[0..31] digit by digit (160), qs[32..47] likewise (80), then qh (16).
void tq1_0(const uint8_t* b, float* y) {
  const uint8_t* qs = b;
  const uint8_t* qh = b + 48;
  const float d = load_f16(b + 52);
  for (int n = 0; n < 5; ++n) {
    for (int m = 0; m < 32; ++m) *y++ = tq1_value(qs[m], n, d);
  }
  for (int n = 0; n < 5; ++n) {
    for (int m = 0; m < 16; ++m) *y++ = tq1_value(qs[32 + m], n, d);
  }
  for (int n = 0; n < 4; ++n) {
    for (int j = 0; j < 4; ++j) *y++ = tq1_value(qh[j], n, d);
  }
}

// TQ2_0 (66 B, 256 values): qs[64] (2-bit planes of 32 bytes, as Q2_K), f16 d; x = (q - 1) * d.
void tq2_0(const uint8_t* b, float* y) {
  const float d = load_f16(b + 64);
  for (int j = 0; j < 64; j += 32) {
    for (int shift = 0; shift < 8; shift += 2) {
      for (int m = 0; m < 32; ++m) *y++ = static_cast<float>(((b[j + m] >> shift) & 3) - 1) * d;
    }
  }
}

// Half of the E8M0 scale 2^(x - 127), as ggml computes it (x = 0, 1 give subnormals).
inline float e8m0_half(uint8_t x) {
  const uint32_t bits = x < 2 ? 0x00200000u << x : static_cast<uint32_t>(x - 1) << 23;
  return std::bit_cast<float>(bits);
}

// ggml's UE4M3 scale (halved, as kFp4Values are doubled): bit 7 is ignored, 0x7F reads as 0.
inline float ue4m3_half(uint8_t x) {
  if (x == 0 || x == 0x7F) return 0.0f;
  const int exp = (x >> 3) & 15, man = x & 7;
  const float raw = exp == 0 ? std::ldexp(static_cast<float>(man), -9)
                             : std::ldexp(1.0f + static_cast<float>(man) / 8.0f, exp - 7);
  return raw * 0.5f;
}

// 16 FP4 values from 8 bytes (low nibbles first) times d.
inline void fp4_values(const uint8_t* qs, int half, float d, float* y) {
  using ggml_codebook::kFp4Values;
  for (int j = 0; j < half; ++j) {
    y[j] = static_cast<float>(kFp4Values[qs[j] & 15]) * d;
    y[j + half] = static_cast<float>(kFp4Values[qs[j] >> 4]) * d;
  }
}

// MXFP4 (17 B, 32 values): E8M0 exponent, qs[16] (E2M1 nibbles, as Q4_0).
void mxfp4(const uint8_t* b, float* y) { fp4_values(b + 1, 16, e8m0_half(b[0]), y); }

// NVFP4 (36 B, 64 values): 4 UE4M3 scales (one per 16 values), qs[32] (8 bytes per 16 values).
void nvfp4(const uint8_t* b, float* y) {
  for (int s = 0; s < 4; ++s) fp4_values(b + 4 + 8 * s, 8, ue4m3_half(b[s]), y + 16 * s);
}

// Q1_0 (18 B, 128 values): f16 d, qs[16] (bit j % 8 of byte j / 8); x = bit ? d : -d.
void q1_0(const uint8_t* b, float* y) {
  const float d = load_f16(b), neg_d = -d;
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 128; ++j) y[j] = (qs[j / 8] >> (j % 8)) & 1 ? d : neg_d;
}

// Q2_0 (18 B, 64 values): f16 d, qs[16] (bits 2(j % 4) of byte j / 4); x = (q - 1) * d.
void q2_0(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 64; ++j) {
    y[j] = static_cast<float>(((qs[j / 4] >> (2 * (j % 4))) & 3) - 1) * d;
  }
}

ggml_dequant_detail::BlockRunner block_runner(DType dtype) {
  switch (dtype) {
    case DType::kQ4_1:
      return run_blocks<q4_1>;
    case DType::kQ5_0:
      return run_blocks<q5_0>;
    case DType::kQ5_1:
      return run_blocks<q5_1>;
    case DType::kQ2_K:
      return run_blocks<q2_k>;
    case DType::kQ3_K:
      return run_blocks<q3_k>;
    case DType::kQ5_K:
      return run_blocks<q5_k>;
    case DType::kQ6_K:
      return run_blocks<q6_k>;
    case DType::kTQ1_0:
      return run_blocks<tq1_0>;
    case DType::kTQ2_0:
      return run_blocks<tq2_0>;
    case DType::kMXFP4:
      return run_blocks<mxfp4>;
    case DType::kNVFP4:
      return run_blocks<nvfp4>;
    case DType::kQ1_0:
      return run_blocks<q1_0>;
    case DType::kQ2_0:
      return run_blocks<q2_0>;
    default:
      return ggml_dequant_detail::iq_block_runner(dtype);
  }
}

}  // namespace

void dequantize_ggml_blocks(DType dtype, const std::byte* src, float* dst, int64_t n_blocks) {
  const ggml_dequant_detail::BlockRunner run = block_runner(dtype);
  if (run == nullptr) {
    throw InputError(std::string("dequantize_ggml_blocks: ") + dtype_name(dtype) +
                     " is not a storage-only block type");
  }
  run(dtype, src, dst, n_blocks);
}

}  // namespace gemmaserve::cpu
