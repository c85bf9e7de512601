// The GGUF writer (io/gguf_writer.h) read back by io/gguf.h's reader: every metadata value type,
// tensors of every type GGUF files of Gemma 4 hold at their aligned offsets with their bytes,
// general.alignment, split parts named and keyed as gguf-split writes them, and its errors.
#include "io/gguf_writer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "core/error.h"
#include "io/gguf.h"
#include "model/gemma4_gguf.h"
#include "test_support.h"

namespace gemmaserve {
namespace {

namespace fs = std::filesystem;

// Byte k of tensor t: a pattern that tells tensors and positions apart.
std::byte pattern(size_t t, uint64_t k) { return static_cast<std::byte>((t * 131 + k * 7) & 0xFF); }

void write_pattern(const GgufPlan& plan, const std::vector<GgufTensorSpec>& specs,
                   const GgufWriteOptions& options = {}) {
  write_gguf(
      plan, specs,
      [&](size_t t, int64_t first, int64_t count, std::byte* dst) {
        const uint64_t row = specs[t].row_bytes();
        for (uint64_t k = 0; k < static_cast<uint64_t>(count) * row; ++k) {
          dst[k] = pattern(t, static_cast<uint64_t>(first) * row + k);
        }
      },
      options);
}

std::vector<GgufTensorSpec> every_type() {
  return {{"f32", DType::kF32, {3, 5}},      {"f16", DType::kF16, {2, 7}},
          {"bf16", DType::kBF16, {4, 1, 3}}, {"q8_0", DType::kQ8_0, {3, 64}},
          {"q4_0", DType::kQ4_0, {2, 32}},   {"q4_k", DType::kQ4_K, {2, 2, 256}},
          {"i32", DType::kI32, {5}},         {"scalar", DType::kF32, {}},
          {"f64", DType::kF64, {2}},         {"i8", DType::kI8, {1, 1, 1, 9}}};
}

TEST(GgufWriter, ReadBackEveryValueTypeAndTensor) {
  testing::TempDir tmp;
  GgufMetadata m;
  m.set_string("general.architecture", "test");
  m.set_number<uint8_t>("u8", 200);
  m.set_number<int8_t>("i8", -100);
  m.set_number<uint16_t>("u16", 60000);
  m.set_number<int16_t>("i16", -30000);
  m.set_uint32("u32", 4000000000u);
  m.set_int32("i32", -2000000000);
  m.set_number<uint64_t>("u64", uint64_t{1} << 62);
  m.set_number<int64_t>("i64", -(int64_t{1} << 61));
  m.set_float32("f32", 0.25f);
  m.set_number<double>("f64", -1e300);
  m.set_bool("yes", true);
  m.set_bool("no", false);
  m.set_string("text", "gemma \xE2\x96\x81 4");
  m.set_string("empty", "");
  m.set_array("a_i32", GgufArray::numbers(std::vector<int32_t>{1, -2, 3}));
  m.set_array("a_u8", GgufArray::numbers(std::vector<uint8_t>{7, 255}));
  m.set_array("a_f32", GgufArray::numbers(std::vector<float>{1.5f, -1000.0f}));
  m.set_array("a_f64", GgufArray::numbers(std::vector<double>{0.5}));
  m.set_array("a_bool", GgufArray::bools({true, false, true}));
  const std::vector<std::string> words = {"a", "", "b c"};
  m.set_array("a_str", GgufArray::strings(words));
  m.set_array("a_empty", GgufArray::numbers(std::vector<int64_t>{}));
  m.set_array("a_nested",
              GgufArray::arrays(std::vector<GgufArray>{
                  GgufArray::numbers(std::vector<int16_t>{-1, 2}), GgufArray::strings(words)}));
  m.set_uint32("u32", 7);  // replaced in place, not appended
  m.set_uint32("general.alignment", 64);
  EXPECT_EQ(m.alignment(), 64u);

  const std::vector<GgufTensorSpec> specs = every_type();
  const fs::path path = tmp.path() / "all.gguf";
  const GgufPlan plan = plan_gguf(path, m, specs);
  ASSERT_EQ(plan.files.size(), 1u);
  EXPECT_EQ(plan.files[0].path, path);
  write_pattern(plan, specs);
  EXPECT_FALSE(fs::exists(tmp.path() / "all.gguf.partial"));
  EXPECT_EQ(fs::file_size(path), plan.disk_bytes);

  const GgufFile f(path);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 64u);
  ASSERT_EQ(f.metadata().size(), m.size());
  EXPECT_EQ(f.metadata()[1].key(), "u8");
  EXPECT_EQ(f.get("u8").type(), GgufType::kUint8);
  EXPECT_EQ(f.get("u8").as_int(), 200);
  EXPECT_EQ(f.get("i8").as_int(), -100);
  EXPECT_EQ(f.get("u16").type(), GgufType::kUint16);
  EXPECT_EQ(f.get("u16").as_int(), 60000);
  EXPECT_EQ(f.get("i16").as_int(), -30000);
  EXPECT_EQ(f.get("u32").type(), GgufType::kUint32);
  EXPECT_EQ(f.get("u32").as_int(), 7);
  EXPECT_EQ(f.metadata()[5].key(), "u32");
  EXPECT_EQ(f.get("i32").type(), GgufType::kInt32);
  EXPECT_EQ(f.get("i32").as_int(), -2000000000);
  EXPECT_EQ(f.get("u64").as_int(), int64_t{1} << 62);
  EXPECT_EQ(f.get("i64").type(), GgufType::kInt64);
  EXPECT_EQ(f.get("i64").as_int(), -(int64_t{1} << 61));
  EXPECT_EQ(f.get("f32").type(), GgufType::kFloat32);
  EXPECT_EQ(f.get("f32").as_float(), 0.25);
  EXPECT_EQ(f.get("f64").type(), GgufType::kFloat64);
  EXPECT_EQ(f.get("f64").as_float(), -1e300);
  EXPECT_TRUE(f.get("yes").as_bool());
  EXPECT_FALSE(f.get("no").as_bool());
  EXPECT_EQ(f.get("text").as_string(), "gemma \xE2\x96\x81 4");
  EXPECT_EQ(f.get("empty").as_string(), "");
  EXPECT_EQ(f.get("a_i32").array_type(), GgufType::kInt32);
  EXPECT_EQ(f.get("a_i32").as_int_array(), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(f.get("a_u8").array_type(), GgufType::kUint8);
  EXPECT_EQ(f.get("a_u8").as_int_array(), (std::vector<int64_t>{7, 255}));
  EXPECT_EQ(f.get("a_f32").as_float_array(), (std::vector<double>{1.5, -1000.0}));
  EXPECT_EQ(f.get("a_f64").array_type(), GgufType::kFloat64);
  EXPECT_EQ(f.get("a_bool").as_bool_array(), (std::vector<bool>{true, false, true}));
  const std::vector<std::string_view> read_words = f.get("a_str").as_string_array();
  EXPECT_EQ(std::vector<std::string>(read_words.begin(), read_words.end()), words);
  EXPECT_EQ(f.get("a_empty").array_type(), GgufType::kInt64);
  EXPECT_EQ(f.get("a_empty").array_size(), 0u);
  const auto& nested = f.get("a_nested").as_nested_array();
  ASSERT_EQ(nested.size(), 2u);
  EXPECT_EQ(nested[0].as_int_array(), (std::vector<int64_t>{-1, 2}));
  EXPECT_EQ(nested[1].as_string_array().size(), 3u);

  // Dims innermost first, llama.cpp's type codes, aligned offsets, every byte in place.
  const std::vector<std::vector<uint64_t>> dims = {
      {5, 3}, {7, 2}, {3, 1, 4}, {64, 3}, {32, 2}, {256, 2, 2}, {5}, {1}, {2}, {9, 1, 1, 1}};
  const uint32_t types[] = {0, 1, 30, 8, 2, 12, 26, 0, 28, 24};
  ASSERT_EQ(f.tensors().size(), specs.size());
  for (size_t t = 0; t < specs.size(); ++t) {
    const GgufTensorInfo& info = f.tensors()[t];
    SCOPED_TRACE(info.name);
    EXPECT_EQ(info.name, specs[t].name);
    EXPECT_EQ(info.dims, dims[t]);
    EXPECT_EQ(info.ggml_type, types[t]);
    EXPECT_EQ(info.offset % 64, 0u);
    ASSERT_TRUE(info.byte_size);
    ASSERT_EQ(*info.byte_size, specs[t].nbytes());
    bool same = true;
    for (uint64_t k = 0; k < *info.byte_size; ++k) same = same && info.data[k] == pattern(t, k);
    EXPECT_TRUE(same);
  }
  EXPECT_EQ(f.tensors()[1].offset, 64u);  // 60 bytes of f32, padded to the alignment
}

TEST(GgufWriter, DefaultAlignmentIs32AndChunksDoNotChangeBytes) {
  testing::TempDir tmp;
  GgufMetadata m;
  m.set_string("general.architecture", "test");
  const std::vector<GgufTensorSpec> specs = every_type();
  const GgufPlan a = plan_gguf(tmp.path() / "a.gguf", m, specs);
  EXPECT_EQ(a.alignment, 32u);
  write_pattern(a, specs);
  // Tiny chunks and a thread pool: the same file.
  ThreadPool pool(2);
  GgufWriteOptions o;
  o.pool = &pool;
  o.chunk_bytes = 100;
  uint64_t last = 0;
  o.progress = [&](uint64_t done, uint64_t total, const std::string&) {
    EXPECT_GE(done, last);
    EXPECT_LE(done, total);
    last = done;
  };
  const GgufPlan b = plan_gguf(tmp.path() / "b.gguf", m, specs);
  write_pattern(b, specs, o);
  EXPECT_EQ(last, b.disk_bytes);
  EXPECT_EQ(testing::read_text_file(tmp.path() / "a.gguf"),
            testing::read_text_file(tmp.path() / "b.gguf"));
  const GgufFile f(tmp.path() / "a.gguf");
  for (const GgufTensorInfo& t : f.tensors()) EXPECT_EQ(t.offset % 32, 0u) << t.name;
}

TEST(GgufWriter, SplitsAsGgufSplitNamesAndKeysTheParts) {
  testing::TempDir tmp;
  GgufMetadata m;
  m.set_string("general.architecture", "test");
  m.set_uint32("test.value", 5);
  std::vector<GgufTensorSpec> specs;
  for (int i = 0; i < 5; ++i) specs.push_back({"t" + std::to_string(i), DType::kF32, {100}});
  specs[3].shape = {400};  // 1600 bytes: more than a part, so a part of its own
  const GgufPlan plan = plan_gguf(tmp.path() / "model.gguf", m, specs, 1250);
  ASSERT_EQ(plan.files.size(), 3u);
  write_pattern(plan, specs);
  const std::vector<size_t> counts = {3, 1, 1};
  for (size_t i = 0; i < 3; ++i) {
    const fs::path part = tmp.path() / ("model-0000" + std::to_string(i + 1) + "-of-00003.gguf");
    ASSERT_TRUE(fs::exists(part)) << part;
    const GgufFile f(part);
    EXPECT_EQ(f.get("split.no").type(), GgufType::kUint16);
    EXPECT_EQ(f.get("split.no").as_int(), static_cast<int64_t>(i));
    EXPECT_EQ(f.get("split.count").type(), GgufType::kUint16);
    EXPECT_EQ(f.get("split.count").as_int(), 3);
    EXPECT_EQ(f.get("split.tensors.count").type(), GgufType::kInt32);
    EXPECT_EQ(f.get("split.tensors.count").as_int(), 5);
    // The first part carries the metadata (split keys last), the others only the split keys.
    EXPECT_EQ(f.metadata().size(), i == 0 ? 5u : 3u);
    EXPECT_EQ(f.find("test.value") != nullptr, i == 0);
    EXPECT_EQ(f.tensors().size(), counts[i]);
  }
  EXPECT_FALSE(fs::exists(tmp.path() / "model.gguf"));
  // The loader's split discovery finds all parts from any of them.
  EXPECT_EQ(gguf_split_parts(tmp.path() / "model-00002-of-00003.gguf").size(), 3u);
  // One part is enough: no split keys, the name as given.
  const GgufPlan one = plan_gguf(tmp.path() / "one.gguf", m, specs, 1 << 20);
  ASSERT_EQ(one.files.size(), 1u);
  EXPECT_EQ(one.files[0].path, tmp.path() / "one.gguf");
}

TEST(GgufWriter, Errors) {
  testing::TempDir tmp;
  GgufMetadata m;
  const fs::path path = tmp.path() / "x.gguf";
  EXPECT_EQ(testing::input_error_of([&] {
              plan_gguf(path, m, {{"a", DType::kF32, {2}}, {"a", DType::kF32, {2}}});
            }),
            path.string() + ": tensor 'a' is written twice");
  EXPECT_EQ(testing::input_error_of([&] {
              plan_gguf(path, m, {{"u", DType::kU8, {2}}});
            }),
            "GGUF has no tensor type for U8");
  EXPECT_EQ(testing::input_error_of([&] {
              plan_gguf(path, m, {{"q", DType::kQ8_0, {2, 40}}});
            }),
            "tensor 'q': rows of 40 elements are not whole Q8_0 blocks of 32");
  m.set_uint32("general.alignment", 48);
  EXPECT_EQ(testing::input_error_of([&] { plan_gguf(path, m, {}); }),
            "general.alignment must be a uint32 power of two");
  // A folder that does not exist: nothing is left behind.
  GgufMetadata ok;
  const std::vector<GgufTensorSpec> specs = {{"a", DType::kF32, {2}}};
  const fs::path missing = tmp.path() / "no" / "x.gguf";
  EXPECT_EQ(testing::input_error_of([&] { write_pattern(plan_gguf(missing, ok, specs), specs); }),
            missing.string() + ".partial: cannot create: No such file or directory");
  // A failing filler leaves no partial file.
  EXPECT_THROW(
      write_gguf(plan_gguf(path, ok, specs), specs,
                 [](size_t, int64_t, int64_t, std::byte*) { throw InputError("filler failed"); }),
      InputError);
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path.string() + ".partial"));
}

}  // namespace
}  // namespace gemmaserve
