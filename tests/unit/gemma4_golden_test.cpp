// Golden tests of the Gemma 4 text decoder against Hugging Face float32 logits for the small
// fixture models committed under tests/data/golden (see its README for provenance).
#include <gtest/gtest.h>

#include <cstring>

#include "gemma4_golden_checks.h"

namespace gemmaserve::golden {
namespace {

std::filesystem::path model_dir(const std::string& name) { return golden_dir() / "models" / name; }
std::filesystem::path ref_path(const std::string& name) {
  return golden_dir() / "ref" / (name + ".json");
}

GoldenOptions small_options(int block_size) {
  GoldenOptions opt;
  opt.block_size = block_size;
  opt.incremental_case = "long";  // 4 x window + 10 tokens, one per step
  opt.chunk = 7;
  return opt;
}

TEST(Gemma4Golden, Dense) {
  run_golden("dense", model_dir("dense"), ref_path("dense"), small_options(16));
}

TEST(Gemma4Golden, DenseBlockSize5) {
  run_golden("dense(bs5)", model_dir("dense"), ref_path("dense"), small_options(5));
}

TEST(Gemma4Golden, KeqV) {
  run_golden("keqv", model_dir("keqv"), ref_path("keqv"), small_options(5));
}

TEST(Gemma4Golden, Moe) { run_golden("moe", model_dir("moe"), ref_path("moe"), small_options(16)); }

TEST(Gemma4Golden, MoeBlockSize5) {
  run_golden("moe(bs5)", model_dir("moe"), ref_path("moe"), small_options(5));
}

// The vision model's text tower (= dense) on its text-only cases; the image cases are in
// gemma4_vision_golden_test.
TEST(Gemma4Golden, VisionTextCases) {
  run_golden("vision", model_dir("vision"), ref_path("vision"), small_options(16));
}

// The same weights saved as Gemma4ForCausalLM must give exactly dense's logits.
TEST(Gemma4Golden, DenseCausalLmEqualsDenseBitwise) {
  const auto dense = run_golden("dense", model_dir("dense"), ref_path("dense"), small_options(16));
  const auto clm =
      run_golden("dense-clm", model_dir("dense-clm"), ref_path("dense-clm"), small_options(16));
  ASSERT_EQ(dense.size(), clm.size());
  for (const auto& [name, logits] : dense) {
    ASSERT_TRUE(clm.count(name)) << name;
    const std::vector<float>& other = clm.at(name);
    ASSERT_EQ(logits.size(), other.size()) << name;
    EXPECT_EQ(0, std::memcmp(logits.data(), other.data(), logits.size() * sizeof(float))) << name;
  }
}

}  // namespace
}  // namespace gemmaserve::golden
