// The model's step loop allocates nothing once its buffers have grown to the batch: decode steps
// after a warm-up make no heap allocation on any thread (counted by replacing operator new in
// this test binary, which the library's calls resolve to).
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <new>
#include <vector>

#include "gemma4_golden_harness.h"
#include "kernels/cpu/attention.h"
#include "model/quantize.h"
#include "wide_test_model.h"

namespace {

std::atomic<bool> g_counting{false};
std::atomic<uint64_t> g_allocations{0};

// Called for each counted allocation: `break allocation_while_counting` in gdb shows who.
[[gnu::noinline]] void allocation_while_counting() { asm volatile(""); }

void* counted_alloc(std::size_t size, std::size_t align) {
  if (g_counting.load(std::memory_order_relaxed)) {
    g_allocations.fetch_add(1, std::memory_order_relaxed);
    allocation_while_counting();
  }
  if (size == 0) size = 1;
  void* p = nullptr;
  if (align <= alignof(std::max_align_t)) {
    p = std::malloc(size);
  } else if (posix_memalign(&p, align, size) != 0) {
    p = nullptr;
  }
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

}  // namespace

// These are the replaceable allocation functions themselves: their free() matches their malloc().
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(std::size_t size) { return counted_alloc(size, 0); }
void* operator new[](std::size_t size) { return counted_alloc(size, 0); }
void* operator new(std::size_t size, std::align_val_t a) {
  return counted_alloc(size, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t size, std::align_val_t a) {
  return counted_alloc(size, static_cast<std::size_t>(a));
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

namespace gemmaserve::golden {
namespace {

constexpr int kSeqs = 3;
constexpr int kBlockSize = 16;
constexpr int kBlocksPerSeq = 6;  // 96 positions: every query's keys stay in one segment

// Sequences with fixed block tables, advanced one decode token at a time.
class DecodeBatch {
 public:
  explicit DecodeBatch(Gemma4Model& model)
      : model_(model),
        cache_(model.text_config(),
               std::array<int, 2>{kSeqs * kBlocksPerSeq, kSeqs * kBlocksPerSeq}, kBlockSize) {
    for (int s = 0; s < kSeqs; ++s) {
      for (int b = 0; b < kBlocksPerSeq; ++b) table_[s].push_back(s * kBlocksPerSeq + b);
    }
  }

  void prefill(const std::vector<int32_t>& prompt) {
    std::vector<SequenceInput> batch(kSeqs);
    for (int s = 0; s < kSeqs; ++s) {
      batch[s] = input(s, prompt);
      len_[s] = static_cast<int32_t>(prompt.size());
    }
    model_.forward(batch, cache_, &out_);
  }

  // One token for each of the first `n` sequences; all inputs are built before it runs.
  void decode(int n) {
    for (int s = 0; s < n; ++s) {
      token_[s] = 5 + s + len_[s];
      inputs_[s] = input(s, std::span<const int32_t>(&token_[s], 1));
    }
    model_.forward(std::span<const SequenceInput>(inputs_.data(), static_cast<size_t>(n)), cache_,
                   &out_);
    for (int s = 0; s < n; ++s) ++len_[s];
  }

  const ForwardOutput& out() const { return out_; }

 private:
  SequenceInput input(int s, std::span<const int32_t> tokens) const {
    SequenceInput in;
    in.tokens = tokens;
    in.start_pos = len_[s];
    for (int t = 0; t < kNumAttentionTypes; ++t) in.block_tables[t] = table_[s];
    return in;
  }

  Gemma4Model& model_;
  KvCache cache_;
  ForwardOutput out_;
  std::array<std::vector<int32_t>, kSeqs> table_;
  std::array<int32_t, kSeqs> len_{};
  std::array<int32_t, kSeqs> token_{};
  std::array<SequenceInput, kSeqs> inputs_{};
};

// Allocations made by `steps` decode steps of batch n after `warmup` such steps.
uint64_t allocations_in_decode(DecodeBatch& batch, int n, int warmup, int steps) {
  for (int i = 0; i < warmup; ++i) batch.decode(n);
  g_allocations = 0;
  g_counting = true;
  for (int i = 0; i < steps; ++i) batch.decode(n);
  g_counting = false;
  return g_allocations.load();
}

void expect_no_allocation(Gemma4Model& model, const std::string& name) {
  DecodeBatch batch(model);
  batch.prefill({2, 17, 301, 45, 99, 12, 7, 480, 33});
  // Several sequences (attention items per query) and one (items split into key segments).
  EXPECT_EQ(0u, allocations_in_decode(batch, kSeqs, 2, 4)) << name << ", batch " << kSeqs;
  EXPECT_EQ(0u, allocations_in_decode(batch, 1, 2, 4)) << name << ", batch 1";
  ASSERT_EQ(batch.out().rows, 1);
  EXPECT_TRUE(std::isfinite(batch.out().logits[0])) << name;
}

std::filesystem::path model_dir(const std::string& name) { return golden_dir() / "models" / name; }

TEST(StepAllocation, CountingSeesTheLibrarysAllocations) {
  // The replacement must see allocations made inside the shared library (the workspace's one
  // buffer block), or the tests below could not fail.
  g_allocations = 0;
  g_counting = true;
  { cpu::AttentionWorkspace workspace; }
  g_counting = false;
  EXPECT_EQ(1u, g_allocations.load());
}

TEST(StepAllocation, F32DenseAndKvSharedModels) {
  for (const char* name : {"dense", "keqv"}) {
    auto model = load_model(model_dir(name), 2);
    expect_no_allocation(*model, name);
  }
}

TEST(StepAllocation, QuantizedMixtureOfExperts) {
  ModelWeights weights = load_model_weights(model_dir("moe"));
  quantize_model_weights(weights, DType::kQ8_0, nullptr, [](size_t, size_t) {});
  Gemma4Model model(std::move(weights), std::make_shared<ThreadPool>(2));
  // The experts really run the int8 path (a matrix whose K is not a multiple of 32 stays f32).
  ASSERT_EQ(model.weights().layers[0].experts_gate_up.dtype, DType::kQ8_0);
  ASSERT_EQ(model.weights().layers[0].experts_down.dtype, DType::kQ8_0);
  expect_no_allocation(model, "moe q8_0");
}

TEST(StepAllocation, InterleavedQuantizedAndBf16Weights) {
  ::gemmaserve::testing::TempDir dir;
  ::gemmaserve::testing::write_wide_model(dir.path(), DType::kBF16);
  for (DType dtype : {DType::kQ4_0, DType::kQ8_0, DType::kQ4_K, DType::kBF16}) {
    ModelWeights weights = load_model_weights(dir.path());
    Gemma4ModelOptions options;
    if (dtype == DType::kBF16) {
      options.matmul_precision = cpu::MatmulPrecision::kBF16;  // activations rounded per call
    } else {
      quantize_model_weights(weights, dtype, nullptr, [](size_t, size_t) {});
    }
    Gemma4Model model(std::move(weights), std::make_shared<ThreadPool>(2), options);
    ASSERT_EQ(model.weights().layers[0].down_proj.dtype, dtype);
    expect_no_allocation(model, dtype_name(dtype));
  }
}

}  // namespace
}  // namespace gemmaserve::golden
