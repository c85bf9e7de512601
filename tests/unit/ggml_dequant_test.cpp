// ggml's tensor types: every block type's DType size and name, the ggml_type code mapping both
// ways, the checkpoint's error for a type it cannot read, and dequantization matching ggml's own
// bit for bit on tests/data/gguf/ggml-types.gguf (rows quantized by ggml_quantize_chunk next to
// ggml's to_float of them, llama.cpp v0.5.0; see ../shared/fixtures/gguf/README.md, dequant/).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <ctime>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "checkpoint/gguf_checkpoint.h"
#include "core/dtype.h"
#include "gguf_builder.h"
#include "io/gguf.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/quant.h"
#include "test_support.h"

namespace gemmaserve {
namespace {

namespace fs = std::filesystem;
using testing::GgufBuilder;

constexpr DType kLastDType = DType::kQ2_0;

std::vector<DType> all_dtypes() {
  std::vector<DType> out;
  for (int i = 0; i <= static_cast<int>(kLastDType); ++i) out.push_back(static_cast<DType>(i));
  return out;
}

fs::path fixture() { return testing::source_dir() / "tests/data/gguf/ggml-types.gguf"; }

const GgufTensorInfo* find_tensor(const GgufFile& f, const std::string& name) {
  for (const GgufTensorInfo& t : f.tensors()) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

struct TypeRow {
  DType dtype;
  const char* name;
  size_t bytes;
  int64_t elems;
  uint32_t ggml_code;
};

// Sizes of ggml's block_* structs, codes of ggml.h's enum ggml_type.
constexpr TypeRow kBlockTypes[] = {
    {DType::kQ8_0, "Q8_0", 34, 32, 8},         {DType::kQ4_0, "Q4_0", 18, 32, 2},
    {DType::kQ4_K, "Q4_K", 144, 256, 12},      {DType::kQ4_1, "Q4_1", 20, 32, 3},
    {DType::kQ5_0, "Q5_0", 22, 32, 6},         {DType::kQ5_1, "Q5_1", 24, 32, 7},
    {DType::kQ2_K, "Q2_K", 84, 256, 10},       {DType::kQ3_K, "Q3_K", 110, 256, 11},
    {DType::kQ5_K, "Q5_K", 176, 256, 13},      {DType::kQ6_K, "Q6_K", 210, 256, 14},
    {DType::kIQ2_XXS, "IQ2_XXS", 66, 256, 16}, {DType::kIQ2_XS, "IQ2_XS", 74, 256, 17},
    {DType::kIQ3_XXS, "IQ3_XXS", 98, 256, 18}, {DType::kIQ1_S, "IQ1_S", 50, 256, 19},
    {DType::kIQ4_NL, "IQ4_NL", 18, 32, 20},    {DType::kIQ3_S, "IQ3_S", 110, 256, 21},
    {DType::kIQ2_S, "IQ2_S", 82, 256, 22},     {DType::kIQ4_XS, "IQ4_XS", 136, 256, 23},
    {DType::kIQ1_M, "IQ1_M", 56, 256, 29},     {DType::kTQ1_0, "TQ1_0", 54, 256, 34},
    {DType::kTQ2_0, "TQ2_0", 66, 256, 35},     {DType::kMXFP4, "MXFP4", 17, 32, 39},
    {DType::kNVFP4, "NVFP4", 36, 64, 40},      {DType::kQ1_0, "Q1_0", 18, 128, 41},
    {DType::kQ2_0, "Q2_0", 18, 64, 42},
};

TEST(GgmlTypesTest, BlockTypeSizesNamesAndKinds) {
  for (const TypeRow& r : kBlockTypes) {
    SCOPED_TRACE(r.name);
    EXPECT_STREQ(dtype_name(r.dtype), r.name);
    EXPECT_EQ(dtype_size(r.dtype), r.bytes);
    EXPECT_EQ(dtype_block_elems(r.dtype), r.elems);
    EXPECT_EQ(dtype_row_bytes(r.dtype, 4 * r.elems), 4 * r.bytes);
    EXPECT_TRUE(dtype_is_block(r.dtype));
    const bool native =
        r.dtype == DType::kQ8_0 || r.dtype == DType::kQ4_0 || r.dtype == DType::kQ4_K;
    EXPECT_EQ(dtype_is_quantized(r.dtype), native);
    EXPECT_EQ(dtype_is_storage_only(r.dtype), !native);
    EXPECT_EQ(ggml_type_of_dtype(r.dtype), r.ggml_code);
    EXPECT_EQ(dtype_of_ggml_type(r.ggml_code), r.dtype);
    EXPECT_EQ(ggml_type_name(r.ggml_code), r.name);
  }
  EXPECT_EQ(std::size(kBlockTypes), all_dtypes().size() - 10);  // all but the 10 element types
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16, DType::kI8, DType::kBool}) {
    EXPECT_FALSE(dtype_is_block(d)) << dtype_name(d);
    EXPECT_FALSE(dtype_is_storage_only(d)) << dtype_name(d);
    EXPECT_EQ(dtype_block_elems(d), 1) << dtype_name(d);
  }
}

TEST(GgmlTypesTest, GgmlTypeCodesMapBothWays) {
  for (DType d : all_dtypes()) {
    SCOPED_TRACE(dtype_name(d));
    const std::optional<uint32_t> code = ggml_type_of_dtype(d);
    if (d == DType::kU8 || d == DType::kBool) {
      EXPECT_FALSE(code.has_value());  // ggml has neither
      continue;
    }
    ASSERT_TRUE(code.has_value());
    EXPECT_EQ(dtype_of_ggml_type(*code), d);
    EXPECT_EQ(ggml_type_name(*code), dtype_name(d));
  }
  int mapped = 0;
  for (uint32_t code = 0; code < 64; ++code) {
    if (const std::optional<DType> d = dtype_of_ggml_type(code)) {
      EXPECT_EQ(ggml_type_of_dtype(*d), code);
      ++mapped;
    }
  }
  EXPECT_EQ(mapped, static_cast<int>(all_dtypes().size()) - 2);
  EXPECT_EQ(dtype_of_ggml_type(0), DType::kF32);
  EXPECT_EQ(dtype_of_ggml_type(30), DType::kBF16);
  EXPECT_EQ(dtype_of_ggml_type(28), DType::kF64);
  EXPECT_EQ(dtype_of_ggml_type(24), DType::kI8);
  EXPECT_EQ(dtype_of_ggml_type(27), DType::kI64);
  // Named by ggml, but no weight format gemmaserve reads: activations and removed layouts.
  for (uint32_t code : {4u, 5u, 9u, 15u, 31u, 32u, 33u, 36u, 37u, 38u}) {
    EXPECT_FALSE(dtype_of_ggml_type(code).has_value()) << code;
    EXPECT_TRUE(ggml_type_name(code).has_value()) << code;
  }
  EXPECT_EQ(ggml_type_name(9), "Q8_1");
  EXPECT_EQ(ggml_type_name(33), "Q4_0_8_8");
  EXPECT_FALSE(ggml_type_name(43).has_value());
  EXPECT_FALSE(dtype_of_ggml_type(43).has_value());
  EXPECT_FALSE(dtype_of_ggml_type(0xffffffffu).has_value());
}

fs::path write_file(const testing::TempDir& dir, const std::string& name,
                    const std::string& bytes) {
  const fs::path p = dir.path() / name;
  std::ofstream(p, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return p;
}

TEST(GgmlTypesTest, CheckpointNamesTheTensorAndTypeItCannotRead) {
  testing::TempDir dir;
  const fs::path q8_1 = write_file(dir, "q8_1.gguf",
                                   GgufBuilder()
                                       .tensor("blk.0.ffn_down.weight", {32}, /*Q8_1*/ 9, 0)
                                       .data(std::string(36, '\0'))
                                       .bytes());
  EXPECT_EQ(testing::input_error_of([&] { GgufCheckpoint c(q8_1); }),
            q8_1.string() +
                ": tensor 'blk.0.ffn_down.weight' has ggml type 9 (Q8_1), which gemmaserve "
                "cannot read");
  const fs::path future = write_file(
      dir, "future.gguf",
      GgufBuilder().tensor("token_embd.weight", {256}, 77, 0).data(std::string(32, '\0')).bytes());
  EXPECT_EQ(testing::input_error_of([&] { GgufCheckpoint c(future); }),
            future.string() +
                ": tensor 'token_embd.weight' has ggml type 77 (unknown), which gemmaserve "
                "cannot read");
}

TEST(GgmlTypesTest, CheckpointListsStorageOnlyTypes) {
  testing::TempDir dir;
  const fs::path path = write_file(dir, "k.gguf",
                                   GgufBuilder()
                                       .tensor("q6", {256, 2}, /*Q6_K*/ 14, 0)
                                       .tensor("iq", {256}, /*IQ2_XXS*/ 16, 448)
                                       .data(std::string(448 + 66, '\0'))
                                       .bytes());
  const GgufCheckpoint c(path);
  const CheckpointTensor* q6 = c.find("q6");
  ASSERT_NE(q6, nullptr);
  EXPECT_EQ(q6->dtype, DType::kQ6_K);
  EXPECT_EQ(q6->shape, (std::vector<int64_t>{2, 256}));
  EXPECT_EQ(q6->nbytes, 420u);
  const CheckpointTensor* iq = c.find("iq");
  ASSERT_NE(iq, nullptr);
  EXPECT_EQ(iq->dtype, DType::kIQ2_XXS);
  EXPECT_EQ(iq->nbytes, 66u);
}

// Dequantizes a whole row through both entry points and checks they agree.
std::vector<float> dequantize(DType dtype, const std::byte* src, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n)), again(static_cast<size_t>(n));
  cpu::to_f32(dtype, src, out.data(), static_cast<size_t>(n));
  if (dtype_is_block(dtype)) {
    cpu::dequantize_row(dtype, src, again.data(), n);
    EXPECT_EQ(std::memcmp(out.data(), again.data(), out.size() * sizeof(float)), 0);
  }
  return out;
}

