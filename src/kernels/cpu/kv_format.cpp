#include "kernels/cpu/kv_format.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "core/error.h"

namespace gemmaserve::cpu {
namespace {

int q8_blocks(int head_dim) { return (head_dim + kKvQ8BlockElems - 1) / kKvQ8BlockElems; }

}  // namespace

size_t kv_row_bytes(KvDtype dtype, int head_dim) {
  const size_t n = static_cast<size_t>(head_dim);
  switch (dtype) {
    case KvDtype::kF32:
      return 4 * n;
    case KvDtype::kBF16:
    case KvDtype::kF16:
      return 2 * n;
    case KvDtype::kFp8E4M3:
      return n + sizeof(float);
    case KvDtype::kQ8_0:
      return n + 2 * static_cast<size_t>(q8_blocks(head_dim));
  }
  return 0;
}

const char* kv_dtype_name(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::kF32:
      return "f32";
    case KvDtype::kBF16:
      return "bf16";
    case KvDtype::kF16:
      return "f16";
    case KvDtype::kFp8E4M3:
      return "fp8_e4m3";
    case KvDtype::kQ8_0:
      return "q8_0";
  }
  return "?";
}

KvDtype parse_kv_dtype(const std::string& flag, DType checkpoint_dtype) {
  if (flag == "auto") {
    if (checkpoint_dtype == DType::kF32) return KvDtype::kF32;
    if (checkpoint_dtype == DType::kF16) return KvDtype::kF16;
    return KvDtype::kBF16;
  }
  if (flag == "f32" || flag == "float32" || flag == "float") return KvDtype::kF32;
  if (flag == "bf16" || flag == "bfloat16") return KvDtype::kBF16;
  if (flag == "f16" || flag == "float16" || flag == "half") return KvDtype::kF16;
  if (flag == "fp8" || flag == "fp8_e4m3") return KvDtype::kFp8E4M3;
  if (flag == "q8_0") return KvDtype::kQ8_0;
  std::string msg = "--kv-cache-dtype: '";
  msg.append(flag).append(
      "' is not supported (choose auto, bf16, f16, f32, fp8 (= fp8_e4m3) or q8_0)");
  throw InputError(msg);
}

uint8_t f32_to_e4m3(float x) {
  if (std::isnan(x)) return 0x7F;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const float a = std::fabs(x);
  if (a >= kFp8E4M3Max) return sign | 0x7E;
  if (a < 0.015625f) {
    // Subnormal range (below 2^-6): multiples of 2^-9; a result of 8 is the smallest normal.
    return sign | static_cast<uint8_t>(std::nearbyint(a * 512.0f));
  }
  // Keep 3 mantissa bits with round-to-nearest-even, then rebias the exponent 127 -> 7.
  uint32_t u = std::bit_cast<uint32_t>(a);
  u += 0x7FFFFu + ((u >> 20) & 1u);
  const uint32_t code = (u >> 20) - ((127u - 7u) << 3);
  return sign | static_cast<uint8_t>(std::min<uint32_t>(code, 0x7E));
}

float e4m3_to_f32(uint8_t code) {
  // The 7 magnitude bits placed at f32's top mantissa bits give value * 2^-120 exactly,
  // subnormals included.
  const uint32_t bits =
      (static_cast<uint32_t>(code & 0x7F) << 20) | (static_cast<uint32_t>(code & 0x80) << 24);
  return std::bit_cast<float>(bits) * 0x1p120f;
}

void encode_kv_row(KvDtype dtype, const float* x, int head_dim, void* dst) {
  auto* out = static_cast<uint8_t*>(dst);
  switch (dtype) {
    case KvDtype::kF32:
      std::memcpy(out, x, static_cast<size_t>(head_dim) * sizeof(float));
      return;
    case KvDtype::kBF16:
      for (int i = 0; i < head_dim; ++i) {
        const uint16_t h = f32_to_bf16(x[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
      return;
    case KvDtype::kF16:
      for (int i = 0; i < head_dim; ++i) {
        const uint16_t h = f32_to_f16(x[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
      return;
    case KvDtype::kFp8E4M3: {
      float amax = 0.0f;
      for (int i = 0; i < head_dim; ++i) amax = std::max(amax, std::fabs(x[i]));
      const float scale = amax > 0.0f && std::isfinite(amax) ? amax / kFp8E4M3Max : 1.0f;
      for (int i = 0; i < head_dim; ++i) out[i] = f32_to_e4m3(x[i] / scale);
      std::memcpy(out + head_dim, &scale, sizeof(float));
      return;
    }
    case KvDtype::kQ8_0: {
      const int blocks = q8_blocks(head_dim);
      auto* values = reinterpret_cast<int8_t*>(out + 2 * blocks);
      for (int b = 0; b < blocks; ++b) {
        const int begin = b * kKvQ8BlockElems;
        const int end = std::min(head_dim, begin + kKvQ8BlockElems);
        float amax = 0.0f;
        for (int i = begin; i < end; ++i) amax = std::max(amax, std::fabs(x[i]));
        const float d = amax / 127.0f;
        const float inv = d > 0.0f ? 1.0f / d : 0.0f;
        for (int i = begin; i < end; ++i) {
          values[i] = static_cast<int8_t>(std::clamp(std::round(x[i] * inv), -127.0f, 127.0f));
        }
        const uint16_t h = f32_to_f16(d);
        std::memcpy(out + 2 * b, &h, 2);
      }
      return;
    }
  }
}

void decode_kv_row(KvDtype dtype, const void* src, int head_dim, float* out) {
  const auto* in = static_cast<const uint8_t*>(src);
  switch (dtype) {
    case KvDtype::kF32:
      std::memcpy(out, in, static_cast<size_t>(head_dim) * sizeof(float));
      return;
    case KvDtype::kBF16:
    case KvDtype::kF16:
      for (int i = 0; i < head_dim; ++i) {
        uint16_t h;
        std::memcpy(&h, in + 2 * i, 2);
        out[i] = dtype == KvDtype::kBF16 ? bf16_to_f32(h) : f16_to_f32(h);
      }
      return;
    case KvDtype::kFp8E4M3: {
      float scale;
      std::memcpy(&scale, in + head_dim, sizeof(float));
      for (int i = 0; i < head_dim; ++i) out[i] = e4m3_to_f32(in[i]) * scale;
      return;
    }
    case KvDtype::kQ8_0: {
      const int blocks = q8_blocks(head_dim);
      const auto* values = reinterpret_cast<const int8_t*>(in + 2 * blocks);
      for (int i = 0; i < head_dim; ++i) {
        uint16_t h;
        std::memcpy(&h, in + 2 * (i / kKvQ8BlockElems), 2);
        out[i] = static_cast<float>(values[i]) * f16_to_f32(h);
      }
      return;
    }
  }
}

}  // namespace gemmaserve::cpu
