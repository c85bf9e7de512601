#include "kernels/cpu/matmul.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/interleave.h"
#include "kernels/cpu/line_prefetch.h"
#include "kernels/cpu/matmul_kernels.h"
#include "kernels/cpu/quant_matmul.h"

namespace gemmaserve::cpu {
namespace {

using RangeFn = void (*)(const MatmulArgs&, int64_t, int64_t);
using DotFn = float (*)(const float*, const float*, int64_t);

// Threads split N in multiples of this many rows: whole W tiles, and 64-byte runs of Y.
constexpr size_t kThreadGrainRows = 16;
// Products smaller than this many multiply-adds are not worth waking the workers for.
constexpr int64_t kMinParallelMacs = int64_t{1} << 15;
// Products of this many X rows (decode of one sequence) share their tail units between
// threads; batched decode (3-group tiles, which a half-share claim would cut) keeps its split.
constexpr int64_t kMaxStealingRows = 1;
constexpr size_t kMaxStealingThreads = 64;

// The first bytes of thread `index`'s share of the next product's weights (a.next_w), as
// lines read once: at least 16 KiB (about one 16-row group, what a section's start waited on)
// and the distance the quantized kernels request ahead from (the lines before it are no one's).
template <LinePrefetch kOnce>
void prefetch_next_share(const MatmulArgs& a, size_t index, size_t threads) {
  const size_t prefetch_bytes = std::max(size_t{16} << 10, once_prefetch_distance());
  const size_t begin = a.next_bytes / threads * index / 64 * 64;
  const size_t end = std::min(a.next_bytes, begin + prefetch_bytes);
  const auto* p = static_cast<const char*>(a.next_w);
  for (size_t off = begin; off < end; off += 64) prefetch_line<kOnce>(p + off);
}

void prefetch_next_share(const MatmulArgs& a, size_t index, size_t threads) {
  if (a.next_w == nullptr || a.next_bytes == 0) return;
  with_once_line_prefetch(
      [&]<LinePrefetch kOnce>() { prefetch_next_share<kOnce>(a, index, threads); });
}

// A thread's share of 16-row units, [front, back) in one word: its owner claims from the
// front, other threads from the back, and a unit is claimed once.
class alignas(64) UnitQueue {
 public:
  void store(uint32_t front, uint32_t back) {
    bits_.store(pack(front, back), std::memory_order_relaxed);
  }
  // Claims half of what is left (at least one unit) from the front.
  bool take_front(uint32_t* begin, uint32_t* end) {
    uint64_t s = bits_.load(std::memory_order_relaxed);
    for (;;) {
      const auto front = static_cast<uint32_t>(s), back = static_cast<uint32_t>(s >> 32);
      if (front >= back) return false;
      const uint32_t take = std::max<uint32_t>(1, (back - front) / 2);
      if (bits_.compare_exchange_weak(s, pack(front + take, back), std::memory_order_relaxed)) {
        *begin = front;
        *end = front + take;
        return true;
      }
    }
  }
  // Claims the last unit.
  bool take_back(uint32_t* unit) {
    uint64_t s = bits_.load(std::memory_order_relaxed);
    for (;;) {
      const auto front = static_cast<uint32_t>(s), back = static_cast<uint32_t>(s >> 32);
      if (front >= back) return false;
      if (bits_.compare_exchange_weak(s, pack(front, back - 1), std::memory_order_relaxed)) {
        *unit = back - 1;
        return true;
      }
    }
  }