// No type gets a tolerance: every value equals ggml's to the bit.
TEST(GgmlDequantTest, EveryTypeMatchesGgmlBitForBit) {
  const GgufFile f(fixture());
  const std::vector<std::string_view> types = f.get("dequant.types").as_string_array();
  ASSERT_EQ(types.size(), 27u);
  const int64_t cols = f.get("dequant.n_per_row").as_int();
  const int64_t rows = f.get("dequant.n_rows").as_int();
  std::vector<std::string> checked;
  for (std::string_view type : types) {
    const std::string name(type);
    SCOPED_TRACE(name);
    const GgufTensorInfo* quant = find_tensor(f, name + ".quant");
    const GgufTensorInfo* want = find_tensor(f, name + ".dequant");
    ASSERT_NE(quant, nullptr);
    ASSERT_NE(want, nullptr);
    const std::optional<DType> dtype = dtype_of_ggml_type(quant->ggml_type);
    ASSERT_TRUE(dtype.has_value()) << "ggml type " << quant->ggml_type;
    EXPECT_EQ(dtype_name(*dtype), upper(name));
    ASSERT_EQ(quant->dims,
              (std::vector<uint64_t>{static_cast<uint64_t>(cols), static_cast<uint64_t>(rows)}));
    const size_t row_bytes = dtype_row_bytes(*dtype, cols);
    ASSERT_EQ(quant->byte_size, row_bytes * static_cast<size_t>(rows));
    int mismatches = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const std::vector<float> got =
          dequantize(*dtype, quant->data + static_cast<size_t>(r) * row_bytes, cols);
      for (int64_t i = 0; i < cols; ++i) {
        float expected;
        std::memcpy(&expected, want->data + 4 * (r * cols + i), 4);
        if (std::bit_cast<uint32_t>(got[i]) != std::bit_cast<uint32_t>(expected) &&
            ++mismatches <= 3) {
          ADD_FAILURE() << "row " << r << " col " << i << ": " << got[i] << " (0x" << std::hex
                        << std::bit_cast<uint32_t>(got[i]) << "), ggml " << expected << " (0x"
                        << std::bit_cast<uint32_t>(expected) << ")" << std::dec;
        }
      }
    }
    EXPECT_EQ(mismatches, 0);
    checked.push_back(name);
  }
  EXPECT_EQ(checked.size(), 27u);
}

