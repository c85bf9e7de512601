// AVX-VNNI kernels over interleaved Q8_0 / Q4_0 / Q4_K weights (quant_interleaved_ymm.h): the
// VEX form of vpdpbusd (Intel 12th gen and later, Zen 4 and later) adds 4-byte dot products
// straight into int32, as the AVX-512 VNNI kernels do in 512-bit vectors.
#if defined(__x86_64__)

// Standard and project headers first (see quant_matmul_avx2_interleaved.cpp).
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/interleave.h"
#include "kernels/cpu/line_prefetch.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/quant_matmul_internal.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avxvnni"))), apply_to = function)
#else
#pragma GCC target("avx2,fma,f16c,avxvnni")
#endif

#include "kernels/cpu/quant_interleaved_ymm.h"

namespace gemmaserve::cpu::quant_detail {
namespace {

struct VexDpbusd {
  static __m256i dpbusd(__m256i acc, __m256i w, __m256i x) {
    return _mm256_dpbusd_avx_epi32(acc, w, x);
  }
};

}  // namespace

RangeKernel avxvnni_interleaved_kernel(DType dtype) {
  return ymm_interleaved_kernel<DpbusdDot<VexDpbusd>>(dtype);
}

}  // namespace gemmaserve::cpu::quant_detail

#if defined(__clang__)
#pragma clang attribute pop
#endif

#else

#include "kernels/cpu/quant_matmul_internal.h"

namespace gemmaserve::cpu::quant_detail {
RangeKernel avxvnni_interleaved_kernel(DType dtype) { return portable_interleaved_kernel(dtype); }
}  // namespace gemmaserve::cpu::quant_detail

#endif
