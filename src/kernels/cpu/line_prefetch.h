// How kernels request memory lines ahead of use, and which request suits lines read once.
#pragma once

namespace gemmaserve::cpu {

// kReused: lines later tiles read again (into L1). kOnceNonTemporal / kOnceL2: lines one decode
// row reads once; which of the two streams faster depends on the CPU (once_line_prefetch()).
enum class LinePrefetch { kNone, kReused, kOnceNonTemporal, kOnceL2 };

template <LinePrefetch kKind>
inline void prefetch_line(const void* p) {
  if constexpr (kKind == LinePrefetch::kReused) __builtin_prefetch(p, 0, 3);
  if constexpr (kKind == LinePrefetch::kOnceNonTemporal) __builtin_prefetch(p, 0, 0);
  if constexpr (kKind == LinePrefetch::kOnceL2) __builtin_prefetch(p, 0, 2);
}

// The request for lines read once, chosen once per process: non-temporal on AMD (Zen 5 streamed
// decode weights 5-10 % faster with it than into L1), into L2 elsewhere (an Intel Xeon with
// AVX-512 streamed them 2.7x slower non-temporally: 5.5 against 14.6-16.1 GB/s per thread).
// GEMMASERVE_LINE_PREFETCH=nta|l2 overrides it (InputError for anything else).
LinePrefetch once_line_prefetch();

// Parses "nta" or "l2"; InputError otherwise.
LinePrefetch parse_once_line_prefetch(const char* name);

}  // namespace gemmaserve::cpu
