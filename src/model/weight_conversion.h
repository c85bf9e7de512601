// Block types the CPU kernels do not run (GGUF's Q6_K, Q5_K, IQ2_XXS, ...; core/dtype.h's
// dtype_is_storage_only) become Q8_0 at load: dequantized exactly as ggml does, then re-rounded
// to 8 bits per block of 32 (rows that are not whole blocks become exact F32). The tally says
// what was converted so the loader can log the precision kept and the memory it costs.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "core/dtype.h"
#include "core/thread_pool.h"
#include "model/weights.h"

namespace gemmaserve {

struct WeightConversionTally {
  struct Entry {
    int tensors = 0;
    size_t bytes_before = 0, bytes_after = 0;
    DType target = DType::kQ8_0;
    std::string example;  // the first tensor converted
  };
  std::map<std::pair<DType, DType>, Entry> by_type;  // (stored, target)
  bool empty() const { return by_type.empty(); }
};

// A weight matrix of `rows` x `cols` elements converted from the storage-only block type of `v`;
// the new buffer is kept alive by `owned`. Parallel over rows when `pool` is set.
WeightMatrix convert_for_kernels(const TensorView& v, int64_t rows, int64_t cols,
                                 std::vector<std::shared_ptr<const void>>* owned, ThreadPool* pool,
                                 WeightConversionTally* tally);

// One INFO line per (stored, target) pair: counts, bytes before and after, precision kept.
void log_weight_conversions(const WeightConversionTally& tally);

}  // namespace gemmaserve
