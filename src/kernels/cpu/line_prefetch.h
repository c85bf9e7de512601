// How kernels request memory lines ahead of use, and which request suits which CPU.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

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

// Lines [begin, end) a kernel tile requests while it runs.
struct LineRange {
  const char* begin = nullptr;
  const char* end = nullptr;
};

// The `lines` lines from `next` in equal shares, one per tile that computes the current weight
// groups, so memory streams the next groups while every tile computes (requesting them all in
// the first tile left memory idle during the others).
class LineShares {
 public:
  LineShares(const char* next, size_t lines, int64_t tiles)
      : next_(next),
        end_(next + 64 * lines),
        share_((lines + static_cast<size_t>(tiles) - 1) / static_cast<size_t>(tiles)) {}
  LineRange take() {
    const char* begin = std::min(next_ + 64 * share_ * taken_++, end_);
    return {begin, std::min(begin + 64 * share_, end_)};
  }

 private:
  const char* next_;
  const char* end_;
  size_t share_;
  size_t taken_ = 0;
};

// Requests a LineRange an equal share per step of a loop of `steps` steps (a tile's blocks).
template <LinePrefetch kKind>
class LineTrickle {
 public:
  LineTrickle(LineRange r, int64_t steps)
      : at_(r.begin), end_(r.end), per_step_(((r.end - r.begin) / 64 + steps) / steps) {}
  void step() {
    for (int64_t i = 0; i < per_step_ && at_ < end_; ++i, at_ += 64) prefetch_line<kKind>(at_);
  }

 private:
  const char* at_;
  const char* end_;
  int64_t per_step_;
};

// How far ahead of its reads one-row decode requests quantized weight lines (0 = the whole next
// 16-row group): 8 KiB on AMD, 12 KiB elsewhere. Zen 5, one thread, alternating in one process:
// Q4_0 K 1536 38.3 -> 41.5 GB/s and Q8_0 39.8 -> 44.4 against the next group (E2B decode on one
// thread 81-83 -> 85-86 % of its roofline). On an Intel Xeon a group ahead lost 10-14 % once
// groups passed ~64 KiB (K >= 4096: E4B's down projection, K 10240 Q8_0, 30.0 against 34.3-34.4
// GB/s with 12-24 KiB); 12 KiB also helps 256-row matrices (32.0 against 30.7 for 24 KiB).
// GEMMASERVE_PREFETCH_AHEAD=BYTES overrides it (parse_once_prefetch_distance).
size_t once_prefetch_distance();

// Parses a byte count in [0, 1 MiB]; InputError otherwise.
size_t parse_once_prefetch_distance(const char* text);

// Parses "nta" or "l2"; InputError otherwise.
LinePrefetch parse_once_line_prefetch(const char* name);

// The request for the next weight lines of batched decode (2-12 X rows, lines reused by every X
// tile): kL1 on AMD, kL2 elsewhere (the Intel Xeon streamed 8 rows of Q4_0 / Q8_0 7 % faster).
LinePrefetch batch_line_prefetch();

}  // namespace gemmaserve::cpu
