// Teacher-forced quality of quantized models against their float weights: the golden fixture
// models (hidden 64: q8_0 / q4_0; q4_k needs rows of 256 so they stay float there) and a
// synthetic 256-wide model derived from the dense fixture (every type).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kernels/cpu/interleave.h"
#include "model/gemma4_model.h"
#include "model/kv_cache.h"
#include "model/quantize_quality.h"
#include "model/test_model_presets.h"
#include "model/weights.h"
#include "test_support.h"
#include "wide_test_model.h"

namespace gemmaserve {
namespace {

namespace fs = std::filesystem;

QuantQualityReport measure(const fs::path& dir, DType type, int num_prompts, int len) {
  auto pool = std::make_shared<ThreadPool>(2);
  Gemma4Model reference(load_model_weights(dir), pool);
  WeightLoadOptions opts;
  opts.quantization = type;
  opts.pool = pool.get();
  Gemma4Model quantized(load_model_weights(dir, nullptr, opts), pool);
  return compare_quantized(reference, quantized,
                           random_prompts(reference.vocab_size(), num_prompts, len, 7));
}

void print(const std::string& what, DType type, const QuantQualityReport& r) {
  std::printf(
      "%-12s %-5s positions %5lld confident %5lld top1 %.4f confident-top1 %.4f "
      "mean KL %.3g max KL %.3g\n",
      what.c_str(), dtype_name(type), static_cast<long long>(r.positions),
      static_cast<long long>(r.confident_positions), r.agreement(), r.confident_agreement(),
      r.mean_kl(), r.kl_max);
}

double threshold(DType type) { return type == DType::kQ8_0 ? 0.99 : 0.90; }

TEST(QuantQuality, GoldenModels) {
  const fs::path root = testing::source_dir() / "tests/data/golden/models";
  for (DType type : {DType::kQ8_0, DType::kQ4_0}) {
    QuantQualityReport all;
    for (const char* model : {"dense", "dense-clm", "moe", "keqv", "vision"}) {
      const QuantQualityReport r = measure(root / model, type, 4, 48);
      print(model, type, r);
      all.add(r);
    }
    print("all golden", type, all);
    // Hidden-64 random models are chaotic (10 layers, flat logits): 4-bit weight noise flips
    // many top-1s even with float activations, so these floors sit below the 99 % / 90 % goals
    // (measured 0.974 / 0.725), which the 256-wide model below is held to.
    EXPECT_GE(all.confident_agreement(), type == DType::kQ8_0 ? 0.95 : 0.68) << dtype_name(type);
  }
}

using testing::write_wide_model;

TEST(QuantQuality, WideRandomModel) {
  testing::TempDir tmp;
  const fs::path dir = write_wide_model(tmp.path());
  for (DType type : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K}) {
    const QuantQualityReport r = measure(dir, type, 4, 96);
    print("wide-256", type, r);
    EXPECT_GE(r.confident_agreement(), threshold(type)) << dtype_name(type);
    EXPECT_GT(r.confident_positions, 0);
  }
}

// The interleaved layout the AVX-512 VNNI kernels use changes only the float summation order
// of each block sum; re-quantizing activations to int8 in every layer lets those last-bit
// differences flip a few roundings, so logits differ by far less than quantization itself
// (measured: mean KL 5e-5 here vs 8e-3 for q8_0 against f32) and every confident top-1 holds.
// Interleaved matrices of a model, and whether they include MoE experts.
struct InterleavedCount {
  int matrices = 0;
  bool experts = false;
};
InterleavedCount interleaved_count(const Gemma4Model& m) {
  InterleavedCount c;
  const ModelWeights& w = m.weights();
  const auto count = [&](const WeightMatrix& x) {
    c.matrices += x.layout == WeightLayout::kInterleaved16;
  };
  for (const LayerWeights& l : w.layers) {
    for (const WeightMatrix* x : {&l.q_proj, &l.o_proj, &l.gate_proj, &l.up_proj, &l.down_proj})
      count(*x);
    c.experts = c.experts || l.experts_gate_up.layout == WeightLayout::kInterleaved16 ||
                l.experts_down.layout == WeightLayout::kInterleaved16;
  }
  count(w.lm_head);
  return c;
}

TEST(QuantQuality, InterleavedLayoutMatchesRowLayout) {
  testing::TempDir tmp;
  const fs::path wide = write_wide_model(tmp.path());
  const fs::path moe = testing::source_dir() / "tests/data/golden/models/moe";
  auto pool = std::make_shared<ThreadPool>(2);
  for (const fs::path& dir : {wide, moe}) {
    const bool is_moe = dir == moe;
    for (DType type : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K}) {
      if (is_moe && type == DType::kQ4_K) continue;  // 64-wide rows hold no 256-element block
      WeightLoadOptions opts;
      opts.quantization = type;
      Gemma4ModelOptions rows_only;
      rows_only.interleave_weights = false;
      Gemma4Model by_rows(load_model_weights(dir, nullptr, opts), pool, rows_only);
      Gemma4Model interleaved(load_model_weights(dir, nullptr, opts), pool);
      EXPECT_EQ(interleaved_count(by_rows).matrices, 0);
      const InterleavedCount c = interleaved_count(interleaved);
      if (!cpu::interleave_preferred(type)) {
        std::printf("the avx512-vnni kernels do not run here: both models use the row layout\n");
        EXPECT_EQ(c.matrices, 0);
      } else {
        // Every q/o/gate/up/down matrix and the head (the MoE fixture's 64-row experts too).
        EXPECT_EQ(c.matrices, 5 * static_cast<int>(interleaved.weights().layers.size()) + 1);
        EXPECT_EQ(c.experts, is_moe);
      }
      const QuantQualityReport r =
          compare_quantized(by_rows, interleaved, random_prompts(by_rows.vocab_size(), 3, 64, 5));
      print(is_moe ? "interl. moe" : "interleaved", type, r);
      // Q4_K folds its min term into the same accumulator here (a separate sum in the row
      // layout): one near-tie flipped on this model (top-1 0.995), never a confident one.
      EXPECT_GE(r.agreement(), is_moe || type == DType::kQ4_K ? 0.98 : 1.0) << dtype_name(type);
      EXPECT_EQ(r.confident_agreement(), 1.0) << dtype_name(type);
      EXPECT_LT(r.mean_kl(), 5e-4) << dtype_name(type);
      EXPECT_LT(r.kl_max, 5e-3) << dtype_name(type);
    }
  }
}

