// Which SIMD instruction set the attention and element-wise kernels run with. The detection
// here is a stopgap: it moves to kernels/cpu/cpu_features once that lands.
#pragma once

#include <vector>

namespace gemmaserve::cpu {

// kAvx2 means AVX2 + FMA + F16C; kAvx512 means AVX-512 F/BW/VL/DQ on top of it.
enum class SimdIsa { kPortable, kAvx2, kAvx512 };

const char* simd_isa_name(SimdIsa isa);
bool simd_isa_supported(SimdIsa isa);
// The widest supported level (fixed for the process, so results never change mid-run).
SimdIsa best_simd_isa();
// Every supported level, portable first (for tests comparing them).
std::vector<SimdIsa> supported_simd_isas();

}  // namespace gemmaserve::cpu