TEST(GgmlDequantTest, ZeroBlocksGiveZerosAndAnyBitPatternIsSafe) {
  std::mt19937 rng(7);
  for (DType dtype : all_dtypes()) {
    if (!dtype_is_block(dtype)) continue;
    SCOPED_TRACE(dtype_name(dtype));
    const int64_t n = 3 * dtype_block_elems(dtype);
    // One byte of slack in front: rows of odd-sized blocks start at any address.
    std::vector<std::byte> bytes(dtype_row_bytes(dtype, n) + 1);
    std::vector<float> out(static_cast<size_t>(n), 1.0f);
    cpu::dequantize_row(dtype, bytes.data() + 1, out.data(), n);
    EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float x) { return x == 0.0f; }));
    // Random bytes: NaN / inf / subnormal scales and every index; the sanitizer build checks UB.
    for (int trial = 0; trial < 20; ++trial) {
      for (std::byte& b : bytes) b = static_cast<std::byte>(rng());
      if (trial == 0) std::fill(bytes.begin(), bytes.end(), std::byte{0xff});
      cpu::dequantize_row(dtype, bytes.data() + 1, out.data(), n);
    }
  }
}

TEST(GgmlDequantTest, RejectsPartialBlocksAndElementTypes) {
  std::vector<std::byte> bytes(1024);
  std::vector<float> out(512);
  EXPECT_EQ(testing::input_error_of(
                [&] { cpu::dequantize_row(DType::kQ6_K, bytes.data(), out.data(), 100); }),
            "Q6_K rows need a multiple of 256 elements, got 100");
  EXPECT_EQ(testing::input_error_of(
                [&] { cpu::dequantize_row(DType::kBF16, bytes.data(), out.data(), 32); }),
            "not a quantized dtype: BF16");
  EXPECT_EQ(testing::input_error_of([&] { cpu::to_f32(DType::kU8, bytes.data(), out.data(), 32); }),
            "to_f32: unsupported dtype U8");
  // Quantizing stays limited to the native types.
  std::vector<float> src(256, 0.5f);
  EXPECT_EQ(testing::input_error_of(
                [&] { cpu::quantize_row(DType::kQ6_K, src.data(), bytes.data(), 256); }),
            "not a quantized dtype: Q6_K");
}

