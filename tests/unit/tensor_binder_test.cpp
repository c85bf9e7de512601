// TensorBinder over tensors listed in a block-quantized dtype (a packed checkpoint's converted
// modules, GGUF tensors) and the fusion of per-expert MoE modules (model/expert_fusion.h).
#include "model/tensor_binder.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "kernels/cpu/quant.h"
#include "model/expert_fusion.h"
#include "test_support.h"

namespace gemmaserve {
namespace {

using testing::input_error_of;

// Tensors held in memory, listed as a checkpoint lists them.
class MemoryCheckpoint final : public Checkpoint {
 public:
  std::string_view format() const override { return "safetensors"; }
  const std::filesystem::path& path() const override { return path_; }
  const nlohmann::json& config() const override { return config_; }
  const std::string& config_source() const override { return source_; }
  const std::map<std::string, const CheckpointTensor*>& tensors() const override { return index_; }

  void add(const std::string& name, DType dtype, std::vector<int64_t> shape,
           std::vector<std::byte> bytes) {
    data_.push_back(std::make_unique<std::vector<std::byte>>(std::move(bytes)));
    auto t = std::make_unique<CheckpointTensor>();
    t->name = name;
    t->dtype = dtype;
    t->shape = std::move(shape);
    t->data = data_.back()->data();
    t->nbytes = data_.back()->size();
    t->file = "mem.safetensors";
    index_[name] = t.get();
    views_.push_back(std::move(t));
  }

