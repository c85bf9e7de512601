// What SIMD the CPU (and OS) offers, and the kernel level chosen from it once per process.
#pragma once

namespace gemmaserve::cpu {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512dq = false;
  bool avx512vl = false;
  bool avx512_bf16 = false;
  bool avx512_vnni = false;
  bool avx_vnni = false;
  bool amd = false;  // cpuid vendor "AuthenticAMD"
};

// Kernel levels, lowest first. kAvx2 needs avx2+fma+f16c; kAvxVnni adds AVX-VNNI (the VEX
// vpdpbusd of Intel 12th gen and later: the quantized kernels use it, the float ones are
// kAvx2's); kAvx512 needs avx512f/bw/dq/vl.
enum class CpuIsa { kPortable = 0, kAvx2 = 1, kAvxVnni = 2, kAvx512 = 3 };

// Detected once (cpuid + xgetbv: the OS must save the vector state); all false off x86-64.
const CpuFeatures& cpu_features();

// Whether this CPU can run kernels of `isa`.
bool cpu_supports(CpuIsa isa);

// The best supported level, lowered by GEMMASERVE_CPU_ISA=portable|avx2|avxvnni|avx512 if set (a
// level the CPU lacks becomes the best one below it that it has, with a warning). Chosen on
// first call.
CpuIsa cpu_isa();

const char* cpu_isa_name(CpuIsa isa);

// Parses "portable", "avx2", "avxvnni" or "avx512"; InputError otherwise.
CpuIsa parse_cpu_isa(const char* name);

}  // namespace gemmaserve::cpu
