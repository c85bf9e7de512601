#include "core/dtype.h"

#include <cmath>

#include "core/error.h"

namespace gemmaserve {

namespace {

struct DTypeInfo {
  const char* name;
  size_t bytes;   // per element, or per block for the block types
  int64_t elems;  // per block
};

// Block sizes as ggml's block_* structs define them.
DTypeInfo info(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return {"F32", 4, 1};
    case DType::kF16:
      return {"F16", 2, 1};
    case DType::kBF16:
      return {"BF16", 2, 1};
    case DType::kF64:
      return {"F64", 8, 1};
    case DType::kI64:
      return {"I64", 8, 1};
    case DType::kI32:
      return {"I32", 4, 1};
    case DType::kI16:
      return {"I16", 2, 1};
    case DType::kI8:
      return {"I8", 1, 1};
    case DType::kU8:
      return {"U8", 1, 1};
    case DType::kBool:
      return {"BOOL", 1, 1};
    case DType::kQ8_0:
      return {"Q8_0", 34, 32};
    case DType::kQ4_0:
      return {"Q4_0", 18, 32};
    case DType::kQ4_K:
      return {"Q4_K", 144, 256};
    case DType::kQ4_1:
      return {"Q4_1", 20, 32};
    case DType::kQ5_0:
      return {"Q5_0", 22, 32};
    case DType::kQ5_1:
      return {"Q5_1", 24, 32};
    case DType::kQ2_K:
      return {"Q2_K", 84, 256};
    case DType::kQ3_K:
      return {"Q3_K", 110, 256};
    case DType::kQ5_K:
      return {"Q5_K", 176, 256};
    case DType::kQ6_K:
      return {"Q6_K", 210, 256};
    case DType::kIQ2_XXS:
      return {"IQ2_XXS", 66, 256};
    case DType::kIQ2_XS:
      return {"IQ2_XS", 74, 256};
    case DType::kIQ3_XXS:
      return {"IQ3_XXS", 98, 256};
    case DType::kIQ1_S:
      return {"IQ1_S", 50, 256};
    case DType::kIQ4_NL:
      return {"IQ4_NL", 18, 32};
    case DType::kIQ3_S:
      return {"IQ3_S", 110, 256};
    case DType::kIQ2_S:
      return {"IQ2_S", 82, 256};
    case DType::kIQ4_XS:
      return {"IQ4_XS", 136, 256};
    case DType::kIQ1_M:
      return {"IQ1_M", 56, 256};
    case DType::kTQ1_0:
      return {"TQ1_0", 54, 256};
    case DType::kTQ2_0:
      return {"TQ2_0", 66, 256};
    case DType::kMXFP4:
      return {"MXFP4", 17, 32};
    case DType::kNVFP4:
      return {"NVFP4", 36, 64};
    case DType::kQ1_0:
      return {"Q1_0", 18, 128};
    case DType::kQ2_0:
      return {"Q2_0", 18, 64};
  }
  return {"?", 0, 1};
}

}  // namespace

size_t dtype_size(DType dtype) { return info(dtype).bytes; }

int64_t dtype_block_elems(DType dtype) { return info(dtype).elems; }

const char* dtype_name(DType dtype) { return info(dtype).name; }

bool parse_dtype(const std::string& name, DType* out) {
  static const struct {
    const char* name;
    DType dtype;
  } kTable[] = {{"F32", DType::kF32},  {"F16", DType::kF16}, {"BF16", DType::kBF16},
                {"F64", DType::kF64},  {"I64", DType::kI64}, {"I32", DType::kI32},
                {"I16", DType::kI16},  {"I8", DType::kI8},   {"U8", DType::kU8},
                {"BOOL", DType::kBool}};
  for (const auto& e : kTable) {
    if (name == e.name) {
      *out = e.dtype;
      return true;
    }
  }
  return false;
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: renormalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400) == 0);
      bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (mant & 0x3ff) << 13;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | mant << 13;
  } else {
    bits = sign | (exp + 127 - 15) << 23 | mant << 13;
  }
  return std::bit_cast<float>(bits);
}

uint16_t f32_to_f16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  uint32_t absu = u & 0x7fffffffu;
  if (absu > 0x7f800000u) return sign | 0x7e00;   // NaN
  if (absu >= 0x477ff000u) return sign | 0x7c00;  // overflow to inf (rounded)
  if (absu < 0x38800000u) {                       // subnormal or zero in f16
    float a = std::bit_cast<float>(absu);
    // Scale so the f16 subnormal unit (2^-24) becomes 1, then round to nearest even.
    float scaled = a * 16777216.0f;
    return sign | static_cast<uint16_t>(std::nearbyint(scaled));
  }
  uint32_t exp = (absu >> 23) - 127 + 15;
  uint32_t mant = absu & 0x7fffff;
  uint32_t half = exp << 10 | mant >> 13;
  uint32_t rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (half & 1))) ++half;
  return sign | static_cast<uint16_t>(half);
}

void convert_to_f32(DType dtype, const void* src, float* dst, size_t n) {
  if (n == 0) return;  // empty tensors may have null data
  switch (dtype) {
    case DType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case DType::kBF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
      return;
    }
    case DType::kF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i]);
      return;
    }
    default:
      throw InputError(std::string("cannot convert dtype ") + dtype_name(dtype) + " to float");
  }
}

}  // namespace gemmaserve