// This thread's CPU seconds: the machine is shared, so wall time would measure the neighbours.
double thread_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Load-time speed of the dequantizers (run with --gtest_also_run_disabled_tests): the fixture's
// rows tiled to 32 MB of blocks per type; prints MB/s of quantized input, Mvalues/s and MB/s of
// f32 output per core.
TEST(GgmlDequantTest, DISABLED_Throughput) {
  const GgufFile f(fixture());
  for (std::string_view type : f.get("dequant.types").as_string_array()) {
    const GgufTensorInfo* quant = find_tensor(f, std::string(type) + ".quant");
    ASSERT_NE(quant, nullptr);
    const DType dtype = *dtype_of_ggml_type(quant->ggml_type);
    const size_t src_bytes = static_cast<size_t>(*quant->byte_size);
    const size_t copies = (32u << 20) / src_bytes;
    std::vector<std::byte> big(copies * src_bytes);
    for (size_t c = 0; c < copies; ++c) {
      std::memcpy(big.data() + c * src_bytes, quant->data, src_bytes);
    }
    const int64_t n = static_cast<int64_t>(copies) * 8 * 512;
    std::vector<float> out(static_cast<size_t>(n));
    double best = 1e30;
    for (int rep = 0; rep < 5; ++rep) {
      const double t0 = thread_seconds();
      cpu::to_f32(dtype, big.data(), out.data(), static_cast<size_t>(n));
      best = std::min(best, thread_seconds() - t0);
    }
    std::printf("%-8s %8.0f MB/s in  %8.0f Mvalues/s  (%.0f MB/s f32 out)\n", dtype_name(dtype),
                static_cast<double>(big.size()) / best / 1e6, static_cast<double>(n) / best / 1e6,
                static_cast<double>(n) * 4 / best / 1e6);
  }
}

}  // namespace
}  // namespace gemmaserve
