#include "kernels/cpu/cpu_features.h"

#include <cstdlib>
#include <string>

#include "core/error.h"
#include "core/logging.h"
#include "kernels/cpu/line_prefetch.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace gemmaserve::cpu {
namespace {

#if defined(__x86_64__)
// XCR0: which register states the OS saves on context switch.
uint64_t read_xcr0() {
  uint32_t eax = 0, edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

CpuFeatures detect() {
  CpuFeatures f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return f;
  f.amd = b == 0x68747541 && d == 0x69746e65 && c == 0x444d4163;  // "Auth" "enti" "cAMD"
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = (c >> 27) & 1;
  if (!osxsave) return f;
  const uint64_t xcr0 = read_xcr0();
  const bool ymm_state = (xcr0 & 0x6) == 0x6;    // SSE + AVX state
  const bool zmm_state = (xcr0 & 0xe6) == 0xe6;  // + opmask, ZMM_Hi256, Hi16_ZMM
  const bool avx = ((c >> 28) & 1) && ymm_state;
  f.fma = avx && ((c >> 12) & 1);
  f.f16c = avx && ((c >> 29) & 1);
  if (__get_cpuid_max(0, nullptr) < 7) return f;
  __cpuid_count(7, 0, a, b, c, d);
  f.avx2 = avx && ((b >> 5) & 1);
  f.avx512f = zmm_state && ((b >> 16) & 1);
  f.avx512bw = f.avx512f && ((b >> 30) & 1);
  f.avx512dq = f.avx512f && ((b >> 17) & 1);
  f.avx512vl = f.avx512f && ((b >> 31) & 1);
  f.avx512_vnni = f.avx512f && ((c >> 11) & 1);
  __cpuid_count(7, 1, a, b, c, d);
  f.avx512_bf16 = f.avx512f && ((a >> 5) & 1);
  f.avx_vnni = avx && ((a >> 4) & 1);
  return f;
}
#else
CpuFeatures detect() { return CpuFeatures{}; }
#endif

// The highest level at or below `want` that this CPU supports.
CpuIsa highest_supported(CpuIsa want) {
  for (int level = static_cast<int>(want); level > 0; --level) {
    if (cpu_supports(static_cast<CpuIsa>(level))) return static_cast<CpuIsa>(level);
  }
  return CpuIsa::kPortable;
}

CpuIsa best_isa() { return highest_supported(CpuIsa::kAvx512); }

LinePrefetch choose_once_line_prefetch() {
  const char* forced = std::getenv("GEMMASERVE_LINE_PREFETCH");
  if (forced != nullptr && *forced != '\0') return parse_once_line_prefetch(forced);
  return cpu_features().amd ? LinePrefetch::kNonTemporal : LinePrefetch::kL2;
}

size_t choose_once_prefetch_distance() {
  const char* forced = std::getenv("GEMMASERVE_PREFETCH_AHEAD");
  if (forced != nullptr && *forced != '\0') return parse_once_prefetch_distance(forced);
  return (cpu_features().amd ? size_t{8} : size_t{12}) << 10;
}

CpuIsa choose_isa() {
  const CpuIsa best = best_isa();
  const char* forced = std::getenv("GEMMASERVE_CPU_ISA");
  if (forced == nullptr || *forced == '\0') return best;
  const CpuIsa want = parse_cpu_isa(forced);
  if (!cpu_supports(want)) {
    const CpuIsa lower = highest_supported(want);
    GS_LOG_WARNING << "GEMMASERVE_CPU_ISA=" << forced << " is not supported by this CPU; using "
                   << cpu_isa_name(lower);
    return lower;
  }
  return want;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

bool cpu_supports(CpuIsa isa) {
  const CpuFeatures& f = cpu_features();
  const bool avx2 = f.avx2 && f.fma && f.f16c;
  switch (isa) {
    case CpuIsa::kPortable:
      return true;
    case CpuIsa::kAvx2:
      return avx2;
    case CpuIsa::kAvxVnni:
      return avx2 && f.avx_vnni;
    case CpuIsa::kAvx512:
      return avx2 && f.avx512f && f.avx512bw && f.avx512dq && f.avx512vl;
  }
  return false;
}

CpuIsa cpu_isa() {
  static const CpuIsa isa = choose_isa();
  return isa;
}

LinePrefetch once_line_prefetch() {
  static const LinePrefetch kind = choose_once_line_prefetch();
  return kind;
}

LinePrefetch batch_line_prefetch() {
  return cpu_features().amd ? LinePrefetch::kL1 : LinePrefetch::kL2;
}

size_t once_prefetch_distance() {
  static const size_t distance = choose_once_prefetch_distance();
  return distance;
}

size_t parse_once_prefetch_distance(const char* text) {
  const std::string s = text;
  const bool digits =
      !s.empty() && s.size() <= 7 && s.find_first_not_of("0123456789") == std::string::npos;
  const size_t bytes = digits ? std::stoul(s) : 0;
  if (!digits || bytes > (size_t{1} << 20)) {
    throw InputError(
        "GEMMASERVE_PREFETCH_AHEAD must be a byte count from 0 (the next group) to 1048576, "
        "got '" +
        s + "'");
  }
  return bytes;
}

LinePrefetch parse_once_line_prefetch(const char* name) {
  const std::string s = name;
  if (s == "nta") return LinePrefetch::kNonTemporal;
  if (s == "l2") return LinePrefetch::kL2;
  throw InputError("GEMMASERVE_LINE_PREFETCH must be nta or l2, got '" + s + "'");
}

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kPortable:
      return "portable";
    case CpuIsa::kAvx2:
      return "avx2";
    case CpuIsa::kAvxVnni:
      return "avxvnni";
    case CpuIsa::kAvx512:
      return "avx512";
  }
  return "?";
}

CpuIsa parse_cpu_isa(const char* name) {
  const std::string s = name;
  if (s == "portable") return CpuIsa::kPortable;
  if (s == "avx2") return CpuIsa::kAvx2;
  if (s == "avxvnni") return CpuIsa::kAvxVnni;
  if (s == "avx512") return CpuIsa::kAvx512;
  throw InputError("unknown CPU ISA '" + s + "' (expected portable, avx2, avxvnni or avx512)");
}

}  // namespace gemmaserve::cpu
