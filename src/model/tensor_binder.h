// Binding of checkpoint tensors to weights by name: shape and dtype checks with errors naming
// the file and tensor, and a record of the names used (so loaders can report the rest).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "core/dtype.h"
#include "core/error.h"
#include "model/weight_conversion.h"
#include "model/weights.h"

namespace gemmaserve {

// Binds tensors by name, checks shapes, and remembers which names were used.
class TensorBinder {
 public:
  // Copies of misaligned tensors are kept alive in `owned`.
  // `stored` names the tensors stored block-quantized (nullptr = none).
  TensorBinder(const Checkpoint& ckpt, std::string prefix,
               std::vector<std::shared_ptr<const void>>* owned,
               const std::map<std::string, DType>* stored = nullptr)
      : ckpt_(ckpt), prefix_(std::move(prefix)), owned_(owned), stored_(stored) {}

  // Storage-only block types (model/weight_conversion.h) convert through `pool`, counted in
  // `tally`; without this call they convert serially and uncounted.
  void convert_storage_types(ThreadPool* pool, WeightConversionTally* tally) {
    pool_ = pool;
    tally_ = tally;
  }

  const TensorView* find(const std::string& name) {
    const TensorView* v = ckpt_.find(prefix_ + name);
    if (v) used_.insert(v->name);
    return v;
  }

  const TensorView& require(const std::string& name) {
    const TensorView* v = find(name);
    if (!v) {
      throw InputError(ckpt_.path().string() + ": missing tensor '" + prefix_ + name + "'");
    }
    return *v;
  }

  static void check_shape(const TensorView& v, const std::vector<int64_t>& expected) {
    if (v.shape != expected) {
      TensorView want;
      want.shape = expected;
      throw InputError(v.file.string() + ": tensor '" + v.name + "' has shape " + v.shape_string() +
                       ", expected " + want.shape_string());
    }
  }

  static void check_float(const TensorView& v) {
    if (v.dtype != DType::kF32 && v.dtype != DType::kF16 && v.dtype != DType::kBF16) {
      throw InputError(v.file.string() + ": tensor '" + v.name + "' has unsupported dtype " +
                       dtype_name(v.dtype) + " (expected BF16, F16 or F32)");
    }
  }

  WeightMatrix matrix(const std::string& name, std::vector<int64_t> shape) {
    return bind_matrix(require(name), shape);
  }

  WeightMatrix optional_matrix(const std::string& name, std::vector<int64_t> shape) {
    const TensorView* v = find(name);
    return v ? bind_matrix(*v, shape) : WeightMatrix{};
  }

  // A float matrix, or one listed in a block-quantized dtype (Q8_0, Q4_0, Q4_K: a packed
  // checkpoint's converted module, a GGUF tensor) with its element shape [..., cols] and
  // rows of cols / block blocks.
  WeightMatrix bind_matrix(const TensorView& v, const std::vector<int64_t>& shape) {
    if (auto q = stored_type(v)) return quantized_matrix(v, *q, shape);
    check_shape(v, shape);
    if (dtype_is_quantized(v.dtype)) return with_input_perm(v, block_matrix(v));
    if (dtype_is_storage_only(v.dtype)) return converted(v);
    check_float(v);
    return as_matrix(v);
  }

  std::vector<float> vector(const std::string& name, int64_t n) {
    const TensorView& v = require(name);
    check_shape(v, {n});
    check_float(v);
    std::vector<float> out(static_cast<size_t>(n));
    convert_to_f32(v.dtype, aligned_data(v), out.data(), out.size());
    return out;
  }

  // A float tensor of any shape as f32 values, row-major (small tables such as position rows).
  std::vector<float> float_tensor(const std::string& name, const std::vector<int64_t>& shape) {
    const TensorView& v = require(name);
    check_shape(v, shape);
    check_float(v);
    std::vector<float> out(static_cast<size_t>(v.numel()));
    convert_to_f32(v.dtype, aligned_data(v), out.data(), out.size());
    return out;
  }

  // An integer index vector of n entries stored as I64 or I32 (e.g. a token permutation).
  std::vector<int32_t> index_vector(const std::string& name, int64_t n) {
    const TensorView& v = require(name);
    check_shape(v, {n});
    std::vector<int32_t> out(static_cast<size_t>(n));
    if (v.dtype == DType::kI32) {
      std::memcpy(out.data(), v.data, out.size() * sizeof(int32_t));
    } else if (v.dtype == DType::kI64) {
      for (size_t i = 0; i < out.size(); ++i) {
        int64_t x;
        std::memcpy(&x, static_cast<const std::byte*>(v.data) + i * sizeof(int64_t), sizeof x);
        if (x < INT32_MIN || x > INT32_MAX) {
          throw InputError(v.file.string() + ": tensor '" + v.name + "' holds " +
                           std::to_string(x) + " at index " + std::to_string(i) +
                           ", outside the 32-bit range");
        }
        out[i] = static_cast<int32_t>(x);
      }
    } else {
      throw InputError(v.file.string() + ": tensor '" + v.name + "' has unsupported dtype " +
                       dtype_name(v.dtype) + " (expected I64 or I32)");
    }
    return out;
  }

  // A one-element tensor stored as [1] or [] (a scalar buffer).
  std::optional<float> scalar(const std::string& name) {
    const TensorView* v = find(name);
    if (!v) return std::nullopt;
    if (v->numel() != 1 || v->shape.size() > 1) check_shape(*v, {1});
    check_float(*v);
    float x;
    convert_to_f32(v->dtype, aligned_data(*v), &x, 1);
    return x;
  }

