#include "kernels/cpu/simd_isa.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace gemmaserve::cpu {
namespace {

#if defined(__x86_64__)
// Not every compiler's __builtin_cpu_supports knows "f16c": ask CPUID leaf 1 directly.
bool has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}
#endif

}  // namespace

const char* simd_isa_name(SimdIsa isa) {
  switch (isa) {
    case SimdIsa::kPortable:
      return "portable";
    case SimdIsa::kAvx2:
      return "avx2";
    case SimdIsa::kAvx512:
      return "avx512";
  }
  return "?";
}

bool simd_isa_supported(SimdIsa isa) {
  switch (isa) {
    case SimdIsa::kPortable:
      return true;
#if defined(__x86_64__) && defined(__GNUC__)
    // TODO(cpu_features): use the shared feature probe once kernels/cpu/cpu_features lands.
    case SimdIsa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
    case SimdIsa::kAvx512:
      return simd_isa_supported(SimdIsa::kAvx2) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512dq");
#else
    default:
      return false;
#endif
  }
  return false;
}

SimdIsa best_simd_isa() {
  static const SimdIsa best = simd_isa_supported(SimdIsa::kAvx512) ? SimdIsa::kAvx512
                              : simd_isa_supported(SimdIsa::kAvx2) ? SimdIsa::kAvx2
                                                                   : SimdIsa::kPortable;
  return best;
}

std::vector<SimdIsa> supported_simd_isas() {
  std::vector<SimdIsa> out;
  for (SimdIsa isa : {SimdIsa::kPortable, SimdIsa::kAvx2, SimdIsa::kAvx512}) {
    if (simd_isa_supported(isa)) out.push_back(isa);
  }
  return out;
}

}  // namespace gemmaserve::cpu
