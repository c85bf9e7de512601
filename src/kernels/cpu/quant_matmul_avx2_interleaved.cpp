// AVX2 kernels over interleaved Q8_0 / Q4_0 / Q4_K weights (quant_interleaved_ymm.h): the
// 4-byte dot products are vpmaddubsw pairs summed in int16 (nibbles: 8 steps of at most
// 2 * 15 * 127 stay below 32767) and widened once by vpmaddwd; Q8_0 goes through the sign trick
// (|w| . sign(x, w), at most 2 * 128 * 127), widened at every step.
#if defined(__x86_64__)

// Standard and project headers first: only the templates below get the ISA's target, so no
// inline function shared with other translation units is ever compiled for it.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/interleave.h"
#include "kernels/cpu/line_prefetch.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/quant_matmul_internal.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC target("avx2,fma,f16c")
#endif

#include "kernels/cpu/quant_interleaved_ymm.h"

namespace gemmaserve::cpu::quant_detail {
namespace {

struct MaddubsDot {
  static __m256i zero() { return _mm256_setzero_si256(); }
  static __m256i nib_add(__m256i acc, __m256i w, __m256i x) {
    return _mm256_add_epi16(acc, _mm256_maddubs_epi16(w, x));
  }
  static __m256i nib_sum(__m256i acc) { return _mm256_madd_epi16(acc, _mm256_set1_epi16(1)); }
  static __m256i q8_add(__m256i acc, __m256i w, __m256i x) {
    const __m256i s = _mm256_xor_si256(w, _mm256_set1_epi8(static_cast<char>(0x80)));
    const __m256i pairs = _mm256_maddubs_epi16(_mm256_abs_epi8(s), _mm256_sign_epi8(x, s));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
  }
  // The sign trick multiplies the signed values themselves: no offset to remove.
  static __m256i q8_corr(__m256i) { return _mm256_setzero_si256(); }
};

}  // namespace

RangeKernel avx2_interleaved_kernel(DType dtype) {
  return ymm_interleaved_kernel<MaddubsDot>(dtype);
}

}  // namespace gemmaserve::cpu::quant_detail

#if defined(__clang__)
#pragma clang attribute pop
#endif

#else

#include "kernels/cpu/quant_matmul_internal.h"

namespace gemmaserve::cpu::quant_detail {
RangeKernel avx2_interleaved_kernel(DType dtype) { return portable_interleaved_kernel(dtype); }
}  // namespace gemmaserve::cpu::quant_detail

#endif
