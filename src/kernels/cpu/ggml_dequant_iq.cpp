// ggml's IQ block formats to f32 (codebooks in ggml_codebooks.h). As in ggml_dequant.cpp, each
// comment gives the byte layout and each expression keeps ggml's operand order, so results
// match ggml's dequantize_row_iq* bit for bit. Every index into a codebook is masked to its size.
#include <array>
#include <cstring>

#include "kernels/cpu/ggml_codebooks.h"
#include "kernels/cpu/ggml_dequant_internal.h"

namespace gemmaserve::cpu::ggml_dequant_detail {
namespace {

using ggml_codebook::kIq4nlValues;
using ggml_codebook::kSigns;

// ggml's sign factors: bit j of a sign byte set means value j is multiplied by -1. A table
// (8 KB) instead of a select per value lets the compiler vectorise the 8 products.
constexpr auto kSignFactors = [] {
  std::array<std::array<float, 8>, 256> t{};
  for (int s = 0; s < 256; ++s) {
    for (int j = 0; j < 8; ++j) t[s][j] = (s >> j) & 1 ? -1.0f : 1.0f;
  }
  return t;
}();

// 8 values db * grid byte j * sign j.
inline void signed_grid8(uint64_t grid, uint8_t signs, float db, float* y) {
  uint8_t g[8];
  std::memcpy(g, &grid, sizeof(g));
  const std::array<float, 8>& sign = kSignFactors[signs];
  for (int j = 0; j < 8; ++j) y[j] = db * static_cast<float>(g[j]) * sign[j];
}

// IQ2_XXS (66 B, 256 values): f16 d, then per 32 values 8 bytes: 4 grid indices (bytes 0-3),
// and a u32 (bytes 4-7) with four 7-bit sign indices (bits 7l) and a 4-bit scale (bits 28-31).
// x = d * (0.5 + scale) * 0.25 * grid * sign.
void iq2_xxs(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  for (int ib32 = 0; ib32 < 8; ++ib32, y += 32) {
    const uint8_t* q = b + 2 + 8 * ib32;
    const uint32_t aux = load_u32(q + 4);
    const float db = d * (0.5f + static_cast<float>(aux >> 28)) * 0.25f;
    for (int l = 0; l < 4; ++l) {
      signed_grid8(ggml_codebook::kIq2xxsGrid[q[l]], kSigns[(aux >> (7 * l)) & 127], db, y + 8 * l);
    }
  }
}

// The two 16-value scales of an IQ2_XS / IQ2_S scale byte: d * (0.5 + nibble) * 0.25.
inline std::array<float, 2> iq2_scales(float d, uint8_t s) {
  return {d * (0.5f + static_cast<float>(s & 15)) * 0.25f,
          d * (0.5f + static_cast<float>(s >> 4)) * 0.25f};
}

// IQ2_XS (74 B, 256 values): f16 d, qs[32] (u16: 9-bit grid index, 7-bit sign index), scales[8]
// (two 4-bit scales per 32 values, one per 16); x = d * (0.5 + scale) * 0.25 * grid * sign.
void iq2_xs(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const uint8_t* scales = b + 66;
  for (int ib32 = 0; ib32 < 8; ++ib32, y += 32) {
    const std::array<float, 2> db = iq2_scales(d, scales[ib32]);
    for (int l = 0; l < 4; ++l) {
      const uint16_t q = load_u16(b + 2 + 2 * (4 * ib32 + l));
      signed_grid8(ggml_codebook::kIq2xsGrid[q & 511], kSigns[q >> 9], db[l / 2], y + 8 * l);
    }
  }
}

// IQ2_S (82 B, 256 values): f16 d, qs[32] (low 8 bits of 10-bit grid indices), signs[32] (one
// byte per 8 values), qh[8] (top 2 bits, 4 indices per byte), scales[8] (as IQ2_XS).
void iq2_s(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const uint8_t* qs = b + 2;
  const uint8_t* signs = b + 34;
  const uint8_t* qh = b + 66;
  const uint8_t* scales = b + 74;
  for (int ib32 = 0; ib32 < 8; ++ib32, y += 32, qs += 4, signs += 4) {
    const std::array<float, 2> db = iq2_scales(d, scales[ib32]);
    for (int l = 0; l < 4; ++l) {
      const int index = qs[l] | ((qh[ib32] << (8 - 2 * l)) & 0x300);
      signed_grid8(ggml_codebook::kIq2sGrid[index], signs[l], db[l / 2], y + 8 * l);
    }
  }
}

// 4 + 4 values: db * grid bytes * signs, the second grid entry taking sign bits 4-7.
inline void signed_grid4x2(uint32_t grid1, uint32_t grid2, uint8_t signs, float db, float* y) {
  uint8_t g[8];
  std::memcpy(g, &grid1, 4);
  std::memcpy(g + 4, &grid2, 4);
  const std::array<float, 8>& sign = kSignFactors[signs];
  for (int j = 0; j < 8; ++j) y[j] = db * static_cast<float>(g[j]) * sign[j];
}

// IQ3_XXS (98 B, 256 values): f16 d, qs[64] (8-bit grid indices, 4 values each), then per 32
// values a u32 as IQ2_XXS's (four 7-bit sign indices, 4-bit scale);
// x = d * (0.5 + scale) * 0.5 * grid * sign.
void iq3_xxs(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const uint8_t* qs = b + 2;
  for (int ib32 = 0; ib32 < 8; ++ib32, y += 32, qs += 8) {
    const uint32_t aux = load_u32(b + 66 + 4 * ib32);
    const float db = d * (0.5f + static_cast<float>(aux >> 28)) * 0.5f;
    for (int l = 0; l < 4; ++l) {
      signed_grid4x2(ggml_codebook::kIq3xxsGrid[qs[2 * l]],
                     ggml_codebook::kIq3xxsGrid[qs[2 * l + 1]], kSigns[(aux >> (7 * l)) & 127], db,
                     y + 8 * l);
    }
  }
}

// IQ3_S (110 B, 256 values): f16 d, qs[64] (low 8 bits of 9-bit grid indices), qh[8] (9th
// bits, one byte per 32 values), signs[32] (one byte per 8 values), scales[4] (4-bit, one per
// 32 values); x = d * (1 + 2 * scale) * grid * sign.
void iq3_s(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const uint8_t* qs = b + 2;
  const uint8_t* qh = b + 66;
  const uint8_t* signs = b + 74;
  const uint8_t* scales = b + 106;
  for (int ib32 = 0; ib32 < 8; ++ib32, y += 32, qs += 8, signs += 4) {
    const int scale = ib32 % 2 == 0 ? scales[ib32 / 2] & 15 : scales[ib32 / 2] >> 4;
    const float db = d * static_cast<float>(1 + 2 * scale);
    for (int l = 0; l < 4; ++l) {
      const int index1 = qs[2 * l] | ((qh[ib32] << (8 - 2 * l)) & 256);
      const int index2 = qs[2 * l + 1] | ((qh[ib32] << (7 - 2 * l)) & 256);
      signed_grid4x2(ggml_codebook::kIq3sGrid[index1], ggml_codebook::kIq3sGrid[index2], signs[l],
                     db, y + 8 * l);
    }
  }
}

// 8 values dl * (grid byte j as int8 + delta).
inline void iq1_grid8(int index, float dl, float delta, float* y) {
  int8_t g[8];
  std::memcpy(g, &ggml_codebook::kIq1sGrid[index], sizeof(g));
  for (int j = 0; j < 8; ++j) y[j] = dl * (static_cast<float>(g[j]) + delta);
}

// IQ1_S (50 B, 256 values): f16 d, qs[32] (low 8 bits of 11-bit grid indices), qh[8] (u16 per
// 32 values: 3 index bits per 8 values, 3-bit scale at bits 12-14, delta sign at bit 15);
// x = d * (2 * scale + 1) * (grid +- 0.125).
void iq1_s(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const uint8_t* qs = b + 2;
  for (int ib = 0; ib < 8; ++ib, y += 32, qs += 4) {
    const uint16_t qh = load_u16(b + 34 + 2 * ib);
    const float dl = d * static_cast<float>(2 * ((qh >> 12) & 7) + 1);
    const float delta = qh & 0x8000 ? -ggml_codebook::kIq1Delta : ggml_codebook::kIq1Delta;
    for (int l = 0; l < 4; ++l)
      iq1_grid8(qs[l] | (((qh >> (3 * l)) & 7) << 8), dl, delta, y + 8 * l);
  }
}

// IQ1_M (56 B, 256 values): qs[32] (low 8 bits of grid indices), qh[16] (per 8 values 3 index
// bits and a delta sign bit, two nibbles a byte), scales (4 u16: 3-bit scales, one per 16
// values, in bits 0-11; the f16 block scale in their top nibbles);
// x = d * (2 * scale + 1) * (grid +- 0.125).
void iq1_m(const uint8_t* b, float* y) {
  const uint8_t* qs = b;
  const uint8_t* qh = b + 32;
  uint16_t sc[4];
  for (int i = 0; i < 4; ++i) sc[i] = load_u16(b + 48 + 2 * i);
  const auto scale = static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) |
                                           ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
  const float d = f16_to_f32(scale);
  for (int ib = 0; ib < 8; ++ib, y += 32, qs += 4, qh += 2) {
    const int shift = 6 * (ib % 2);
    const float dl1 = d * static_cast<float>(2 * ((sc[ib / 2] >> shift) & 7) + 1);
    const float dl2 = d * static_cast<float>(2 * ((sc[ib / 2] >> (shift + 3)) & 7) + 1);
    for (int l = 0; l < 4; ++l) {
      const uint8_t h = qh[l / 2] >> (4 * (l % 2));  // this group's nibble
      const float delta = h & 0x08 ? -ggml_codebook::kIq1Delta : ggml_codebook::kIq1Delta;
      iq1_grid8(qs[l] | ((h & 7) << 8), l < 2 ? dl1 : dl2, delta, y + 8 * l);
    }
  }
}

// IQ4_NL (18 B, 32 values): f16 d, qs[16] (nibbles as Q4_0); x = d * kIq4nlValues[q].
void iq4_nl(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(kIq4nlValues[qs[j] & 15]);
    y[j + 16] = d * static_cast<float>(kIq4nlValues[qs[j] >> 4]);
  }
}

