// Which SIMD level the attention and element-wise kernels run with: the process-wide level of
// kernels/cpu/cpu_features (one probe, one GEMMASERVE_CPU_ISA override for every kernel family).
#pragma once

#include <vector>

#include "kernels/cpu/cpu_features.h"

namespace gemmaserve::cpu {

using SimdIsa = CpuIsa;

inline const char* simd_isa_name(SimdIsa isa) { return cpu_isa_name(isa); }
inline bool simd_isa_supported(SimdIsa isa) { return cpu_supports(isa); }
// The level in use (fixed for the process, so results never change mid-run).
inline SimdIsa best_simd_isa() { return cpu_isa(); }
// Every supported level, portable first (for tests comparing them).
std::vector<SimdIsa> supported_simd_isas();

}  // namespace gemmaserve::cpu
