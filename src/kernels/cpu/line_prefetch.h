// How kernels request memory lines ahead of use, and which request suits which CPU.
#pragma once

#include <cstddef>

namespace gemmaserve::cpu {

// kL1: into every level (prefetcht0); kL2: into L2 and below (prefetcht1); kNonTemporal:
// prefetchnta, for lines read once.
enum class LinePrefetch { kNone, kL1, kL2, kNonTemporal };

template <LinePrefetch kKind>
inline void prefetch_line(const void* p) {
  if constexpr (kKind == LinePrefetch::kL1) __builtin_prefetch(p, 0, 3);
  if constexpr (kKind == LinePrefetch::kL2) __builtin_prefetch(p, 0, 2);
  if constexpr (kKind == LinePrefetch::kNonTemporal) __builtin_prefetch(p, 0, 0);
}

// The request for weight lines one decode row reads once, chosen once per process:
// kNonTemporal on AMD (Zen 5 streamed decode weights 5-10 % faster with it than with kL1),
// kL2 elsewhere (an Intel Xeon with AVX-512 streamed them 2.7x slower non-temporally: 5.5
// against 14.6-16.1 GB/s per thread). GEMMASERVE_LINE_PREFETCH=nta|l2 overrides it
// (InputError for anything else).
LinePrefetch once_line_prefetch();

// Runs fn.template operator()<kind>() with once_line_prefetch() as a compile-time constant.
template <class Fn>
inline void with_once_line_prefetch(Fn&& fn) {
  if (once_line_prefetch() == LinePrefetch::kNonTemporal) {
    fn.template operator()<LinePrefetch::kNonTemporal>();
  } else {
    fn.template operator()<LinePrefetch::kL2>();
  }
}

// How far ahead of its reads one-row decode requests quantized weight lines: 0 = the next 16-row
// group (AMD, measured best on Zen 5), else this many bytes. On an Intel Xeon a group ahead
// lost 10-14 % once groups passed ~64 KiB (K >= 4096: E4B's down projection, K 10240 Q8_0,
// 30.0 against 34.3-34.4 GB/s with 12-24 KiB, alternating in one process); 12 KiB also helps
// 256-row matrices (32.0 against 30.7 for 24 KiB) and equals 24 KiB on the rest.
size_t once_prefetch_distance();

// Parses "nta" or "l2"; InputError otherwise.
LinePrefetch parse_once_line_prefetch(const char* name);

// The request for the next weight lines of batched decode (2-12 X rows, lines reused by every X
// tile): kL1 on AMD, kL2 elsewhere (the Intel Xeon streamed 8 rows of Q4_0 / Q8_0 7 % faster).
LinePrefetch batch_line_prefetch();

// Whether decode attention requests the next chunk's K/V rows all at the chunk's start, into
// L2, instead of spread over the loops that use the current chunk: true except on AMD (a burst
// of hundreds of requests stalled Zen 5; on an Intel Xeon the spread requests did not help at
// all and the burst cut attention time 15-30 %, bench attention --layers 140).
bool attention_burst_prefetch();

}  // namespace gemmaserve::cpu
