// The safetensors writers: in-memory SafetensorsWriter and the streaming write_safetensors
// (plans, shards, chunking, parallel fill, failure cleanup), read back by the reader.
#include "io/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "core/error.h"
#include "core/thread_pool.h"
#include "io/json_file.h"
#include "test_support.h"

namespace gemmaserve {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

// Element i of tensor t as a float: distinct per tensor and position.
float value_of(size_t t, int64_t i) { return static_cast<float>(t * 1000003 + i) * 0.25f; }

TensorFiller pattern_filler(const std::vector<TensorSpec>& specs) {
  return [&specs](size_t t, int64_t first, int64_t count, std::byte* dst) {
    for (int64_t i = 0; i < count; ++i) {
      const float x = value_of(t, first + i);
      if (specs[t].dtype == DType::kF32) {
        std::memcpy(dst + i * 4, &x, 4);
      } else {
        const uint16_t h = f32_to_bf16(x);
        std::memcpy(dst + i * 2, &h, 2);
      }
    }
  };
}

void expect_pattern(const SafetensorsCheckpoint& ckpt, const std::vector<TensorSpec>& specs) {
  ASSERT_EQ(ckpt.all().size(), specs.size());
  for (size_t t = 0; t < specs.size(); ++t) {
    const TensorView* v = ckpt.find(specs[t].name);
    ASSERT_NE(v, nullptr) << specs[t].name;
    EXPECT_EQ(v->dtype, specs[t].dtype);
    EXPECT_EQ(v->shape, specs[t].shape);
    std::vector<float> got(static_cast<size_t>(v->numel()));
    if (got.empty()) continue;
    convert_to_f32(v->dtype, v->data, got.data(), got.size());
    for (size_t i = 0; i < got.size(); ++i) {
      float want = value_of(t, static_cast<int64_t>(i));
      if (v->dtype == DType::kBF16) want = bf16_to_f32(f32_to_bf16(want));
      ASSERT_EQ(got[i], want) << specs[t].name << " element " << i;
    }
  }
}

std::vector<TensorSpec> sample_specs() {
  return {{"a.weight", DType::kF32, {300, 7}},
          {"b.scalar", DType::kBF16, {1}},  // odd byte count before an f32 tensor
          {"c.weight", DType::kF32, {5, 3, 11}},
          {"d.empty", DType::kF32, {0, 4}},
          {"e.weight", DType::kBF16, {1001}},
          {"f.weight", DType::kF32, {64, 64}}};
}

TEST(SafetensorsWriter, InMemoryRoundTrip) {
  TempDir dir;
  SafetensorsWriter w;
  std::vector<float> a = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, -1e-3f};
  std::vector<uint16_t> b = {f32_to_bf16(0.5f), f32_to_bf16(-4.0f)};
  w.add("x", DType::kF32, {2, 3}, a.data(), a.size() * 4);
  w.add("y", DType::kBF16, {2}, b.data(), b.size() * 2);
  w.set_metadata("format", "pt");
  EXPECT_EQ(w.total_bytes(), 28u);
  w.write(dir.path() / "model.safetensors");
  SafetensorsFile f(dir.path() / "model.safetensors");
  ASSERT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  const TensorView& x = f.tensors().at("x");
  EXPECT_EQ(x.shape_string(), "[2, 3]");
  EXPECT_EQ(std::memcmp(x.data, a.data(), 24), 0);
  EXPECT_EQ(std::memcmp(f.tensors().at("y").data, b.data(), 4), 0);
  // Data starts 8-byte aligned (header padded with spaces).
  uint64_t header_len = 0;
  std::ifstream in(dir.path() / "model.safetensors", std::ios::binary);
  in.read(reinterpret_cast<char*>(&header_len), 8);
  EXPECT_EQ(header_len % 8, 0u);
  EXPECT_FALSE(fs::exists(dir.path() / "model.safetensors.partial"));
}

TEST(SafetensorsWriter, InMemoryRejectsWrongByteCount) {
  SafetensorsWriter w;
  float x[3] = {};
  try {
    w.add("x", DType::kF32, {2, 2}, x, sizeof x);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(),
                 "safetensors writer: tensor 'x' has 12 bytes but shape [2, 2] of F32 needs 16");
  }
}

TEST(SafetensorsWriter, InMemorySharded) {
  TempDir dir;
  SafetensorsWriter w;
  std::vector<float> big(100, 1.0f), small(10, 2.0f);
  w.add("big1", DType::kF32, {100}, big.data(), 400);
  w.add("big2", DType::kF32, {100}, big.data(), 400);
  w.add("small", DType::kF32, {10}, small.data(), 40);
  EXPECT_EQ(w.write_sharded(dir.path(), 500), 2);
  EXPECT_TRUE(fs::exists(dir.path() / "model-00001-of-00002.safetensors"));
  EXPECT_TRUE(fs::exists(dir.path() / "model-00002-of-00002.safetensors"));
  auto index = read_json_file(dir.path() / "model.safetensors.index.json");
  EXPECT_EQ(index["metadata"]["total_size"], 840);
  EXPECT_EQ(index["weight_map"]["big1"], "model-00001-of-00002.safetensors");
  EXPECT_EQ(index["weight_map"]["small"], "model-00002-of-00002.safetensors");
  SafetensorsCheckpoint ckpt(dir.path());
  EXPECT_EQ(ckpt.all().size(), 3u);
  EXPECT_EQ(ckpt.total_bytes(), 840u);
}

