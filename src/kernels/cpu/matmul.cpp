#include "kernels/cpu/matmul.h"

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/quant_matmul.h"

namespace gemmaserve::cpu {
namespace {

constexpr int kLanes = 8;        // partial sums per output element (fixed reduction order)
constexpr int64_t kRowTile = 4;  // W rows reduced together against one X row
constexpr int64_t kBlock = 16;   // W rows converted to f32 at once (multiple of kRowTile)

inline float reduce_lanes(const float* a) {
  return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

// R dot products of x against R rows of w (row stride k). Each row's arithmetic is identical
// whatever R is, so grouping never changes a result.
template <int R>
inline void dot_rows(const float* __restrict x, const float* __restrict w, int64_t k,
                     float* __restrict out, size_t out_stride) {
  float acc[R][kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= k; i += kLanes) {
    for (int r = 0; r < R; ++r) {
      const float* wr = w + r * k + i;
      for (int j = 0; j < kLanes; ++j) acc[r][j] += x[i + j] * wr[j];
    }
  }
  for (int r = 0; r < R; ++r) {
    float s = reduce_lanes(acc[r]);
    const float* wr = w + r * k;
    for (int64_t ii = i; ii < k; ++ii) s += x[ii] * wr[ii];
    out[r * out_stride] = s;
  }
}

void matmul_range(const MatmulArgs& a, int64_t n_begin, int64_t n_end) {
  const size_t elem = dtype_size(a.w_dtype);
  std::vector<float> converted;
  if (a.w_dtype != DType::kF32) converted.resize(static_cast<size_t>(kBlock * a.k));
  for (int64_t nb = n_begin; nb < n_end; nb += kBlock) {
    const int64_t rows = std::min(kBlock, n_end - nb);
    const float* wf;
    if (a.w_dtype == DType::kF32) {
      wf = static_cast<const float*>(a.w) + nb * a.k;
    } else {
      const auto* src = static_cast<const std::byte*>(a.w) + static_cast<size_t>(nb * a.k) * elem;
      to_f32(a.w_dtype, src, converted.data(), static_cast<size_t>(rows * a.k));
      wf = converted.data();
    }
    for (int64_t t = 0; t < a.t; ++t) {
      const float* x = a.x + static_cast<size_t>(t) * a.ldx;
      float* y = a.y + static_cast<size_t>(t) * a.ldy + nb;
      int64_t r = 0;
      for (; r + kRowTile <= rows; r += kRowTile)
        dot_rows<kRowTile>(x, wf + r * a.k, a.k, y + r, 1);
      for (; r < rows; ++r) dot_rows<1>(x, wf + r * a.k, a.k, y + r, 1);
    }
  }
}

}  // namespace

float dot_f32(const float* a, const float* b, int64_t n) {
  float out;
  dot_rows<1>(a, b, n, &out, 1);
  return out;
}

void matmul(const MatmulArgs& args, ThreadPool* pool) {
  if (dtype_is_quantized(args.w_dtype)) return quant_matmul(args, pool);
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
  // Small products are not worth waking the workers.
  const bool serial = pool == nullptr || args.t * args.n * args.k < (1 << 15);
  if (serial) {
    matmul_range(args, 0, args.n);
    return;
  }
  pool->parallel_for_grain(static_cast<size_t>(args.n), kBlock, [&](size_t b, size_t e) {
    matmul_range(args, static_cast<int64_t>(b), static_cast<int64_t>(e));
  });
}

}  // namespace gemmaserve::cpu
