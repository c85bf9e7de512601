#include "kernels/cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/simd_kernels.h"

namespace gemmaserve::cpu {
namespace {

void rms_norm_portable(const float* x, const float* w, float* y, int64_t n, float eps) {
  // Double accumulation keeps the mean of squares exact to f32 whatever n is.
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  const float mean_sq = static_cast<float>(sum / static_cast<double>(n)) + eps;
  const float inv = std::pow(mean_sq, -0.5f);
  if (w != nullptr) {
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] * inv) * w[i];
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * inv;
  }
}

void apply_rope_portable(float* x, int head_dim, const float* cos_v, const float* sin_v,
                         int rotated_pairs) {
  const int half = head_dim / 2;
  float* lo = x;
  float* hi = x + half;
  for (int i = 0; i < rotated_pairs; ++i) {
    const float a = lo[i], b = hi[i];
    lo[i] = a * cos_v[i] - b * sin_v[i];
    hi[i] = b * cos_v[i] + a * sin_v[i];
  }
}

void gelu_tanh_mul_portable(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = gelu_tanh(gate[i]) * up[i];
}

void soft_cap_portable(float* x, int64_t n, float cap) {
  for (int64_t i = 0; i < n; ++i) x[i] = std::tanh(x[i] / cap) * cap;
}

void softmax_portable(float* x, int64_t n) {
  if (n <= 0) return;
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i]);
  float lanes[8] = {};
  int64_t i = 0;
  for (; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    lanes[i % 8] += x[i];
  }
  const float sum = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
                    ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
  const float inv = 1.0f / sum;
  for (i = 0; i < n; ++i) x[i] *= inv;
}

void exp_scaled_portable(const float* x, float* out, int64_t n, float shift, float scale) {
  for (int64_t i = 0; i < n; ++i) out[i] = std::exp((x[i] - shift) * scale);
}

constexpr ElementwiseKernels kPortableKernels{rms_norm_portable,      apply_rope_portable,
                                              gelu_tanh_mul_portable, soft_cap_portable,
                                              softmax_portable,       exp_scaled_portable};

const ElementwiseKernels& best_kernels() { return elementwise_kernels(best_simd_isa()); }

}  // namespace

const ElementwiseKernels& elementwise_kernels(SimdIsa isa) {
  switch (isa) {
#if defined(__x86_64__)
    case SimdIsa::kAvx2:
    case SimdIsa::kAvxVnni:  // no float instructions of its own
      return detail::avx2_elementwise_kernels();
    case SimdIsa::kAvx512:
      return detail::avx512_elementwise_kernels();
#endif
    default:
      return kPortableKernels;
  }
}

void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps) {
  best_kernels().rms_norm(x, w, y, n, eps);
}

void rms_norm_rows(const float* x, size_t ldx, const float* w, float* y, size_t ldy, int64_t rows,
                   int64_t n, float eps) {
  const ElementwiseKernels& k = best_kernels();
  for (int64_t r = 0; r < rows; ++r) {
    k.rms_norm(x + static_cast<size_t>(r) * ldx, w, y + static_cast<size_t>(r) * ldy, n, eps);
  }
}

void rope_inv_freq(int head_dim, double theta, int rotated_pairs, double factor, float* out) {
  const int half = head_dim / 2;
  const float base = static_cast<float>(theta);
  for (int i = 0; i < half; ++i) {
    if (i < rotated_pairs) {
      const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
      out[i] = (1.0f / std::pow(base, exponent)) / static_cast<float>(factor);
    } else {
      out[i] = 0.0f;
    }
  }
}

void rope_cos_sin(int64_t pos, const float* inv_freq, int pairs, float* cos_out, float* sin_out) {
  const float p = static_cast<float>(pos);
  for (int i = 0; i < pairs; ++i) {
    const float angle = p * inv_freq[i];
    cos_out[i] = std::cos(angle);
    sin_out[i] = std::sin(angle);
  }
}

void apply_rope(float* x, int head_dim, const float* cos_v, const float* sin_v, int rotated_pairs) {
  best_kernels().apply_rope(x, head_dim, cos_v, sin_v, rotated_pairs);
}

void gelu_tanh_mul(const float* gate, const float* up, float* out, int64_t n) {
  best_kernels().gelu_tanh_mul(gate, up, out, n);
}

void soft_cap(float* x, int64_t n, float cap) { best_kernels().soft_cap(x, n, cap); }

void softmax(float* x, int64_t n) { best_kernels().softmax(x, n); }

void exp_scaled(const float* x, float* out, int64_t n, float shift, float scale) {
  best_kernels().exp_scaled(x, out, n, shift, scale);
}

}  // namespace gemmaserve::cpu