TEST(SafetensorsStream, SingleFileSmallChunksSerialAndParallelAgree) {
  const auto specs = sample_specs();
  TempDir a, b;
  const auto plan = plan_single_file(specs, {{"format", "pt"}});
  EXPECT_FALSE(plan.sharded);
  ASSERT_EQ(plan.files.size(), 1u);
  EXPECT_EQ(plan.files[0].name, "model.safetensors");
  StreamWriteOptions serial;
  serial.chunk_bytes = 100;  // tensors straddle many chunks, chunks hold several tensors
  uint64_t last = 0, calls = 0;
  serial.progress = [&](uint64_t done, uint64_t total, const std::string& file) {
    EXPECT_GE(done, last);
    EXPECT_EQ(total, plan.disk_bytes);
    EXPECT_EQ(file, "model.safetensors");
    last = done;
    ++calls;
  };
  write_safetensors(a.path(), specs, plan, pattern_filler(specs), serial);
  EXPECT_EQ(last, plan.disk_bytes);
  EXPECT_GT(calls, 10u);
  EXPECT_EQ(fs::file_size(a.path() / "model.safetensors"), plan.disk_bytes);

  ThreadPool pool(3);
  StreamWriteOptions parallel;
  parallel.pool = &pool;
  parallel.chunk_bytes = 1 << 21;
  // A tensor big enough to be split across threads.
  auto big_specs = specs;
  big_specs.push_back({"g.big", DType::kF32, {1 << 19}});
  write_safetensors(b.path(), big_specs, plan_single_file(big_specs, {{"format", "pt"}}),
                    pattern_filler(big_specs), parallel);
  expect_pattern(SafetensorsCheckpoint(a.path()), specs);
  expect_pattern(SafetensorsCheckpoint(b.path()), big_specs);
}

TEST(SafetensorsStream, MaxShardBytesPlan) {
  const auto specs = sample_specs();
  uint64_t total = 0;
  for (const auto& s : specs) total += s.nbytes();
  // Fits: one plain file.
  auto one = plan_max_shard_bytes(specs, total, {});
  EXPECT_FALSE(one.sharded);
  EXPECT_EQ(one.files.size(), 1u);
  EXPECT_EQ(one.data_bytes, total);
  // Too big: shards in spec order, each under the limit unless a single tensor is larger.
  auto sharded = plan_max_shard_bytes(specs, 9000, {});
  EXPECT_TRUE(sharded.sharded);
  ASSERT_EQ(sharded.files.size(), 3u);
  EXPECT_EQ(sharded.files[0].name, "model-00001-of-00003.safetensors");
  EXPECT_EQ(sharded.files[0].tensors, (std::vector<size_t>{0, 1}));
  EXPECT_EQ(sharded.files[1].tensors, (std::vector<size_t>{2, 3, 4}));
  EXPECT_EQ(sharded.files[2].tensors, (std::vector<size_t>{5}));  // 16384 bytes > the limit
  EXPECT_EQ(sharded.data_bytes, total);
  TempDir dir;
  write_safetensors(dir.path(), specs, sharded, pattern_filler(specs));
  expect_pattern(SafetensorsCheckpoint(dir.path()), specs);
}

TEST(SafetensorsStream, NumShardsPlanGivesExactlyNShards) {
  const auto specs = sample_specs();
  for (int n = 1; n <= 8; ++n) {
    auto plan = plan_num_shards(specs, n, {{"format", "pt"}});
    const size_t want = std::min<size_t>(static_cast<size_t>(n), specs.size());
    ASSERT_EQ(plan.files.size(), want) << n;
    EXPECT_TRUE(plan.sharded);
    size_t next = 0;
    for (const auto& f : plan.files) {
      ASSERT_FALSE(f.tensors.empty());
      for (size_t t : f.tensors) EXPECT_EQ(t, next++);
    }
    EXPECT_EQ(next, specs.size());
    TempDir dir;
    write_safetensors(dir.path(), specs, plan, pattern_filler(specs));
    expect_pattern(SafetensorsCheckpoint(dir.path()), specs);
    auto index = read_json_file(dir.path() / "model.safetensors.index.json");
    EXPECT_EQ(index["weight_map"].size(), specs.size());
  }
  EXPECT_THROW(plan_num_shards(specs, 0, {}), InputError);
}

TEST(SafetensorsStream, DuplicateNamesRejected) {
  std::vector<TensorSpec> specs = {{"a", DType::kF32, {1}}, {"a", DType::kF32, {2}}};
  try {
    plan_single_file(specs, {});
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "safetensors writer: duplicate tensor name 'a'");
  }
}

TEST(SafetensorsStream, FailedFillLeavesNoFile) {
  const auto specs = sample_specs();
  TempDir dir;
  auto plan = plan_single_file(specs, {});
  auto failing = [](size_t t, int64_t, int64_t, std::byte*) {
    if (t == 2) throw std::runtime_error("generator failed");
  };
  EXPECT_THROW(write_safetensors(dir.path(), specs, plan, failing), std::runtime_error);
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

TEST(SafetensorsStream, UnwritableDirectoryIsAnInputError) {
  TempDir dir;
  const fs::path file = dir.path() / "file";
  std::ofstream(file) << "x";
  const auto specs = sample_specs();
  EXPECT_THROW(
      write_safetensors(file / "sub", specs, plan_single_file(specs, {}), pattern_filler(specs)),
      InputError);
}

}  // namespace
}  // namespace gemmaserve
