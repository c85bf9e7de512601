// AVX2 path of the quantized matmul: not specialised yet, it runs the portable kernel (same
// canonical order, so results are identical).
#include "kernels/cpu/quant_matmul_internal.h"

namespace gemmaserve::cpu::quant_detail {
RangeKernel avx2_kernel(DType dtype) { return portable_kernel(dtype); }
}  // namespace gemmaserve::cpu::quant_detail