 private:
  std::filesystem::path path_ = "mem";
  nlohmann::json config_ = nlohmann::json::object();
  std::string source_ = "mem/config.json";
  std::vector<std::unique_ptr<std::vector<std::byte>>> data_;
  std::vector<std::unique_ptr<CheckpointTensor>> views_;
  std::map<std::string, const CheckpointTensor*> index_;
};

// Rows of `dtype` quantized from values v(r, c) = (r + 1) * (c % 7 - 3) / 8.
std::vector<std::byte> rows_of(DType dtype, int64_t rows, int64_t cols, float scale = 1.0f) {
  std::vector<float> x(static_cast<size_t>(cols));
  const size_t row = dtype_is_quantized(dtype) ? dtype_row_bytes(dtype, cols)
                                               : static_cast<size_t>(cols) * dtype_size(dtype);
  std::vector<std::byte> out(row * static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      x[static_cast<size_t>(c)] = scale * static_cast<float>((r + 1) * (c % 7 - 3)) / 8.0f;
    }
    std::byte* dst = out.data() + static_cast<size_t>(r) * row;
    if (dtype_is_quantized(dtype)) {
      cpu::quantize_row(dtype, x.data(), dst, cols);
    } else if (dtype == DType::kBF16) {
      for (int64_t c = 0; c < cols; ++c) {
        const uint16_t h = f32_to_bf16(x[static_cast<size_t>(c)]);
        std::memcpy(dst + 2 * c, &h, 2);
      }
    } else {
      std::memcpy(dst, x.data(), row);
    }
  }
  return out;
}

std::vector<float> to_f32(const WeightMatrix& m) {
  std::vector<float> out(static_cast<size_t>(m.rows * m.cols));
  const auto* src = static_cast<const std::byte*>(m.data);
  for (int64_t r = 0; r < m.rows; ++r) {
    float* dst = out.data() + r * m.cols;
    if (dtype_is_quantized(m.dtype)) {
      cpu::dequantize_row(m.dtype, src + r * dtype_row_bytes(m.dtype, m.cols), dst, m.cols);
    } else {
      convert_to_f32(m.dtype, src + r * m.cols * dtype_size(m.dtype), dst,
                     static_cast<size_t>(m.cols));
    }
  }
  return out;
}

TEST(TensorBinder, BindsATensorListedInABlockQuantizedDtype) {
  MemoryCheckpoint ckpt;
  ckpt.add("p.w", DType::kQ8_0, {4, 64}, rows_of(DType::kQ8_0, 4, 64));
  ckpt.add("p.k", DType::kQ4_K, {2, 256}, rows_of(DType::kQ4_K, 2, 256));
  ckpt.add("p.short", DType::kQ4_0, {4, 64}, std::vector<std::byte>(4 * 36 - 1));
  std::vector<std::shared_ptr<const void>> owned;
  TensorBinder b(ckpt, "p.", &owned);
  const WeightMatrix w = b.matrix("w", {4, 64});
  EXPECT_EQ(w.dtype, DType::kQ8_0);
  EXPECT_EQ(w.rows, 4);
  EXPECT_EQ(w.cols, 64);
  EXPECT_EQ(w.data, ckpt.find("p.w")->data);
  EXPECT_EQ(b.matrix("k", {2, 256}).dtype, DType::kQ4_K);
  EXPECT_TRUE(owned.empty());
  EXPECT_EQ(input_error_of([&] {
              b.matrix("w", {4, 32});
            }),
            "mem.safetensors: tensor 'p.w' has shape [4, 64], expected [4, 32]");
  EXPECT_EQ(input_error_of([&] {
              b.matrix("short", {4, 64});
            }),
            "mem.safetensors: tensor 'p.short' of shape [4, 64] is not whole Q4_0 rows (143 "
            "bytes)");
  EXPECT_EQ(input_error_of([&] { b.vector("w", 256); }),
            "mem.safetensors: tensor 'p.w' has shape [4, 64], expected [256]");
}

std::vector<std::byte> int32_bytes(const std::vector<int32_t>& v) {
  std::vector<std::byte> out(v.size() * sizeof(int32_t));
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

// An act-order module's column order ("X.input_perm", checkpoint/packed_checkpoint.h) binds with
// its weight; a tensor that is no permutation of the columns is refused by name.
TEST(TensorBinder, BindsTheInputPermutationOfAnActOrderModule) {
  std::vector<int32_t> perm(64);
  for (int32_t j = 0; j < 64; ++j) perm[static_cast<size_t>(j)] = 63 - j;
  MemoryCheckpoint ckpt;
  ckpt.add("p.a.weight", DType::kQ4_0, {4, 64}, rows_of(DType::kQ4_0, 4, 64));
  ckpt.add("p.a.input_perm", DType::kI32, {64}, int32_bytes(perm));
  ckpt.add("p.b.weight", DType::kQ4_0, {4, 64}, rows_of(DType::kQ4_0, 4, 64));
  perm[1] = 63;
  ckpt.add("p.b.input_perm", DType::kI32, {64}, int32_bytes(perm));
  ckpt.add("p.c.weight", DType::kQ4_0, {4, 64}, rows_of(DType::kQ4_0, 4, 64));
  ckpt.add("p.c.input_perm", DType::kI32, {32}, int32_bytes(std::vector<int32_t>(32)));
  std::vector<std::shared_ptr<const void>> owned;
  TensorBinder b(ckpt, "p.", &owned);
  const WeightMatrix a = b.matrix("a.weight", {4, 64});
  ASSERT_NE(a.x_perm(), nullptr);
  EXPECT_EQ(a.x_perm()[0], 63);
  EXPECT_TRUE(b.used().count("p.a.input_perm"));
  EXPECT_EQ(input_error_of([&] {
              b.matrix("b.weight", {4, 64});
            }),
            "mem.safetensors: tensor 'p.b.input_perm' is not a permutation of the columns");
  EXPECT_EQ(input_error_of([&] {
              b.matrix("c.weight", {4, 64});
            }),
            "mem.safetensors: tensor 'p.c.input_perm' must be I32 [64], found I32 [32]");
}

// Expert e's modules, gate and up [I, H], down [H, I], in the given dtypes.
void add_expert(MemoryCheckpoint& c, int e, DType gate, DType up, DType down, int64_t I,
                int64_t H) {
  const std::string p = "l.experts." + std::to_string(e) + ".";
  c.add(p + "gate_proj.weight", gate, {I, H}, rows_of(gate, I, H, 1.0f + e));
  c.add(p + "up_proj.weight", up, {I, H}, rows_of(up, I, H, -2.0f - e));
  c.add(p + "down_proj.weight", down, {H, I}, rows_of(down, H, I, 0.5f + e));
}

// The fused matrices hold each expert's gate rows, then its up rows, with the same values.
void expect_fused_values(const MemoryCheckpoint& c, const FusedExperts& f, int experts, int64_t I,
                         int64_t H) {
  std::vector<std::shared_ptr<const void>> owned;
  TensorBinder b(c, "l.experts.", &owned);
  const std::vector<float> gate_up = to_f32(f.gate_up), down = to_f32(f.down);
  for (int e = 0; e < experts; ++e) {
    const std::string p = std::to_string(e) + ".";
    const std::vector<float> g = to_f32(b.matrix(p + "gate_proj.weight", {I, H}));
    const std::vector<float> u = to_f32(b.matrix(p + "up_proj.weight", {I, H}));
    const std::vector<float> d = to_f32(b.matrix(p + "down_proj.weight", {H, I}));
    const size_t n = static_cast<size_t>(I * H);
    EXPECT_EQ(0, std::memcmp(gate_up.data() + 2 * e * n, g.data(), n * 4)) << e;
    EXPECT_EQ(0, std::memcmp(gate_up.data() + (2 * e + 1) * n, u.data(), n * 4)) << e;
    EXPECT_EQ(0, std::memcmp(down.data() + e * n, d.data(), n * 4)) << e;
  }
}

TEST(ExpertFusion, FusesPerExpertModulesExactlyInOneDtype) {
  const int64_t I = 32, H = 64;
  MemoryCheckpoint c;
  add_expert(c, 0, DType::kQ4_0, DType::kQ8_0, DType::kQ8_0, I, H);
  add_expert(c, 1, DType::kQ4_0, DType::kQ4_0, DType::kBF16, I, H);
  std::vector<std::shared_ptr<const void>> owned;
  std::map<std::string, std::shared_ptr<const void>> built = {
      {"l.experts.0.gate_proj.weight", nullptr}, {"l.other", nullptr}};
  TensorBinder b(c, "", &owned);
  const FusedExperts f = fuse_experts(b, "l.", 2, I, H, &owned, &built);
  EXPECT_EQ(f.gate_up.name, "l.experts.gate_up_proj");
  EXPECT_EQ(f.gate_up.dtype, DType::kQ8_0);  // Q4_0 and Q8_0: Q4_0 blocks become Q8_0 ones
  EXPECT_EQ(f.gate_up.rows, 2 * 2 * I);
  EXPECT_EQ(f.down.dtype, DType::kF32);  // Q8_0 and BF16
  EXPECT_EQ(f.down.rows, 2 * H);
  EXPECT_EQ(owned.size(), 2u);
  EXPECT_EQ(built.size(), 1u);  // the per-expert tensors' buffers are released
  EXPECT_TRUE(b.used().count("l.experts.1.down_proj.weight"));
  expect_fused_values(c, f, 2, I, H);

  MemoryCheckpoint same;
  add_expert(same, 0, DType::kQ4_0, DType::kQ4_0, DType::kQ4_0, I, H);
  add_expert(same, 1, DType::kQ4_0, DType::kQ4_0, DType::kQ4_0, I, H);
  TensorBinder bs(same, "", &owned);
  const FusedExperts g = fuse_experts(bs, "l.", 2, I, H, &owned, nullptr);
  EXPECT_EQ(g.gate_up.dtype, DType::kQ4_0);
  EXPECT_EQ(g.down.dtype, DType::kQ4_0);
  expect_fused_values(same, g, 2, I, H);

  EXPECT_EQ(input_error_of([&] { fuse_experts(bs, "l.", 3, I, H, &owned, nullptr); }),
            "mem: missing tensor 'l.experts.2.gate_proj.weight'");
}

}  // namespace
}  // namespace gemmaserve