// IQ4_XS (136 B, 256 values): f16 d, scales_h (u16: top 2 bits of 8 6-bit scales), scales_l[4]
// (low nibbles), qs[128] (16 bytes per 32 values, as IQ4_NL); x = d * (scale - 32) * value.
void iq4_xs(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const uint16_t scales_h = load_u16(b + 2);
  const uint8_t* scales_l = b + 4;
  const uint8_t* qs = b + 8;
  for (int ib = 0; ib < 8; ++ib, y += 32, qs += 16) {
    const int ls =
        ((scales_l[ib / 2] >> (4 * (ib % 2))) & 15) | (((scales_h >> (2 * ib)) & 3) << 4);
    const float dl = d * static_cast<float>(ls - 32);
    for (int j = 0; j < 16; ++j) {
      y[j] = dl * static_cast<float>(kIq4nlValues[qs[j] & 15]);
      y[j + 16] = dl * static_cast<float>(kIq4nlValues[qs[j] >> 4]);
    }
  }
}

}  // namespace

BlockRunner iq_block_runner(DType dtype) {
  switch (dtype) {
    case DType::kIQ2_XXS:
      return run_blocks<iq2_xxs>;
    case DType::kIQ2_XS:
      return run_blocks<iq2_xs>;
    case DType::kIQ2_S:
      return run_blocks<iq2_s>;
    case DType::kIQ3_XXS:
      return run_blocks<iq3_xxs>;
    case DType::kIQ3_S:
      return run_blocks<iq3_s>;
    case DType::kIQ1_S:
      return run_blocks<iq1_s>;
    case DType::kIQ1_M:
      return run_blocks<iq1_m>;
    case DType::kIQ4_NL:
      return run_blocks<iq4_nl>;
    case DType::kIQ4_XS:
      return run_blocks<iq4_xs>;
    default:
      return nullptr;
  }
}

}  // namespace gemmaserve::cpu::ggml_dequant_detail
