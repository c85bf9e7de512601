// The attention and element-wise kernels compiled for AVX-512 F/BW/VL/DQ; called only after
// simd_isa_supported() says the CPU has it.
#if defined(__x86_64__)

// Standard and project headers first: only the templates below get the ISA's target, so no
// inline function shared with other translation units is ever compiled for it.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kernels/cpu/attention_internal.h"
#include "kernels/cpu/simd_kernels.h"

#if defined(__clang__)
#pragma clang attribute push(                                                    \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c"))), \
    apply_to = function)
#else
// GCC 12 reports its own AVX-512 intrinsics' undefined-register idiom as uninitialised.
#pragma GCC diagnostic ignored "-Wuninitialized"
#ifndef __clang__  // a GCC-only warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")
#endif
#define GS_VEC_AVX512
#include "kernels/cpu/attention_simd.h"
#include "kernels/cpu/ops_simd.h"
#include "kernels/cpu/simd_vec_x86.h"

namespace gemmaserve::cpu::detail {

void attend_group_avx512(const PagedKv& kv, const AttentionShape& shape,
                         const AttentionGroupTask& task, AttentionScratch& ws) {
  simd::attend_group_any<simd::VecAvx512>(kv, shape, task, ws);
}

const ElementwiseKernels& avx512_elementwise_kernels() {
  static constexpr ElementwiseKernels kKernels{
      simd::rms_norm<simd::VecAvx512>,      simd::apply_rope<simd::VecAvx512>,
      simd::gelu_tanh_mul<simd::VecAvx512>, simd::soft_cap<simd::VecAvx512>,
      simd::softmax<simd::VecAvx512>,       simd::exp_scaled<simd::VecAvx512>};
  return kKernels;
}

}  // namespace gemmaserve::cpu::detail

#if defined(__clang__)
#pragma clang attribute pop
#endif

#endif  // __x86_64__
