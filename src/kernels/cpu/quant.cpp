#include "kernels/cpu/quant.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <string>

#include "core/error.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/ggml_dequant.h"

namespace gemmaserve::cpu {
namespace {

inline float round_f16(float x) { return f16_to_f32(f32_to_f16(x)); }

// Round-to-nearest-even like nearbyint (default rounding mode) for |v| < 2^22, without a libm
// call at the baseline ISA; callers clamp to a few bits, so larger values only need to stay large.
inline float round_even(float v) {
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23
  const float big = std::fabs(v) < 4194304.0f ? v : std::copysign(4194304.0f, v);
  return (big + kMagic) - kMagic;
}

inline void store_f16(std::byte* dst, float x) {
  const uint16_t h = f32_to_f16(x);
  std::memcpy(dst, &h, 2);
}

inline float load_f16(const std::byte* src) {
  uint16_t h;
  std::memcpy(&h, src, 2);
  return f16_to_f32(h);
}

// `accepted`: dtype_is_quantized to quantize, dtype_is_block to dequantize.
void check_blocks(DType dtype, int64_t n, bool accepted) {
  const int64_t block = dtype_block_elems(dtype);
  if (!accepted) throw InputError(std::string("not a quantized dtype: ") + dtype_name(dtype));
  if (n % block != 0) {
    throw InputError(std::string(dtype_name(dtype)) + " rows need a multiple of " +
                     std::to_string(block) + " elements, got " + std::to_string(n));
  }
}

void quantize_q8_0(const float* x, std::byte* out, int64_t n) {
  for (int64_t b = 0; b < n / kQ8BlockElems; ++b, x += kQ8BlockElems, out += kQ8_0BlockBytes) {
    float amax = 0.0f;
    for (int i = 0; i < kQ8BlockElems; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float d = round_f16(amax / 127.0f);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_f16(out, d);
    auto* q = reinterpret_cast<int8_t*>(out + 2);
    for (int i = 0; i < kQ8BlockElems; ++i) {
      q[i] = static_cast<int8_t>(std::clamp(round_even(x[i] * id), -127.0f, 127.0f));
    }
  }
}

// The value of largest magnitude maps to -8 exactly, so the full 16-level range is used.
void quantize_q4_0(const float* x, std::byte* out, int64_t n) {
  for (int64_t b = 0; b < n / kQ8BlockElems; ++b, x += kQ8BlockElems, out += kQ4_0BlockBytes) {
    float amax = 0.0f, vmax = 0.0f;
    for (int i = 0; i < kQ8BlockElems; ++i) {
      if (std::fabs(x[i]) > amax) {
        amax = std::fabs(x[i]);
        vmax = x[i];
      }
    }
    const float d = round_f16(vmax / -8.0f);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_f16(out, d);
    auto* qs = reinterpret_cast<uint8_t*>(out + 2);
    auto q4 = [&](float v) {
      return static_cast<uint8_t>(std::clamp(round_even(v * id) + 8.0f, 0.0f, 15.0f));
    };
    for (int i = 0; i < 16; ++i) qs[i] = static_cast<uint8_t>(q4(x[i]) | (q4(x[i + 16]) << 4));
  }
}

// Best (scale, min) for 32 values as x ~ scale * q - min, q in 0..15, min >= 0: tries a range
// of grid spacings around (max - min) / 15 and refits both by weighted least squares each time.
// AVX2 clone: 8-wide lanes (no FMA, so both clones round identically).
__attribute__((target_clones("avx2", "default"))) void fit_scale_min(const float* x, const float* w,
                                                                     float* scale, float* min_out) {
  float lo = 0.0f, hi = x[0];
  for (int i = 0; i < 32; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  if (hi <= lo) {
    *scale = 0.0f;
    *min_out = -lo;
    return;
  }
  // Sums run in 8 lanes (vertical adds the compiler vectorises) instead of one serial chain.
  auto lanes_sum = [](const float* v) {
    return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
  };
  auto error_of = [&](float a, float b) {
    float err[8] = {};
    const float inv = a > 0.0f ? 1.0f / a : 0.0f;
    for (int i0 = 0; i0 < 32; i0 += 8) {
      for (int j = 0; j < 8; ++j) {
        const float xi = x[i0 + j];
        const float q = std::min(std::max(round_even((xi - b) * inv), 0.0f), 15.0f);
        const float diff = a * q + b - xi;
        err[j] += w[i0 + j] * diff * diff;
      }
    }
    return lanes_sum(err);
  };
  float best_a = (hi - lo) / 15.0f, best_b = lo;
  float best_err = error_of(best_a, best_b);
  for (int step = -5; step <= 5; ++step) {
    const float iscale = (15.0f + 0.2f * static_cast<float>(step)) / (hi - lo);
    float vw[8] = {}, vl[8] = {}, vll[8] = {}, vx[8] = {}, vlx[8] = {};
    for (int i0 = 0; i0 < 32; i0 += 8) {
      for (int j = 0; j < 8; ++j) {
        const float xi = x[i0 + j], wi = w[i0 + j];
        const float l = std::min(std::max(round_even(iscale * (xi - lo)), 0.0f), 15.0f);
        vw[j] += wi;
        vl[j] += wi * l;
        vll[j] += wi * l * l;
        vx[j] += wi * xi;
        vlx[j] += wi * l * xi;
      }
    }
    const float sw = lanes_sum(vw), sl = lanes_sum(vl), sll = lanes_sum(vll);
    const float sx = lanes_sum(vx), slx = lanes_sum(vlx);
    const float det = sw * sll - sl * sl;
    if (det <= 0.0f) continue;
    float a = (sw * slx - sl * sx) / det;
    float b = (sll * sx - sl * slx) / det;
    if (b > 0.0f) {  // the min term can only subtract
      b = 0.0f;
      a = slx / sll;
    }
    if (a <= 0.0f) continue;
    const float err = error_of(a, b);
    if (err < best_err) {
      best_err = err;
      best_a = a;
      best_b = b;
    }
  }
  *scale = best_a;
  *min_out = -best_b;
}

void quantize_q4_k(const float* x, std::byte* out, int64_t n) {
  for (int64_t b = 0; b < n / kQ4KBlockElems; ++b, x += kQ4KBlockElems, out += kQ4KBlockBytes) {
    float scales[8], mins[8], w[32];
    for (int s = 0; s < 8; ++s) {
      const float* xs = x + 32 * s;
      float sum2 = 0.0f;
      for (int i = 0; i < 32; ++i) sum2 += xs[i] * xs[i];
      const float rms = std::sqrt(sum2 / 32.0f);
      // Large values matter more to a dot product; the rms floor keeps small ones in play.
      for (int i = 0; i < 32; ++i) w[i] = rms + std::fabs(xs[i]);
      fit_scale_min(xs, w, &scales[s], &mins[s]);
    }
    const float max_scale = *std::max_element(scales, scales + 8);
    const float max_min = *std::max_element(mins, mins + 8);
    const float d = round_f16(max_scale / 63.0f);
    const float dmin = round_f16(max_min / 63.0f);
    uint8_t ls[8], lm[8];
    for (int s = 0; s < 8; ++s) {
      ls[s] =
          d > 0.0f ? static_cast<uint8_t>(std::clamp(round_even(scales[s] / d), 0.0f, 63.0f)) : 0;
      lm[s] = dmin > 0.0f
                  ? static_cast<uint8_t>(std::clamp(round_even(mins[s] / dmin), 0.0f, 63.0f))
                  : 0;
    }
    store_f16(out, d);
    store_f16(out + 2, dmin);
    auto* packed = reinterpret_cast<uint8_t*>(out + 4);
    for (int s = 0; s < 4; ++s) {
      packed[s] = static_cast<uint8_t>(ls[s] | ((ls[s + 4] >> 4) << 6));
      packed[s + 4] = static_cast<uint8_t>(lm[s] | ((lm[s + 4] >> 4) << 6));
      packed[s + 8] = static_cast<uint8_t>((ls[s + 4] & 0xF) | ((lm[s + 4] & 0xF) << 4));
    }
    uint8_t q[256];
    for (int s = 0; s < 8; ++s) {
      uint8_t sc, m;
      q4k_scale_min(packed, s, &sc, &m);
      const float a = d * sc, mn = dmin * m;
      for (int i = 0; i < 32; ++i) {
        const float v = x[32 * s + i];
        q[32 * s + i] =
            a > 0.0f ? static_cast<uint8_t>(std::clamp(round_even((v + mn) / a), 0.0f, 15.0f)) : 0;
      }
    }
    auto* qs = reinterpret_cast<uint8_t*>(out + 16);
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        qs[32 * c + l] = static_cast<uint8_t>(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
      }
    }
  }
}

}  // namespace

void quantize_row(DType dtype, const float* src, void* dst, int64_t n) {
  check_blocks(dtype, n, dtype_is_quantized(dtype));
  auto* out = static_cast<std::byte*>(dst);
  switch (dtype) {
    case DType::kQ8_0:
      return quantize_q8_0(src, out, n);
    case DType::kQ4_0:
      return quantize_q4_0(src, out, n);
    case DType::kQ4_K:
      return quantize_q4_k(src, out, n);
    default:
      break;
  }
}

void quantize_row_from(DType dtype, DType src_dtype, const void* src, void* dst, int64_t n,
                       float* scratch) {
  if (src_dtype == DType::kF32) return quantize_row(dtype, static_cast<const float*>(src), dst, n);
  to_f32(src_dtype, src, scratch, static_cast<size_t>(n));
  quantize_row(dtype, scratch, dst, n);
}

void dequantize_row(DType dtype, const void* src, float* dst, int64_t n) {
  check_blocks(dtype, n, dtype_is_block(dtype));
  const auto* in = static_cast<const std::byte*>(src);
  switch (dtype) {
    case DType::kQ8_0:
      for (int64_t b = 0; b < n / kQ8BlockElems; ++b, in += kQ8_0BlockBytes, dst += 32) {
        const float d = load_f16(in);
        const auto* q = reinterpret_cast<const int8_t*>(in + 2);
        for (int i = 0; i < 32; ++i) dst[i] = d * static_cast<float>(q[i]);
      }
      return;
    case DType::kQ4_0:
      for (int64_t b = 0; b < n / kQ8BlockElems; ++b, in += kQ4_0BlockBytes, dst += 32) {
        const float d = load_f16(in);
        const auto* qs = reinterpret_cast<const uint8_t*>(in + 2);
        for (int i = 0; i < 16; ++i) {
          dst[i] = d * static_cast<float>((qs[i] & 15) - 8);
          dst[i + 16] = d * static_cast<float>((qs[i] >> 4) - 8);
        }
      }
      return;
    case DType::kQ4_K:
      for (int64_t b = 0; b < n / kQ4KBlockElems; ++b, in += kQ4KBlockBytes, dst += 256) {
        const float d = load_f16(in), dmin = load_f16(in + 2);
        const auto* packed = reinterpret_cast<const uint8_t*>(in + 4);
        const auto* qs = reinterpret_cast<const uint8_t*>(in + 16);
        for (int s = 0; s < 8; ++s) {
          uint8_t sc, m;
          q4k_scale_min(packed, s, &sc, &m);
          const float a = d * sc, mn = dmin * m;
          const uint8_t* q = qs + 32 * (s / 2);
          const int shift = (s % 2) * 4;
          for (int i = 0; i < 32; ++i) {
            dst[32 * s + i] = a * static_cast<float>((q[i] >> shift) & 15) - mn;
          }
        }
      }
      return;
    default:
      return dequantize_ggml_blocks(dtype, in, dst, n / dtype_block_elems(dtype));
  }
}

DType parse_quantization_type(const std::string& text, const std::string& flag) {
  std::string t;
  for (char c : text) t.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  if (t == "q8_0") return DType::kQ8_0;
  if (t == "q4_0") return DType::kQ4_0;
  if (t == "q4_k") return DType::kQ4_K;
  std::string msg = flag;
  msg.append(": unknown quantization type '")
      .append(text)
      .append("' (expected q8_0, q4_0 or q4_k)");
  throw InputError(msg);
}

const char* quantization_type_name(DType dtype) {
  switch (dtype) {
    case DType::kQ8_0:
      return "q8_0";
    case DType::kQ4_0:
      return "q4_0";
    case DType::kQ4_K:
      return "q4_k";
    default:
      return "none";
  }
}

}  // namespace gemmaserve::cpu
