#include "kernels/cpu/matmul.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "kernels/cpu/matmul_kernels.h"

namespace gemmaserve::cpu {
namespace {

using RangeFn = void (*)(const MatmulArgs&, int64_t, int64_t);
using DotFn = float (*)(const float*, const float*, int64_t);

// Threads split N in multiples of this many rows: whole W tiles, and 64-byte runs of Y.
constexpr size_t kThreadGrainRows = 16;
// Products smaller than this many multiply-adds are not worth waking the workers for.
constexpr int64_t kMinParallelMacs = int64_t{1} << 15;

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

void run(const MatmulArgs& args, ThreadPool* pool, RangeFn range) {
  if (args.w_dtype != DType::kF32 && args.w_dtype != DType::kBF16 && args.w_dtype != DType::kF16) {
    throw InputError(std::string("matmul: unsupported weight dtype ") + dtype_name(args.w_dtype));
  }
  if (args.t <= 0 || args.n <= 0) return;
  if (args.k == 0) {
    for (int64_t t = 0; t < args.t; ++t) {
      std::fill_n(args.y + static_cast<size_t>(t) * args.ldy, args.n, 0.0f);
    }
    return;
  }
  if (pool == nullptr || pool->size() == 1 || args.t * args.n * args.k < kMinParallelMacs) {
    range(args, 0, args.n);
    return;
  }
  pool->parallel_for_grain(static_cast<size_t>(args.n), kThreadGrainRows, [&](size_t b, size_t e) {
    range(args, static_cast<int64_t>(b), static_cast<int64_t>(e));
  });
}

}  // namespace

float dot_f32(const float* a, const float* b, int64_t n) { return chosen_kernels().dot(a, b, n); }

void matmul(const MatmulArgs& args, ThreadPool* pool) { run(args, pool, chosen_kernels().range); }

void matmul_with_isa(const MatmulArgs& args, ThreadPool* pool, CpuIsa isa) {
  if (!cpu_supports(isa)) {
    throw InputError(std::string("matmul: this CPU cannot run ") + cpu_isa_name(isa) + " kernels");
  }
  run(args, pool, kernels_for(isa).range);
}

}  // namespace gemmaserve::cpu