  void mark_used(const std::string& name) {
    if (const TensorView* v = ckpt_.find(prefix_ + name)) used_.insert(v->name);
  }
  const std::set<std::string>& used() const { return used_; }

 private:
  // The tensor's data, or an aligned copy when the file places it at an address that is not
  // a multiple of its element size (legal in safetensors: the header need not be padded).
  const void* aligned_data(const TensorView& v) {
    // Block rows are read bytewise; element types must sit at a multiple of their size.
    if (dtype_block_elems(v.dtype) > 1) return v.data;
    if (reinterpret_cast<uintptr_t>(v.data) % dtype_size(v.dtype) == 0) return v.data;
    auto copy = std::make_shared<std::vector<uint64_t>>((v.nbytes + 7) / 8);
    std::memcpy(copy->data(), v.data, v.nbytes);
    owned_->push_back(copy);
    return copy->data();
  }

  WeightMatrix as_matrix(const TensorView& v) {
    WeightMatrix m;
    m.name = v.name;
    m.dtype = v.dtype;
    m.data = aligned_data(v);
    m.cols = v.shape.back();
    m.rows = v.numel() / std::max<int64_t>(m.cols, 1);
    return m;
  }

  WeightMatrix converted(const TensorView& v) {
    const int64_t cols = v.shape.back();
    return convert_for_kernels(v, v.numel() / std::max<int64_t>(cols, 1), cols, owned_, pool_,
                               tally_);
  }

  WeightMatrix block_matrix(const TensorView& v) {
    const int64_t cols = v.shape.empty() ? 0 : v.shape.back();
    const int64_t rows = cols > 0 ? v.numel() / cols : 0;
    if (cols <= 0 || cols % dtype_block_elems(v.dtype) != 0 ||
        v.nbytes != static_cast<size_t>(rows) * dtype_row_bytes(v.dtype, cols)) {
      throw InputError(v.file.string() + ": tensor '" + v.name + "' of shape " + v.shape_string() +
                       " is not whole " + dtype_name(v.dtype) + " rows (" +
                       std::to_string(v.nbytes) + " bytes)");
    }
    WeightMatrix m;
    m.name = v.name;
    m.dtype = v.dtype;
    m.data = v.data;  // blocks are read bytewise: no alignment needed
    m.cols = cols;
    m.rows = rows;
    return m;
  }

  // An act-order module converted with its columns sorted by group (checkpoint/packed_linear.h)
  // comes with "<module>.input_perm": a permutation of its columns, checked here.
  WeightMatrix with_input_perm(const TensorView& v, WeightMatrix m) {
    if (!v.name.ends_with(".weight")) return m;
    const TensorView* p = ckpt_.find(v.name.substr(0, v.name.size() - 6) + "input_perm");
    if (!p) return m;
    used_.insert(p->name);
    if (p->dtype != DType::kI32 || p->shape != std::vector<int64_t>{m.cols}) {
      throw InputError(p->file.string() + ": tensor '" + p->name + "' must be I32 [" +
                       std::to_string(m.cols) + "], found " + dtype_name(p->dtype) + " " +
                       p->shape_string());
    }
    auto perm = std::make_shared<std::vector<int32_t>>(static_cast<size_t>(m.cols));
    std::memcpy(perm->data(), p->data, perm->size() * sizeof(int32_t));
    std::vector<bool> seen(perm->size());
    for (const int32_t c : *perm) {
      if (c < 0 || c >= m.cols || seen[static_cast<size_t>(c)]) {
        throw InputError(p->file.string() + ": tensor '" + p->name +
                         "' is not a permutation of the columns");
      }
      seen[static_cast<size_t>(c)] = true;
    }
    m.input_perm = std::move(perm);
    return m;
  }

  std::optional<DType> stored_type(const TensorView& v) const {
    if (!stored_) return std::nullopt;
    auto it = stored_->find(v.name);
    if (it == stored_->end()) return std::nullopt;
    return it->second;
  }

  // A U8 tensor [rows..., row_bytes] holding rows of `type` blocks for logical shape `shape`.
  WeightMatrix quantized_matrix(const TensorView& v, DType type, std::vector<int64_t> shape) {
    const int64_t cols = shape.back();
    if (cols % dtype_block_elems(type) != 0) {
      throw InputError(v.file.string() + ": tensor '" + v.name + "' is marked " + dtype_name(type) +
                       " but its row length " + std::to_string(cols) +
                       " is not a multiple of the block size");
    }
    std::vector<int64_t> stored = shape;
    stored.back() = static_cast<int64_t>(dtype_row_bytes(type, cols));
    if (v.dtype != DType::kU8) {
      throw InputError(v.file.string() + ": quantized tensor '" + v.name + "' must be stored as " +
                       "U8, found " + dtype_name(v.dtype));
    }
    check_shape(v, stored);
    WeightMatrix m;
    m.name = v.name;
    m.dtype = type;
    m.data = v.data;
    m.cols = cols;
    m.rows = v.numel() / std::max<int64_t>(stored.back(), 1);
    return m;
  }

  const Checkpoint& ckpt_;
  std::string prefix_;
  std::vector<std::shared_ptr<const void>>* owned_;
  const std::map<std::string, DType>* stored_;
  std::set<std::string> used_;
  ThreadPool* pool_ = nullptr;
  WeightConversionTally* tally_ = nullptr;
};

}  // namespace gemmaserve
