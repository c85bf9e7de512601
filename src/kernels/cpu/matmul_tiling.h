// Register-blocked tiles shared by every ISA level of the matmul (internal to kernels/cpu).
//
// Include this after the ISA's target pragma, so the templates compile for that ISA, and
// instantiate them only with a vector type `V` from the including file's anonymous namespace
// (distinct types keep each level's instantiations apart at link time). V provides 16-lane
// vectors: zero(), load_x(p), load_x_tail(p, rem), load_w<D>(row, i), load_w_tail<D>(row, i,
// rem), fma(x, w, acc) = acc + x * w lane-wise, and reduce(acc) with kReduceTree's order.
//
// Reduction order (batch invariance): output element (t, n) owns 16 f32 lanes; lane l sums
// X[t, i] * W[n, i] over i = l (mod 16) in increasing i, the ragged tail zero-padded; then the
// lanes are added as a fixed tree. It depends on K alone, never on T, on the tile the element
// lands in, or on how N is split between threads.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "kernels/cpu/matmul.h"

namespace gemmaserve::cpu::detail {

constexpr int kLanes = 16;
constexpr int kTileRowsX = 4;  // X rows per tile
constexpr int kTileRowsW = 4;  // W rows per tile (each converted once per K chunk, used RX times)
// X rows processed against a W tile before moving on: their f32 data stays in L2 while W is
// streamed once per block. Bytes, divided by the row size.
constexpr size_t kXBlockBytes = size_t{384} << 10;
// W rows applied to each X tile of a block in turn (prefill): they stay in L2 meanwhile.
constexpr size_t kWPanelBytes = size_t{192} << 10;

// Prefetches the next W tile (RW rows further, contiguous) as one sequential run of cache lines,
// an equal share per K step, so the tiles arrive as one stream with one prefetch per line.
struct NextTilePrefetch {
  const std::byte* cursor;
  const std::byte* end;
  size_t lines_per_step;
  void step() {
    for (size_t i = 0; i < lines_per_step && cursor < end; ++i, cursor += 64) {
      __builtin_prefetch(cursor);
    }
  }
};

template <class V, DType D, int RX, int RW>
void matmul_tile(const float* x, size_t ldx, const std::byte* w, size_t w_row_bytes, int64_t k,
                 float* y, size_t ldy) {
  using Vec = typename V::Vec;
  Vec acc[RX][RW];
#pragma GCC unroll 8
  for (int t = 0; t < RX; ++t)
#pragma GCC unroll 8
    for (int r = 0; r < RW; ++r) acc[t][r] = V::zero();
  const std::byte* wr[RW];
#pragma GCC unroll 8
  for (int r = 0; r < RW; ++r) wr[r] = w + static_cast<size_t>(r) * w_row_bytes;
  const size_t tile_bytes = RW * w_row_bytes;
  const size_t steps = static_cast<size_t>(k / kLanes) + 1;
  NextTilePrefetch pf{w + tile_bytes, w + 2 * tile_bytes, (tile_bytes / 64 + steps) / steps};
  int64_t i = 0;
  for (; i + kLanes <= k; i += kLanes) {
    pf.step();
    Vec wv[RW];
#pragma GCC unroll 8
    for (int r = 0; r < RW; ++r) wv[r] = V::template load_w<D>(wr[r], i);
#pragma GCC unroll 8
    for (int t = 0; t < RX; ++t) {
      const Vec xv = V::load_x(x + static_cast<size_t>(t) * ldx + i);
#pragma GCC unroll 8
      for (int r = 0; r < RW; ++r) acc[t][r] = V::fma(xv, wv[r], acc[t][r]);
    }
  }
  if (i < k) {
    const int rem = static_cast<int>(k - i);
    Vec wv[RW];
#pragma GCC unroll 8
    for (int r = 0; r < RW; ++r) wv[r] = V::template load_w_tail<D>(wr[r], i, rem);
#pragma GCC unroll 8
    for (int t = 0; t < RX; ++t) {
      const Vec xv = V::load_x_tail(x + static_cast<size_t>(t) * ldx + i, rem);
#pragma GCC unroll 8
      for (int r = 0; r < RW; ++r) acc[t][r] = V::fma(xv, wv[r], acc[t][r]);
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < RX; ++t)
#pragma GCC unroll 8
    for (int r = 0; r < RW; ++r) y[static_cast<size_t>(t) * ldy + r] = V::reduce(acc[t][r]);
}

template <class V, DType D>
using TileFn = void (*)(const float*, size_t, const std::byte*, size_t, int64_t, float*, size_t);

template <class V, DType D, int RX>
constexpr TileFn<V, D> tile_for(int rw) {
  switch (rw) {
    case 1:
      return &matmul_tile<V, D, RX, 1>;
    case 2:
      return &matmul_tile<V, D, RX, 2>;
    case 3:
      return &matmul_tile<V, D, RX, 3>;
    default:
      return &matmul_tile<V, D, RX, 4>;
  }
}

template <class V, DType D>
constexpr TileFn<V, D> tile_for(int rx, int rw) {
  switch (rx) {
    case 1:
      return tile_for<V, D, 1>(rw);
    case 2:
      return tile_for<V, D, 2>(rw);
    case 3:
      return tile_for<V, D, 3>(rw);
    default:
      return tile_for<V, D, 4>(rw);
  }
}

// Runs the tiles of X rows [t0, t1) x W rows [n0, n1), X tiles outer when x_outer (the X tile
// then stays in L1 while the W tiles come from L2), else W tiles outer (each W tile read once).
template <class V, DType D>
void run_tiles(const MatmulArgs& a, int64_t t0, int64_t t1, int64_t n0, int64_t n1, bool x_outer) {
  const size_t row_bytes = dtype_row_bytes(D, a.k);
  const auto* w = static_cast<const std::byte*>(a.w);
  const TileFn<V, D> full = tile_for<V, D>(kTileRowsX, kTileRowsW);
  auto one = [&](int64_t t, int64_t n) {
    const int rx = static_cast<int>(t1 - t < kTileRowsX ? t1 - t : kTileRowsX);
    const int rw = static_cast<int>(n1 - n < kTileRowsW ? n1 - n : kTileRowsW);
    const TileFn<V, D> fn = rx == kTileRowsX && rw == kTileRowsW ? full : tile_for<V, D>(rx, rw);
    fn(a.x + static_cast<size_t>(t) * a.ldx, a.ldx, w + static_cast<size_t>(n) * row_bytes,
       row_bytes, a.k, a.y + static_cast<size_t>(t) * a.ldy + n, a.ldy);
  };
  if (x_outer) {
    for (int64_t t = t0; t < t1; t += kTileRowsX)
      for (int64_t n = n0; n < n1; n += kTileRowsW) one(t, n);
  } else {
    for (int64_t n = n0; n < n1; n += kTileRowsW)
      for (int64_t t = t0; t < t1; t += kTileRowsX) one(t, n);
  }
}

// Columns [n0, n1) for all rows. Few rows (decode): each W tile is streamed from memory once
// and applied to every row. Many rows (prefill): X in L2-sized row blocks, W in L2-sized
// panels, X tiles outer within a panel. Neither choice changes any element's arithmetic.
template <class V, DType D>
void matmul_range_tiled(const MatmulArgs& a, int64_t n0, int64_t n1) {
  if (a.t <= 2 * kTileRowsX) return run_tiles<V, D>(a, 0, a.t, n0, n1, false);
  const size_t row_bytes = dtype_row_bytes(D, a.k);
  int64_t block = static_cast<int64_t>(kXBlockBytes / (static_cast<size_t>(a.k) * sizeof(float)));
  block = block < kTileRowsX ? kTileRowsX : block - block % kTileRowsX;
  int64_t panel = static_cast<int64_t>(kWPanelBytes / row_bytes);
  panel = panel < kTileRowsW ? kTileRowsW : panel - panel % kTileRowsW;
  for (int64_t t0 = 0; t0 < a.t; t0 += block) {
    const int64_t t1 = t0 + block < a.t ? t0 + block : a.t;
    for (int64_t p0 = n0; p0 < n1; p0 += panel) {
      run_tiles<V, D>(a, t0, t1, p0, p0 + panel < n1 ? p0 + panel : n1, true);
    }
  }
}

template <class V>
void matmul_range_any(const MatmulArgs& a, int64_t n0, int64_t n1) {
  switch (a.w_dtype) {
    case DType::kBF16:
      return matmul_range_tiled<V, DType::kBF16>(a, n0, n1);
    case DType::kF16:
      return matmul_range_tiled<V, DType::kF16>(a, n0, n1);
    default:
      return matmul_range_tiled<V, DType::kF32>(a, n0, n1);
  }
}

template <class V>
float dot_f32_any(const float* a, const float* b, int64_t n) {
  float out = 0.0f;
  matmul_tile<V, DType::kF32, 1, 1>(a, 0, reinterpret_cast<const std::byte*>(b), 0, n, &out, 0);
  return out;
}

}  // namespace gemmaserve::cpu::detail
