// Element-wise and row-wise f32 kernels of the Gemma 4 forward pass (no model knowledge).
// rms_norm, apply_rope, gelu_tanh_mul, soft_cap and softmax run at the widest supported SIMD
// level (simd_isa.h); every level gives a row the same result whatever the batch.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "kernels/cpu/simd_isa.h"

namespace gemmaserve::cpu {

// y = x * (mean(x²) + eps)^-0.5 * w over one row of n values; w == nullptr means no weight.
// The weight is used as-is (plain w, not 1 + w). y may alias x.
void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps);

// rms_norm over `rows` rows of n values with row strides ldx / ldy.
void rms_norm_rows(const float* x, size_t ldx, const float* w, float* y, size_t ldy, int64_t rows,
                   int64_t n, float eps);

// Inverse frequencies of NeoX rotate-half RoPE for a head of `head_dim`: head_dim/2 slots,
// slot i < rotated_pairs gets 1 / theta^(2i / head_dim) / factor (f32 like HF), the rest 0
// (identity). Default RoPE: rotated_pairs = head_dim/2; proportional: int(partial·head_dim/2).
void rope_inv_freq(int head_dim, double theta, int rotated_pairs, double factor, float* out);

// cos/sin of pos · inv_freq[i] (angle in f32) for i < pairs.
void rope_cos_sin(int64_t pos, const float* inv_freq, int pairs, float* cos_out, float* sin_out);

// Rotates one head in place: pairs (i, i + head_dim/2) for i < rotated_pairs; the other slots
// have frequency 0 and stay unchanged.
void apply_rope(float* x, int head_dim, const float* cos_v, const float* sin_v, int rotated_pairs);

// GELU, tanh approximation (PyTorch's gelu(approximate="tanh") formula and operation order).
inline float gelu_tanh(float x) {
  constexpr float kBeta = 0.7978845608028654f;  // sqrt(2 / pi)
  constexpr float kKappa = 0.044715f;
  const float inner = kBeta * (x + kKappa * (x * x * x));
  return 0.5f * x * (1.0f + std::tanh(inner));
}

// out[i] = gelu_tanh(gate[i]) * up[i]; out may alias gate or up.
void gelu_tanh_mul(const float* gate, const float* up, float* out, int64_t n);

// out[i] = gelu_tanh(x[i]) * m[i] for the per-layer-input gate.
inline void gelu_tanh_mul_inplace(float* x, const float* m, int64_t n) {
  gelu_tanh_mul(x, m, x, n);
}

// x = cap * tanh(x / cap).
void soft_cap(float* x, int64_t n, float cap);

// In-place softmax over n values (max-subtracted, multiplied by the reciprocal sum).
void softmax(float* x, int64_t n);

// out[i] = exp((x[i] - shift) * scale), 0 for x[i] = -inf; the SIMD levels flush results
// below FLT_MIN to 0. The sampler's relative token weights.
void exp_scaled(const float* x, float* out, int64_t n, float shift, float scale);

// One SIMD level's versions of the dispatched ops (same contracts as above). They differ from
// the portable ones by the vector exp/tanh (~2 ulp), FMA contraction and summation order.
struct ElementwiseKernels {
  void (*rms_norm)(const float* x, const float* w, float* y, int64_t n, float eps);
  void (*apply_rope)(float* x, int head_dim, const float* cos_v, const float* sin_v,
                     int rotated_pairs);
  void (*gelu_tanh_mul)(const float* gate, const float* up, float* out, int64_t n);
  void (*soft_cap)(float* x, int64_t n, float cap);
  void (*softmax)(float* x, int64_t n);
  void (*exp_scaled)(const float* x, float* out, int64_t n, float shift, float scale);
};
// `isa` must be supported (simd_isa_supported).
const ElementwiseKernels& elementwise_kernels(SimdIsa isa);

}  // namespace gemmaserve::cpu
