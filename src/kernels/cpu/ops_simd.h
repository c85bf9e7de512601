// Element-wise ops over vector traits V (see simd_vec_x86.h); the same formulas and operation
// order as the portable versions in ops.cpp, with vector exp/tanh (simd_math.h).
// Included by the per-ISA translation units after their `#pragma GCC target`.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "kernels/cpu/simd_math.h"

// Internal linkage: each ISA's translation unit gets its own copies, never merged by the linker.
namespace gemmaserve::cpu::simd {
namespace {

template <class V>
void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps) {
  int64_t i = 0;
  double sum = V::sum_squares(x, n, &i);
  for (; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  const float mean_sq = static_cast<float>(sum / static_cast<double>(n)) + eps;
  const float inv = std::pow(mean_sq, -0.5f);
  const auto vinv = V::set1(inv);
  i = 0;
  if (w != nullptr) {
    for (; i + V::kWidth <= n; i += V::kWidth) {
      V::store(y + i, V::mul(V::mul(V::load(x + i), vinv), V::load(w + i)));
    }
    for (; i < n; ++i) y[i] = (x[i] * inv) * w[i];
  } else {
    for (; i + V::kWidth <= n; i += V::kWidth) V::store(y + i, V::mul(V::load(x + i), vinv));
    for (; i < n; ++i) y[i] = x[i] * inv;
  }
}

template <class V>
void apply_rope(float* x, int head_dim, const float* cos_v, const float* sin_v, int rotated_pairs) {
  float* lo = x;
  float* hi = x + head_dim / 2;
  int i = 0;
  for (; i + V::kWidth <= rotated_pairs; i += V::kWidth) {
    const auto a = V::load(lo + i), b = V::load(hi + i);
    const auto c = V::load(cos_v + i), s = V::load(sin_v + i);
    V::store(lo + i, V::sub(V::mul(a, c), V::mul(b, s)));
    V::store(hi + i, V::add(V::mul(b, c), V::mul(a, s)));
  }
  for (; i < rotated_pairs; ++i) {
    const float a = lo[i], b = hi[i];
    lo[i] = a * cos_v[i] - b * sin_v[i];
    hi[i] = b * cos_v[i] + a * sin_v[i];
  }
}

template <class V>
inline typename V::F gelu_tanh(typename V::F x) {
  const auto inner = V::mul(V::set1(0.7978845608028654f),
                            V::add(x, V::mul(V::set1(0.044715f), V::mul(V::mul(x, x), x))));
  return V::mul(V::mul(V::set1(0.5f), x), V::add(V::set1(1.0f), vtanh<V>(inner)));
}

template <class V>
void gelu_tanh_mul(const float* gate, const float* up, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + V::kWidth <= n; i += V::kWidth) {
    V::store(out + i, V::mul(gelu_tanh<V>(V::load(gate + i)), V::load(up + i)));
  }
  if (i < n) {
    // The tail through a padded vector, so every element uses the same tanh.
    float g[V::kWidth] = {}, u[V::kWidth] = {}, o[V::kWidth];
    for (int64_t k = i; k < n; ++k) g[k - i] = gate[k], u[k - i] = up[k];
    V::store(o, V::mul(gelu_tanh<V>(V::load(g)), V::load(u)));
    for (int64_t k = i; k < n; ++k) out[k] = o[k - i];
  }
}

template <class V>
void soft_cap(float* x, int64_t n, float cap) {
  const auto c = V::set1(cap);
  int64_t i = 0;
  for (; i + V::kWidth <= n; i += V::kWidth) {
    V::store(x + i, V::mul(vtanh<V>(V::div(V::load(x + i), c)), c));
  }
  if (i < n) {
    float t[V::kWidth] = {};
    for (int64_t k = i; k < n; ++k) t[k - i] = x[k];
    V::store(t, V::mul(vtanh<V>(V::div(V::load(t), c)), c));
    for (int64_t k = i; k < n; ++k) x[k] = t[k - i];
  }
}

template <class V>
void exp_scaled(const float* x, float* out, int64_t n, float shift, float scale) {
  const auto sh = V::set1(shift), sc = V::set1(scale);
  int64_t i = 0;
  for (; i + V::kWidth <= n; i += V::kWidth) {
    V::store(out + i, vexp<V>(V::mul(V::sub(V::load(x + i), sh), sc)));
  }
  if (i < n) {
    float t[V::kWidth] = {};
    for (int64_t k = i; k < n; ++k) t[k - i] = x[k];
    V::store(t, vexp<V>(V::mul(V::sub(V::load(t), sh), sc)));
    for (int64_t k = i; k < n; ++k) out[k] = t[k - i];
  }
}

template <class V>
void softmax(float* x, int64_t n) {
  if (n <= 0) return;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  auto vmax = V::set1(kNegInf);
  int64_t i = 0;
  for (; i + V::kWidth <= n; i += V::kWidth) vmax = V::max(vmax, V::load(x + i));
  float mx = V::reduce_max(vmax);
  for (int64_t k = i; k < n; ++k) mx = std::max(mx, x[k]);
  const auto m = V::set1(mx);
  auto vsum = V::zero();
  for (i = 0; i + V::kWidth <= n; i += V::kWidth) {
    const auto e = vexp<V>(V::sub(V::load(x + i), m));
    V::store(x + i, e);
    vsum = V::add(vsum, e);
  }
  if (i < n) {
    float t[V::kWidth];
    for (int k = 0; k < V::kWidth; ++k) t[k] = i + k < n ? x[i + k] : kNegInf;
    const auto e = vexp<V>(V::sub(V::load(t), m));
    V::store(t, e);
    vsum = V::add(vsum, e);
    for (int64_t k = i; k < n; ++k) x[k] = t[k - i];
  }
  const float inv = 1.0f / V::reduce_add(vsum);
  const auto vinv = V::set1(inv);
  for (i = 0; i + V::kWidth <= n; i += V::kWidth) V::store(x + i, V::mul(V::load(x + i), vinv));
  for (; i < n; ++i) x[i] *= inv;
}

}  // namespace
}  // namespace gemmaserve::cpu::simd
