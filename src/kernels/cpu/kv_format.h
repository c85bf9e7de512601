// Element formats of the paged K/V cache and the conversion of one head row (head_dim values of
// one KV head at one token slot) to and from f32.
//
// Row layouts (bytes):
//   f32, bf16, f16: head_dim elements.
//   fp8 (e4m3, OCP "fn" variant: max 448, no infinities): head_dim e4m3 codes, then one f32
//     scale; value = e4m3(code) * scale, scale = max|x| / 448 of the row (1 for an all-zero row).
//     A per-row scale needs no calibration and keeps every row's largest value exact-ish.
//   q8_0: ceil(head_dim / 32) f16 scales, then head_dim int8 values; element i of block
//     b = i / 32 is int8 * scale[b] (llama.cpp's Q8_0 rounding; the last block may be short).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace gemmaserve::cpu {

enum class KvDtype { kF32, kBF16, kF16, kFp8E4M3, kQ8_0 };

constexpr int kKvQ8BlockElems = 32;
constexpr float kFp8E4M3Max = 448.0f;

// Bytes of one head row of `head_dim` elements.
size_t kv_row_bytes(KvDtype dtype, int head_dim);
// "f32", "bf16", "f16", "fp8_e4m3", "q8_0".
const char* kv_dtype_name(KvDtype dtype);

// --kv-cache-dtype: "auto" resolves to the checkpoint's weight dtype (f32 -> f32, f16 -> f16,
// anything else -> bf16); also accepts vLLM's spellings (bfloat16, float16, half, float32,
// float, fp8, fp8_e4m3) and q8_0. InputError for anything else (fp8_e5m2 included).
KvDtype parse_kv_dtype(const std::string& flag, DType checkpoint_dtype);

// Converts `head_dim` floats to one row in `dst` (kv_row_bytes(dtype, head_dim) bytes).
void encode_kv_row(KvDtype dtype, const float* x, int head_dim, void* dst);
// Converts one row back to floats (what every attention path reads, up to rounding order).
void decode_kv_row(KvDtype dtype, const void* src, int head_dim, float* out);

// e4m3 code <-> float (round to nearest even, saturating at +-448; NaN encodes as 0x7F).
uint8_t f32_to_e4m3(float x);
float e4m3_to_f32(uint8_t code);

}  // namespace gemmaserve::cpu