// Q4_K on MoE experts: gate/up rows (256) take Q4_K, the 96-wide down rows fall back to Q4_0;
// where the VNNI kernels run both are interleaved per expert. Against f32 the model keeps the
// 4-bit quality bar, against the row layout only the summation order differs.
TEST(QuantQuality, Q4KMoeExpertsFallBackAndInterleave) {
  testing::TempDir tmp;
  const fs::path dir = testing::write_wide_moe_model(tmp.path());
  const QuantQualityReport vs_f32 = measure(dir, DType::kQ4_K, 4, 64);
  print("wide-moe", DType::kQ4_K, vs_f32);
  EXPECT_GE(vs_f32.confident_agreement(), threshold(DType::kQ4_K));
  auto pool = std::make_shared<ThreadPool>(2);
  WeightLoadOptions opts;
  opts.quantization = DType::kQ4_K;
  Gemma4ModelOptions rows_only;
  rows_only.interleave_weights = false;
  Gemma4Model by_rows(load_model_weights(dir, nullptr, opts), pool, rows_only);
  Gemma4Model interleaved(load_model_weights(dir, nullptr, opts), pool);
  const LayerWeights& rows_layer = by_rows.weights().layers[0];
  EXPECT_EQ(rows_layer.experts_gate_up.dtype, DType::kQ4_K);
  EXPECT_EQ(rows_layer.experts_down.dtype, DType::kQ4_0);
  const LayerWeights& layer = interleaved.weights().layers[0];
  const WeightLayout want =
      cpu::interleave_preferred(DType::kQ4_K) ? WeightLayout::kInterleaved16 : WeightLayout::kRows;
  EXPECT_EQ(layer.experts_gate_up.layout, want);
  EXPECT_EQ(layer.experts_down.layout, want);
  const QuantQualityReport r =
      compare_quantized(by_rows, interleaved, random_prompts(by_rows.vocab_size(), 3, 64, 5));
  print("interl. moe", DType::kQ4_K, r);
  // The layouts differ only in float summation order (quant_test checks each kernel bit for bit
  // against its layout's order), which this random model's top-k routing amplifies where a last
  // bit flips an expert: 187 of 187 confident top-1 and mean KL 3.5e-4 on a Zen 5 (AVX-512), 185
  // and 3.1e-3 on a Zen 3 (AVX2; the portable interleaved kernel gives the same bits there).
  EXPECT_GE(r.confident_agreement(), 0.98);
  EXPECT_LT(r.mean_kl(), 1e-2);
}

// A sequence's logits are bitwise the same alone and in a ragged batch with others (the
// quantized matmul's canonical order), for every type.
TEST(QuantQuality, BatchInvariantForward) {
  testing::TempDir tmp;
  const fs::path dir = write_wide_model(tmp.path());
  auto pool = std::make_shared<ThreadPool>(2);
  for (DType type : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K}) {
    WeightLoadOptions opts;
    opts.quantization = type;
    Gemma4Model model(load_model_weights(dir, nullptr, opts), pool);
    const auto prompts = random_prompts(model.vocab_size(), 3, 40, 11);
    constexpr int kBlock = 16, kPerSeq = 4;
    auto run = [&](const std::vector<size_t>& which) {
      KvCache cache(model.text_config(), {kPerSeq * 3, kPerSeq * 3}, kBlock);
      std::vector<std::vector<int32_t>> tables(which.size());
      std::vector<SequenceInput> batch(which.size());
      for (size_t i = 0; i < which.size(); ++i) {
        for (int b = 0; b < kPerSeq; ++b)
          tables[i].push_back(static_cast<int32_t>(i * kPerSeq + b));
        batch[i].tokens = prompts[which[i]];
        for (auto& t : batch[i].block_tables) t = tables[i];
        batch[i].logits = LogitsWanted::kAll;
      }
      ForwardOutput out;
      model.forward(batch, cache, &out);
      return out.logits;
    };
    const std::vector<float> alone = run({1});
    const std::vector<float> together = run({0, 1, 2});
    const size_t row = static_cast<size_t>(model.vocab_size()) * prompts[1].size();
    ASSERT_EQ(std::memcmp(alone.data(), together.data() + row, row * sizeof(float)), 0)
        << dtype_name(type);
  }
}

}  // namespace
}  // namespace gemmaserve
