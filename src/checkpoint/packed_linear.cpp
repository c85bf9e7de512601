#include "checkpoint/packed_linear.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <utility>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/quant.h"

namespace gemmaserve {
namespace {

constexpr int64_t kBlock = 32;  // elements per Q8_0 / Q4_0 block

// Rows decoded at a time: about 1 MiB of codes, so a tile stays in cache while it is converted.
int64_t tile_rows(int64_t cols) {
  return std::clamp<int64_t>((int64_t{1} << 20) / std::max<int64_t>(cols, 1), 8, 256);
}

// Decoded rows of a module, one tile at a time.
class Tiles {
 public:
  Tiles(const PackedLinear& m, bool with_codes)
      : m_(m),
        tile_(std::min(tile_rows(m.cols()), std::max<int64_t>(m.rows(), 1))),
        codes_(with_codes ? static_cast<size_t>(tile_ * m.cols()) : 0),
        scales_(static_cast<size_t>(tile_ * m.groups())),
        zeros_(static_cast<size_t>(tile_ * m.groups())) {}

  int64_t size() const { return tile_; }

  // Decodes rows [n0, n0 + count), count <= size(); InputError for a scale that is not finite.
  void load(int64_t n0, int64_t count) {
    m_.decode_rows(n0, count, codes_.empty() ? nullptr : codes_.data(), scales_.data(),
                   zeros_.data());
    const int64_t G = m_.groups();
    for (int64_t i = 0; i < count * G; ++i) {
      if (!std::isfinite(scales_[static_cast<size_t>(i)])) {
        throw InputError(m_.file() + ": '" + m_.module() + "' has a scale that is not finite (" +
                         std::to_string(scales_[static_cast<size_t>(i)]) + ") at output row " +
                         std::to_string(n0 + i / G) + ", group " + std::to_string(i % G));
      }
    }
  }

  const uint8_t* codes(int64_t r) const { return codes_.data() + r * m_.cols(); }
  const float* scales(int64_t r) const { return scales_.data() + r * m_.groups(); }
  const int32_t* zeros(int64_t r) const { return zeros_.data() + r * m_.groups(); }

