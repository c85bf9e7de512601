// exp and tanh over any vector traits V (see simd_vec_x86.h); Cephes single-precision
// polynomials, within ~2 ulp of std::exp / std::tanh over the float range.
#pragma once

// Internal linkage: each ISA's translation unit gets its own copies, never merged by the linker.
namespace gemmaserve::cpu::simd {
namespace {

template <class V>
inline typename V::F vexp(typename V::F x) {
  using F = typename V::F;
  const F lo = V::set1(-87.33654f);  // below: result under FLT_MIN, returned as 0
  const F clamped = V::min(V::max(x, lo), V::set1(88.37626f));
  const F n = V::round_nearest(V::mul(clamped, V::set1(1.44269504088896341f)));
  // r = x - n ln2, in two steps so r stays exact.
  F r = V::fmadd(n, V::set1(-0.693359375f), clamped);
  r = V::fmadd(n, V::set1(2.12194440e-4f), r);
  F p = V::set1(1.9875691500e-4f);
  p = V::fmadd(p, r, V::set1(1.3981999507e-3f));
  p = V::fmadd(p, r, V::set1(8.3334519073e-3f));
  p = V::fmadd(p, r, V::set1(4.1665795894e-2f));
  p = V::fmadd(p, r, V::set1(1.6666665459e-1f));
  p = V::fmadd(p, r, V::set1(5.0000001201e-1f));
  p = V::fmadd(p, V::mul(r, r), V::add(r, V::set1(1.0f)));
  // n may be 128 at the top clamp: scale in two halves so 2^n never overflows early.
  const F half = V::round_nearest(V::mul(n, V::set1(0.5f)));
  const F result = V::mul(V::mul(p, V::pow2i(half)), V::pow2i(V::sub(n, half)));
  return V::select(V::lt(x, lo), V::zero(), result);
}

template <class V>
inline typename V::F vtanh(typename V::F x) {
  using F = typename V::F;
  const F a = V::abs(x);
  // Small |x|: odd polynomial (no cancellation); else 1 - 2 / (e^{2|x|} + 1).
  const F z = V::mul(x, x);
  F p = V::set1(-5.70498872745e-3f);
  p = V::fmadd(p, z, V::set1(2.06390887954e-2f));
  p = V::fmadd(p, z, V::set1(-5.37397155531e-2f));
  p = V::fmadd(p, z, V::set1(1.33314422036e-1f));
  p = V::fmadd(p, z, V::set1(-3.33332819422e-1f));
  const F small = V::fmadd(V::mul(p, z), x, x);
  const F e = vexp<V>(V::min(V::add(a, a), V::set1(88.0f)));
  const F big = V::sub(V::set1(1.0f), V::div(V::set1(2.0f), V::add(e, V::set1(1.0f))));
  return V::select(V::lt(a, V::set1(0.625f)), small, V::copysign(big, x));
}

}  // namespace
}  // namespace gemmaserve::cpu::simd