 private:
  static uint64_t pack(uint32_t front, uint32_t back) {
    return front | (static_cast<uint64_t>(back) << 32);
  }
  std::atomic<uint64_t> bits_{0};
};

struct Kernels {
  RangeFn range;
  DotFn dot;
};

Kernels kernels_for(CpuIsa isa) {
  switch (isa) {
#if defined(__x86_64__)
    case CpuIsa::kAvx512:
      return {detail::matmul_range_avx512, detail::dot_f32_avx512};
    case CpuIsa::kAvx2:
    case CpuIsa::kAvxVnni:  // no float instructions of its own
      return {detail::matmul_range_avx2, detail::dot_f32_avx2};
#endif
    default:
      return {detail::matmul_range_portable, detail::dot_f32_portable};
  }
}

const Kernels& chosen_kernels() {
  static const Kernels table = kernels_for(cpu_isa());
  return table;
}

// The calling thread's X rounded to bf16 (grown, never shrunk).
std::vector<uint16_t>& bf16_x_scratch() {
  thread_local std::vector<uint16_t> x_bf16;
  return x_bf16;
}

#if defined(__x86_64__)
bool use_bf16_activations(const MatmulArgs& args, CpuIsa isa) {
  return args.precision == MatmulPrecision::kBF16 && args.w_dtype == DType::kBF16 &&
         isa == CpuIsa::kAvx512 && cpu_features().avx512_bf16;
}

// X rounded to bf16 once per call (shared by the threads and parts), into the caller's scratch;
// row stride K.
const uint16_t* round_x_to_bf16(const MatmulArgs& args) {
  std::vector<uint16_t>& x_bf16 = bf16_x_scratch();
  const size_t ld = static_cast<size_t>(args.k);
  if (x_bf16.size() < static_cast<size_t>(args.t) * ld)
    x_bf16.resize(static_cast<size_t>(args.t) * ld);
  for (int64_t t = 0; t < args.t; ++t) {
    const float* src = args.x + static_cast<size_t>(t) * args.ldx;
    uint16_t* dst = x_bf16.data() + static_cast<size_t>(t) * ld;
    for (int64_t i = 0; i < args.k; ++i) dst[i] = f32_to_bf16(src[i]);
  }
  return x_bf16.data();
}

void run_bf16(std::span<const MatmulArgs> parts, ThreadPool* pool) {
  const uint16_t* xb = round_x_to_bf16(parts[0]);
  const auto ld = static_cast<size_t>(parts[0].k);
  detail::parallel_over_parts(parts, pool, [&](size_t p, int64_t b, int64_t e) {
    detail::matmul_range_avx512_bf16(parts[p], xb, ld, b, e);
  });
}
#endif

// Interleaved F32 / BF16 weights: bf16 activations where they apply, else the level's kernel.
void run_interleaved(std::span<const MatmulArgs> parts, ThreadPool* pool, CpuIsa isa) {
#if defined(__x86_64__)
  if (use_bf16_activations(parts[0], isa)) {
    const uint16_t* xb = round_x_to_bf16(parts[0]);
    const auto ld = static_cast<size_t>(parts[0].k);
    return detail::parallel_over_parts(parts, pool, [&](size_t p, int64_t b, int64_t e) {
      detail::matmul_range_avx512_bf16_interleaved(parts[p], xb, ld, b, e);
    });
  }
  if (isa == CpuIsa::kAvx512) {
    return detail::parallel_over_parts(parts, pool, [&](size_t p, int64_t b, int64_t e) {
      detail::matmul_range_avx512_interleaved(parts[p], b, e);
    });
  }
#endif
  (void)isa;
  detail::parallel_over_parts(parts, pool, [&](size_t p, int64_t b, int64_t e) {
    detail::matmul_range_interleaved_portable(parts[p], b, e);
  });
}

// Checks that the parts can share one section: same X, rows, K, dtype and precision.
void check_group(std::span<const MatmulArgs> parts) {
  const MatmulArgs& a = parts[0];
  for (const MatmulArgs& p : parts) {
    if (p.x != a.x || p.ldx != a.ldx || p.t != a.t || p.k != a.k || p.w_dtype != a.w_dtype ||
        p.w_layout != a.w_layout || p.precision != a.precision || p.x_perm != a.x_perm) {
      throw InputError(
          "matmul_group: every part must share x, ldx, t, k, w_dtype, w_layout, precision and "
          "x_perm");
    }
  }
}

void run(std::span<const MatmulArgs> parts, ThreadPool* pool, CpuIsa isa, RangeFn range) {
  const MatmulArgs& args = parts[0];
  if (args.w_dtype != DType::kF32 && args.w_dtype != DType::kBF16 && args.w_dtype != DType::kF16) {
    throw InputError(std::string("matmul: unsupported weight dtype ") + dtype_name(args.w_dtype));
  }
  if (args.x_perm) throw InputError("matmul: x_perm is for block-quantized weights");
  if (args.w_layout != WeightLayout::kRows) {
    if (args.w_dtype != DType::kBF16 && args.w_dtype != DType::kF32) {
      throw InputError(
          "matmul: the interleaved weight layout is for F32, BF16, Q8_0, Q4_0 and Q4_K");
    }
    for (const MatmulArgs& p : parts) {
      if (!interleave_supported(p.w_dtype, p.n, std::max<int64_t>(p.k, 32))) {
        throw InputError(std::string("matmul: interleaved ") + dtype_name(p.w_dtype) +
                         " weights with N = " + std::to_string(p.n) +
                         ", K = " + std::to_string(p.k) +
                         " (the layout needs N a multiple of 16 and K of 32)");
      }
    }
  }
  if (args.t <= 0) return;
  if (args.k == 0) {
    for (const MatmulArgs& p : parts)
      for (int64_t t = 0; t < p.t; ++t)
        std::fill_n(p.y + static_cast<size_t>(t) * p.ldy, p.n, 0.0f);
    return;
  }
  if (args.w_layout == WeightLayout::kInterleaved16) return run_interleaved(parts, pool, isa);
#if defined(__x86_64__)
  if (use_bf16_activations(args, isa)) return run_bf16(parts, pool);
#else
  (void)isa;
#endif
  detail::parallel_over_parts(parts, pool,
                              [&](size_t p, int64_t b, int64_t e) { range(parts[p], b, e); });
}

}  // namespace

float dot_f32(const float* a, const float* b, int64_t n) { return chosen_kernels().dot(a, b, n); }

void reserve_thread_scratch(int64_t rows, int64_t k) {
  std::vector<uint16_t>& x_bf16 = bf16_x_scratch();
  if (x_bf16.size() < static_cast<size_t>(rows * k)) x_bf16.resize(static_cast<size_t>(rows * k));
  reserve_quant_act_scratch(rows, k);
}

void matmul(const MatmulArgs& args, ThreadPool* pool) {
  if (dtype_is_quantized(args.w_dtype)) return quant_matmul(args, pool);
  run(std::span<const MatmulArgs>(&args, 1), pool, cpu_isa(), chosen_kernels().range);
}

void matmul_group(std::span<const MatmulArgs> parts, ThreadPool* pool) {
  if (parts.empty()) return;
  check_group(parts);
  if (dtype_is_quantized(parts[0].w_dtype)) return quant_matmul_group(parts, pool);
  run(parts, pool, cpu_isa(), chosen_kernels().range);
}

void matmul_with_isa(const MatmulArgs& args, ThreadPool* pool, CpuIsa isa) {
  if (!cpu_supports(isa)) {
    throw InputError(std::string("matmul: this CPU cannot run ") + cpu_isa_name(isa) + " kernels");
  }
  run(std::span<const MatmulArgs>(&args, 1), pool, isa, kernels_for(isa).range);
}

namespace detail {

void parallel_over_parts(std::span<const MatmulArgs> parts, ThreadPool* pool,
                         FunctionRef<void(size_t, int64_t, int64_t)> fn) {
  int64_t total = 0;
  for (const MatmulArgs& p : parts) total += std::max<int64_t>(p.n, 0);
  if (total == 0) return;
  // Global row range [b, e) of the concatenated parts -> each part's own rows.
  auto rows = [&](int64_t b, int64_t e) {
    int64_t offset = 0;
    for (size_t i = 0; i < parts.size() && offset < e; ++i) {
      const int64_t n = std::max<int64_t>(parts[i].n, 0);
      const int64_t lo = std::max(b, offset), hi = std::min(e, offset + n);
      if (lo < hi) fn(i, lo - offset, hi - offset);
      offset += n;
    }
  };
  const MatmulArgs& a = parts[0];
  if (pool == nullptr || pool->size() == 1 || a.t * total * a.k < kMinParallelMacs) {
    rows(0, total);
    return;
  }
  if (a.t > kMaxStealingRows || pool->size() > kMaxStealingThreads) {
    pool->parallel_for_grain(static_cast<size_t>(total), kThreadGrainRows, [&](size_t b, size_t e) {
      rows(static_cast<int64_t>(b), static_cast<int64_t>(e));
    });
    return;
  }
  // One X row: each thread starts on its static share, claiming it from the front half of
  // what is left at a time, then takes single 16-row units from the back of the others'.
  // Each core's memory stream differs from one section to the next, and static shares left
  // each thread waiting ~1-1.5 % of decode for the other.
  const auto units =
      static_cast<uint32_t>((static_cast<size_t>(total) + kThreadGrainRows - 1) / kThreadGrainRows);
  const size_t threads = pool->size();
  UnitQueue queues[kMaxStealingThreads];
  for (size_t i = 0; i < threads; ++i) {
    const auto [begin, end] = ThreadPool::chunk(units, 1, threads, i);
    queues[i].store(static_cast<uint32_t>(begin), static_cast<uint32_t>(end));
  }
  auto run_units = [&](uint32_t b, uint32_t e) {
    rows(static_cast<int64_t>(b * kThreadGrainRows),
         std::min<int64_t>(total, static_cast<int64_t>(e * kThreadGrainRows)));
  };
  pool->parallel_for_grain(threads, 1, [&](size_t first, size_t last) {
    for (size_t self = first; self < last; ++self) {
      uint32_t b = 0, e = 0;
      while (queues[self].take_front(&b, &e)) run_units(b, e);
    }
    for (size_t k = 1; k < threads; ++k) {
      UnitQueue& victim = queues[(first + k) % threads];
      uint32_t unit = 0;
      while (victim.take_back(&unit)) run_units(unit, unit + 1);
    }
    prefetch_next_share(a, first, threads);
  });
}

}  // namespace detail

}  // namespace gemmaserve::cpu
