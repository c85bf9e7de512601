#include "kernels/cpu/simd_isa.h"

namespace gemmaserve::cpu {

std::vector<SimdIsa> supported_simd_isas() {
  std::vector<SimdIsa> out;
  for (SimdIsa isa : {SimdIsa::kPortable, SimdIsa::kAvx2, SimdIsa::kAvx512}) {
    if (simd_isa_supported(isa)) out.push_back(isa);
  }
  return out;
}

}  // namespace gemmaserve::cpu
