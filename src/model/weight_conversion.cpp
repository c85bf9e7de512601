#include "model/weight_conversion.h"

#include <algorithm>
#include <cstdio>

#include "core/logging.h"
#include "kernels/cpu/quant.h"

namespace gemmaserve {

WeightMatrix convert_for_kernels(const TensorView& v, int64_t rows, int64_t cols,
                                 std::vector<std::shared_ptr<const void>>* owned, ThreadPool* pool,
                                 WeightConversionTally* tally) {
  const DType target = cols % dtype_block_elems(DType::kQ8_0) == 0 ? DType::kQ8_0 : DType::kF32;
  const size_t src_row = dtype_row_bytes(v.dtype, cols);
  const size_t dst_row = target == DType::kF32 ? static_cast<size_t>(cols) * sizeof(float)
                                               : dtype_row_bytes(target, cols);
  auto buf = std::make_shared<std::vector<std::byte>>(dst_row * static_cast<size_t>(rows));
  auto convert = [&](size_t begin, size_t end) {
    std::vector<float> row(static_cast<size_t>(cols));
    for (size_t r = begin; r < end; ++r) {
      const std::byte* src = v.data + r * src_row;
      std::byte* dst = buf->data() + r * dst_row;
      if (target == DType::kF32) {
        cpu::dequantize_row(v.dtype, src, reinterpret_cast<float*>(dst), cols);
      } else {
        cpu::dequantize_row(v.dtype, src, row.data(), cols);
        cpu::quantize_row(target, row.data(), dst, cols);
      }
    }
  };
  if (pool) {
    pool->parallel_for_grain(static_cast<size_t>(rows), 64,
                             [&](size_t b, size_t e) { convert(b, e); });
  } else {
    convert(0, static_cast<size_t>(rows));
  }
  if (tally) {
    WeightConversionTally::Entry& e = tally->by_type[{v.dtype, target}];
    if (e.tensors++ == 0) e.example = v.name;
    e.target = target;
    e.bytes_before += v.nbytes;
    e.bytes_after += buf->size();
  }
  WeightMatrix m;
  m.name = v.name;
  m.dtype = target;
  m.data = buf->data();
  m.rows = rows;
  m.cols = cols;
  owned->push_back(std::move(buf));
  return m;
}

void log_weight_conversions(const WeightConversionTally& tally) {
  for (const auto& [types, e] : tally.by_type) {
    const double before = static_cast<double>(e.bytes_before) / (1 << 20);
    const double after = static_cast<double>(e.bytes_after) / (1 << 20);
    char sizes[128];
    std::snprintf(sizes, sizeof sizes, "%.1f MiB -> %.1f MiB, %+.0f%%", before, after,
                  before > 0 ? 100.0 * (after - before) / before : 0.0);
    GS_LOG_INFO << "converted at load (no CPU kernel for " << dtype_name(types.first)
                << "): " << e.tensors << " tensors, e.g. '" << e.example << "', to "
                << dtype_name(types.second) << " (" << sizes << "); "
                << (types.second == DType::kF32
                        ? "exact"
                        : "each value re-rounded to 8 bits per block of 32, within 0.4% of the "
                          "block's largest magnitude");
  }
}

}  // namespace gemmaserve
