#include "kernels/cpu/matmul.h"

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
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

void split_over_n(const MatmulArgs& args, ThreadPool* pool,
                  const std::function<void(int64_t, int64_t)>& range) {
  if (pool == nullptr || pool->size() == 1 || args.t * args.n * args.k < kMinParallelMacs) {
    range(0, args.n);
    return;
  }
  pool->parallel_for_grain(static_cast<size_t>(args.n), kThreadGrainRows, [&](size_t b, size_t e) {
    range(static_cast<int64_t>(b), static_cast<int64_t>(e));
  });
}

#if defined(__x86_64__)
bool use_bf16_activations(const MatmulArgs& args, CpuIsa isa) {
  return args.precision == MatmulPrecision::kBF16 && args.w_dtype == DType::kBF16 &&
         isa == CpuIsa::kAvx512 && cpu_features().avx512_bf16;
}

// X rounded to bf16 once per call (shared by the threads), into the caller thread's scratch.
void run_bf16(const MatmulArgs& args, ThreadPool* pool) {
  thread_local std::vector<uint16_t> x_bf16;
  const size_t ld = static_cast<size_t>(args.k);
  if (x_bf16.size() < static_cast<size_t>(args.t) * ld)
    x_bf16.resize(static_cast<size_t>(args.t) * ld);
  for (int64_t t = 0; t < args.t; ++t) {
    const float* src = args.x + static_cast<size_t>(t) * args.ldx;
    uint16_t* dst = x_bf16.data() + static_cast<size_t>(t) * ld;
    for (int64_t i = 0; i < args.k; ++i) dst[i] = f32_to_bf16(src[i]);
  }
  const uint16_t* xb = x_bf16.data();
  split_over_n(args, pool,
               [&](int64_t b, int64_t e) { detail::matmul_range_avx512_bf16(args, xb, ld, b, e); });
}
#endif

void run(const MatmulArgs& args, ThreadPool* pool, CpuIsa isa, RangeFn range) {
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
#if defined(__x86_64__)
  if (use_bf16_activations(args, isa)) return run_bf16(args, pool);
#else
  (void)isa;
#endif
  split_over_n(args, pool, [&](int64_t b, int64_t e) { range(args, b, e); });
}

}  // namespace

float dot_f32(const float* a, const float* b, int64_t n) { return chosen_kernels().dot(a, b, n); }

void matmul(const MatmulArgs& args, ThreadPool* pool) {
  if (dtype_is_quantized(args.w_dtype)) return quant_matmul(args, pool);
  run(args, pool, cpu_isa(), chosen_kernels().range);
}

void matmul_with_isa(const MatmulArgs& args, ThreadPool* pool, CpuIsa isa) {
  if (!cpu_supports(isa)) {
    throw InputError(std::string("matmul: this CPU cannot run ") + cpu_isa_name(isa) + " kernels");
  }
  run(args, pool, isa, kernels_for(isa).range);
}

}  // namespace gemmaserve::cpu