 private:
  const PackedLinear& m_;
  int64_t tile_;
  std::vector<uint8_t> codes_;
  std::vector<float> scales_;
  std::vector<int32_t> zeros_;
};

// Calls fn(n, tile, r) for every row n, where r is its index in the loaded tile.
template <typename Fn>
void for_each_row(const PackedLinear& m, bool with_codes, Fn&& fn) {
  Tiles tiles(m, with_codes);
  for (int64_t n0 = 0; n0 < m.rows(); n0 += tiles.size()) {
    const int64_t count = std::min(tiles.size(), m.rows() - n0);
    tiles.load(n0, count);
    for (int64_t r = 0; r < count; ++r) fn(n0 + r, tiles, r);
  }
}

void row_f32(const Tiles& t, int64_t r, const int32_t* gidx, int64_t cols, float* dst) {
  const uint8_t* q = t.codes(r);
  const float* s = t.scales(r);
  const int32_t* z = t.zeros(r);
  for (int64_t k = 0; k < cols; ++k) {
    const int32_t g = gidx[k];
    dst[k] = s[g] * static_cast<float>(static_cast<int32_t>(q[k]) - z[g]);
  }
}

std::shared_ptr<std::byte[]> allocate(size_t nbytes) {
  return std::make_unique_for_overwrite<std::byte[]>(std::max<size_t>(nbytes, 1));
}

// Why 32-column blocks are not each inside one group ("" when they are).
std::string block_group_problem(const std::vector<int32_t>& gidx) {
  const bool ordered = std::is_sorted(gidx.begin(), gidx.end());
  for (size_t b = 0; b < gidx.size(); b += kBlock) {
    for (size_t i = b + 1; i < b + kBlock; ++i) {
      if (gidx[i] != gidx[b]) {
        return ordered ? "groups narrower than 32 columns split 32-column blocks"
                       : "act-order g_idx mixes groups within 32-column blocks";
      }
    }
  }
  return "";
}

bool scales_f16_exact(const PackedLinear& m) {
  bool exact = true;
  for_each_row(m, false, [&](int64_t, const Tiles& t, int64_t r) {
    const float* s = t.scales(r);
    for (int64_t g = 0; g < m.groups() && exact; ++g) exact = f16_to_f32(f32_to_f16(s[g])) == s[g];
  });
  return exact;
}

// Q8_0 blocks d = f16(s), q = code - z; false (dst partly written) when some q - z leaves int8
// or a scale leaves f16's range.
// `order` (nullptr = stored order): output column j is input column order[j].
bool write_q8_0_copy(const PackedLinear& m, const std::vector<int32_t>& gidx, const int32_t* order,
                     std::byte* dst, int32_t* lo, int32_t* hi) {
  const int64_t K = m.cols();
  const size_t row_bytes = dtype_row_bytes(DType::kQ8_0, K);
  bool fits = true;
  *lo = 0;
  *hi = 0;
  Tiles tiles(m, true);
  for (int64_t n0 = 0; n0 < m.rows() && fits; n0 += tiles.size()) {
    const int64_t count = std::min(tiles.size(), m.rows() - n0);
    tiles.load(n0, count);
    for (int64_t r = 0; r < count && fits; ++r) {
      const uint8_t* q = tiles.codes(r);
      const float* s = tiles.scales(r);
      const int32_t* z = tiles.zeros(r);
      std::byte* out = dst + static_cast<size_t>(n0 + r) * row_bytes;
      for (int64_t b = 0; b < K; b += kBlock, out += cpu::kQ8_0BlockBytes) {
        const auto column = [&](int64_t j) { return order ? order[j] : j; };
        const int32_t g = gidx[static_cast<size_t>(column(b))];
        const uint16_t d = f32_to_f16(s[g]);
        if (!std::isfinite(f16_to_f32(d))) return false;
        std::memcpy(out, &d, 2);
        auto* qo = reinterpret_cast<int8_t*>(out + 2);
        for (int64_t i = 0; i < kBlock; ++i) {
          const int32_t v = static_cast<int32_t>(q[column(b + i)]) - z[g];
          *lo = std::min(*lo, v);
          *hi = std::max(*hi, v);
          qo[i] = static_cast<int8_t>(v);
        }
        if (*lo < -128 || *hi > 127) fits = false;
      }
    }
  }
  return fits;
}

// Q4_0 blocks holding the same d and integers as Q8_0 ones whose integers lie in [-8, 7].
void repack_q8_0_as_q4_0(const std::byte* src, std::byte* dst, size_t blocks) {
  for (size_t b = 0; b < blocks; ++b, src += cpu::kQ8_0BlockBytes, dst += cpu::kQ4_0BlockBytes) {
    std::memcpy(dst, src, 2);
    const auto* q = reinterpret_cast<const int8_t*>(src + 2);
    auto* qs = reinterpret_cast<uint8_t*>(dst + 2);
    for (int i = 0; i < 16; ++i) {
      qs[i] = static_cast<uint8_t>((q[i] + 8) | ((q[i + 16] + 8) << 4));
    }
  }
}

// max |w' - w| / max |w| between the module's exact values and `data` (rows of `dtype`).
double max_rel_error(const PackedLinear& m, const std::vector<int32_t>& gidx, const int32_t* order,
                     DType dtype, const std::byte* data) {
  const int64_t K = m.cols();
  const size_t row_bytes = dtype_row_bytes(dtype, K);
  std::vector<float> exact(static_cast<size_t>(K)), got(static_cast<size_t>(K));
  double max_err = 0.0, max_abs = 0.0;
  for_each_row(m, true, [&](int64_t n, const Tiles& t, int64_t r) {
    row_f32(t, r, gidx.data(), K, exact.data());
    cpu::dequantize_row(dtype, data + static_cast<size_t>(n) * row_bytes, got.data(), K);
    for (int64_t k = 0; k < K; ++k) {
      const double x = exact[static_cast<size_t>(order ? order[k] : k)];
      max_abs = std::max(max_abs, std::fabs(x));
      max_err = std::max(max_err, std::fabs(got[static_cast<size_t>(k)] - x));
    }
  });
  return max_abs > 0 ? max_err / max_abs : 0.0;
}

}  // namespace

PackedLinear::PackedLinear(std::string module, std::string file, int64_t rows, int64_t cols,
                           int bits, int64_t groups)
    : module_(std::move(module)),
      file_(std::move(file)),
      rows_(rows),
      cols_(cols),
      bits_(bits),
      groups_(groups) {}

void PackedLinear::unpack_f32(float* dst) const {
  std::vector<int32_t> gidx(static_cast<size_t>(cols_));
  group_index(gidx.data());
  for_each_row(*this, true, [&](int64_t n, const Tiles& t, int64_t r) {
    row_f32(t, r, gidx.data(), cols_, dst + n * cols_);
  });
}

ConvertedLinear PackedLinear::convert(bool as_f32, bool may_permute) const {
  ConvertedLinear out;
  const size_t N = static_cast<size_t>(rows_), K = static_cast<size_t>(cols_);
  if (cols_ % kBlock != 0 || as_f32) {
    out.dtype = DType::kF32;
    out.reason = as_f32 ? "F32 asked for"
                        : "row length " + std::to_string(cols_) + " is not a multiple of 32";
    out.nbytes = N * K * sizeof(float);
    out.data = allocate(out.nbytes);
    unpack_f32(reinterpret_cast<float*>(out.data.get()));
    return out;
  }
  std::vector<int32_t> gidx(K);
  group_index(gidx.data());
  out.reason = block_group_problem(gidx);
  std::shared_ptr<int32_t[]> order;
  if (!out.reason.empty() && may_permute && !std::is_sorted(gidx.begin(), gidx.end())) {
    // Act-order: sorted by group (stably), the columns may fill whole blocks per group.
    order = std::make_unique_for_overwrite<int32_t[]>(K);
    std::iota(order.get(), order.get() + K, 0);
    std::stable_sort(order.get(), order.get() + K,
                     [&](int32_t a, int32_t b) { return gidx[a] < gidx[b]; });
    std::vector<int32_t> sorted(K);
    for (size_t j = 0; j < K; ++j) sorted[j] = gidx[static_cast<size_t>(order[j])];
    if (block_group_problem(sorted).empty()) {
      out.reason.clear();
    } else {
      order.reset();
    }
  }
  const size_t q8_bytes = N * dtype_row_bytes(DType::kQ8_0, cols_);
  std::shared_ptr<std::byte[]> q8 = allocate(q8_bytes);
  if (out.reason.empty()) {
    // A scale that is no f16 value is rounded to one: its group's weights move by at most
    // 2^-11 of themselves (far less than re-rounding moves them), and the module keeps its size.
    const bool f16_scales = scales_f16_exact(*this);
    int32_t lo = 0, hi = 0;
    if (write_q8_0_copy(*this, gidx, order.get(), q8.get(), &lo, &hi)) {
      out.input_perm = order;
      if (lo >= -8 && hi <= 7) {
        out.dtype = DType::kQ4_0;
        out.nbytes = N * dtype_row_bytes(DType::kQ4_0, cols_);
        out.data = allocate(out.nbytes);
        repack_q8_0_as_q4_0(q8.get(), out.data.get(), N * K / kBlock);
      } else {
        out.dtype = DType::kQ8_0;
        out.nbytes = q8_bytes;
        out.data = std::move(q8);
      }
      if (!f16_scales) {
        out.exact = false;
        out.reason = "scales rounded to f16";
        out.max_rel_error = max_rel_error(*this, gidx, order.get(), out.dtype, out.data.get());
      }
      return out;
    }
    out.reason = f16_scales ? "q - zero point outside [-128, 127]" : "scales beyond f16's range";
    if (order) out.reason += " (act-order)";
  }
  // Re-rounded: the exact f32 rows through the project's own Q8_0 quantizer.
  out.dtype = DType::kQ8_0;
  out.exact = false;
  out.nbytes = q8_bytes;
  out.data = std::move(q8);
  std::vector<float> row(K), back(K);
  const size_t row_bytes = dtype_row_bytes(DType::kQ8_0, cols_);
  double max_err = 0.0, max_abs = 0.0;
  for_each_row(*this, true, [&](int64_t n, const Tiles& t, int64_t r) {
    row_f32(t, r, gidx.data(), cols_, row.data());
    std::byte* dst = out.data.get() + static_cast<size_t>(n) * row_bytes;
    cpu::quantize_row(DType::kQ8_0, row.data(), dst, cols_);
    cpu::dequantize_row(DType::kQ8_0, dst, back.data(), cols_);
    for (size_t k = 0; k < K; ++k) {
      max_abs = std::max(max_abs, std::fabs(static_cast<double>(row[k])));
      max_err = std::max(max_err, std::fabs(static_cast<double>(back[k]) - row[k]));
    }
  });
  out.max_rel_error = max_abs > 0 ? max_err / max_abs : 0.0;
  return out;
}

}  // namespace gemmaserve
