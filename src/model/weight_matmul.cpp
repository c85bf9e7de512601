#include "model/weight_matmul.h"

namespace gemmaserve {

void matmul_weights(const WeightMatrix& w, const float* x, int64_t ldx, int64_t t, float* y,
                    int64_t ldy, cpu::MatmulPrecision precision, ThreadPool* pool) {
  cpu::MatmulArgs a;
  a.x = x;
  a.ldx = static_cast<size_t>(ldx);
  a.w = w.data;
  a.w_dtype = w.dtype;
  a.w_layout = w.layout;
  a.x_perm = w.x_perm();
  a.y = y;
  a.ldy = static_cast<size_t>(ldy);
  a.t = t;
  a.k = w.cols;
  a.n = w.rows;
  a.precision = precision;
  cpu::matmul(a, pool);
}

void for_row_ranges(ThreadPool* pool, int64_t rows, FunctionRef<void(int64_t, int64_t)> fn) {
  if (pool == nullptr || rows < 2) {
    fn(0, rows);
    return;
  }
  pool->parallel_for(static_cast<size_t>(rows), [&](size_t b, size_t e) {
    fn(static_cast<int64_t>(b), static_cast<int64_t>(e));
  });
}

}  // namespace gemmaserve
