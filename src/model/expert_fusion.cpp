#include "model/expert_fusion.h"

#include <algorithm>
#include <cstring>

#include "kernels/cpu/quant.h"

namespace gemmaserve {
namespace {

// One dtype all parts convert to exactly.
DType common_dtype(const std::vector<WeightMatrix>& parts) {
  const DType first = parts.front().dtype;
  bool same = true, blocks_of_32 = true;
  for (const WeightMatrix& m : parts) {
    same = same && m.dtype == first;
    blocks_of_32 = blocks_of_32 && (m.dtype == DType::kQ8_0 || m.dtype == DType::kQ4_0);
  }
  if (same) return first;
  return blocks_of_32 ? DType::kQ8_0 : DType::kF32;
}

// Q8_0 blocks holding a Q4_0 row's scales and integers (nibble - 8).
void q4_0_row_as_q8_0(const std::byte* src, std::byte* dst, int64_t cols) {
  for (int64_t b = 0; b < cols / cpu::kQ8BlockElems; ++b) {
    const std::byte* in = src + b * cpu::kQ4_0BlockBytes;
    std::byte* out = dst + b * cpu::kQ8_0BlockBytes;
    std::memcpy(out, in, 2);
    const auto* qs = reinterpret_cast<const uint8_t*>(in + 2);
    auto* q = reinterpret_cast<int8_t*>(out + 2);
    for (int i = 0; i < 16; ++i) {
      q[i] = static_cast<int8_t>((qs[i] & 15) - 8);
      q[i + 16] = static_cast<int8_t>((qs[i] >> 4) - 8);
    }
  }
}

// Appends m's rows in `dtype` at dst.
void copy_rows(const WeightMatrix& m, DType dtype, std::byte* dst) {
  const size_t src_row = dtype_row_bytes(m.dtype, m.cols), dst_row = dtype_row_bytes(dtype, m.cols);
  const auto* src = static_cast<const std::byte*>(m.data);
  if (m.dtype == dtype) {
    std::memcpy(dst, src, src_row * static_cast<size_t>(m.rows));
    return;
  }
  for (int64_t r = 0; r < m.rows; ++r, src += src_row, dst += dst_row) {
    if (dtype == DType::kQ8_0) {
      q4_0_row_as_q8_0(src, dst, m.cols);
    } else if (dtype_is_quantized(m.dtype)) {
      cpu::dequantize_row(m.dtype, src, reinterpret_cast<float*>(dst), m.cols);
    } else {
      convert_to_f32(m.dtype, src, reinterpret_cast<float*>(dst), static_cast<size_t>(m.cols));
    }
  }
}

WeightMatrix fuse(const std::string& name, const std::vector<WeightMatrix>& parts,
                  std::vector<std::shared_ptr<const void>>* owned) {
  WeightMatrix out;
  out.name = name;
  out.dtype = common_dtype(parts);
  out.cols = parts.front().cols;
  for (const WeightMatrix& m : parts) out.rows += m.rows;
  const size_t row = dtype_row_bytes(out.dtype, out.cols);
  std::shared_ptr<std::byte[]> buf =
      std::make_unique_for_overwrite<std::byte[]>(std::max<size_t>(row * out.rows, 1));
  std::byte* dst = buf.get();
  for (const WeightMatrix& m : parts) {
    copy_rows(m, out.dtype, dst);
    dst += row * static_cast<size_t>(m.rows);
  }
  out.data = buf.get();
  owned->push_back(std::move(buf));
  return out;
}

}  // namespace

FusedExperts fuse_experts(TensorBinder& b, const std::string& layer, int64_t experts,
                          int64_t intermediate, int64_t hidden,
                          std::vector<std::shared_ptr<const void>>* owned,
                          std::map<std::string, std::shared_ptr<const void>>* built) {
  std::vector<WeightMatrix> gate_up, down;
  for (int64_t e = 0; e < experts; ++e) {
    const std::string p = layer + "experts." + std::to_string(e) + ".";
    gate_up.push_back(b.matrix(p + "gate_proj.weight", {intermediate, hidden}));
    gate_up.push_back(b.matrix(p + "up_proj.weight", {intermediate, hidden}));
    down.push_back(b.matrix(p + "down_proj.weight", {hidden, intermediate}));
  }
  // The names the model's own tensors would have: the expert's prefix without "0.gate_proj...".
  const std::string& first = gate_up.front().name;
  const std::string prefix =
      first.substr(0, first.size() - std::string("0.gate_proj.weight").size());
  FusedExperts f{fuse(prefix + "gate_up_proj", gate_up, owned),
                 fuse(prefix + "down_proj", down, owned)};
  if (built) {
    for (const auto* parts : {&gate_up, &down}) {
      for (const WeightMatrix& m : *parts) built->erase(m.name);
    }
  }
  return f;
}

}  // namespace gemmaserve
