// Private to the kernels: the per-ISA element-wise tables (defined in simd_avx2.cpp and
// simd_avx512.cpp, which compile to nothing off x86).
#pragma once

#include "kernels/cpu/ops.h"

namespace gemmaserve::cpu::detail {

#if defined(__x86_64__)
const ElementwiseKernels& avx2_elementwise_kernels();
const ElementwiseKernels& avx512_elementwise_kernels();
#endif

}  // namespace gemmaserve::cpu::detail
