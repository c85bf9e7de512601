// A linear layer's weight as GPTQ, AWQ and compressed-tensors store it: integer codes q in
// [0, 2^bits) per element and, per output row and input group, a scale s and a zero point z, so
// w[n][k] = s[n][g(k)] * (q[n][k] - z[n][g(k)]). Each method's file (gptq.h, awq.h,
// compressed_tensors.h) decodes its own bit layout through decode_rows; this class turns any of
// them into exact f32 values or into a kernel dtype (core/dtype.h), never through bf16.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/dtype.h"

namespace gemmaserve {

// One packed module converted to the dtype the kernels run.
struct ConvertedLinear {
  DType dtype = DType::kF32;
  // True when dequantizing `data` gives every s * (q - z) bit for bit (Q4_0 / Q8_0 holding the
  // codes and scales as they are, or F32); false for Q8_0 re-rounded by cpu::quantize_row and
  // for copies whose scales were rounded to f16.
  bool exact = true;
  // Why the module is not a Q4_0 / Q8_0 copy of its codes ("" when it is).
  std::string reason;
  // Not exact only: max |w' - w| / max |w| over the module.
  double max_rel_error = 0.0;
  std::shared_ptr<std::byte[]> data;  // rows() rows of dtype, row after row
  size_t nbytes = 0;
  // Act-order modules copied with their columns sorted by group: column j of `data` is input
  // column input_perm[j] (cols() entries); nullptr when the columns are in stored order.
  std::shared_ptr<int32_t[]> input_perm;
};

class PackedLinear {
 public:
  // `module` is the HF module name ("model.language_model.layers.0.mlp.up_proj"), `file` the
  // safetensors file holding it (both for messages); rows = output features N, cols = input
  // features K, groups = scale groups G along K.
  PackedLinear(std::string module, std::string file, int64_t rows, int64_t cols, int bits,
               int64_t groups);
  virtual ~PackedLinear() = default;
  PackedLinear(const PackedLinear&) = delete;
  PackedLinear& operator=(const PackedLinear&) = delete;

  const std::string& module() const { return module_; }
  const std::string& file() const { return file_; }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  int bits() const { return bits_; }
  int64_t groups() const { return groups_; }

  // Bytes of the stored tensors (codes, scales, zero points, g_idx) this module reads.
  virtual size_t packed_bytes() const = 0;
  // The group of every input column (cols() entries, each in [0, groups())).
  virtual void group_index(int32_t* dst) const = 0;
  // Rows [n0, n0 + count): codes [count, cols()] (skipped when nullptr), scales and zero points
  // [count, groups()], each exactly as stored (zero points already in q's unsigned range).
  virtual void decode_rows(int64_t n0, int64_t count, uint8_t* codes, float* scales,
                           int32_t* zeros) const = 0;

  // Every weight as f32: dst holds rows() x cols() values; exact (each is one f32 product of a
  // stored scale and a small integer). InputError for a scale that is not finite.
  void unpack_f32(float* dst) const;

  // The dtype the kernels run this module in: rows that are not whole 32-element blocks -> F32
  // (exact); every 32-column block inside one group, every scale exact in f16 and q - z within
  // [-8, 7] -> Q4_0, within [-128, 127] -> Q8_0 (both exact: d = s, the integers as they are;
  // with scales that are no f16 values the same, d rounded to f16, not exact); otherwise Q8_0
  // re-rounded from the exact f32 values by cpu::quantize_row. `as_f32`: F32 always (exact, 4
  // bytes a weight: for checking a checkpoint against a float reference). `may_permute`: an
  // act-order module whose groups fill whole 32-column blocks once its columns are sorted by
  // group is copied in that order, with input_perm set (the caller gathers X to match), as
  // vLLM's GPTQ kernels do; without it such a module is re-rounded.
  ConvertedLinear convert(bool as_f32 = false, bool may_permute = false) const;

 private:
  std::string module_, file_;
  int64_t rows_, cols_;
  int bits_;
  int64_t groups_;
};

}  // namespace gemmaserve
