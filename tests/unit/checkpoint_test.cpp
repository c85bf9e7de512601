// checkpoint/'s interface over a Hugging Face folder: config.json, every tensor of every shard by
// name with its dtype, shape and bytes, and the error for a folder without config.json. (GGUF's
// side is in gguf_test.cpp, beside its file builder.)
#include "checkpoint/checkpoint.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"
#include "test_support.h"

namespace gemmaserve {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

void write_config(const fs::path& dir, const nlohmann::json& config) {
  std::ofstream(dir / "config.json") << config.dump();
}

TEST(CheckpointTest, HfFolderListsEveryShardsTensorsAndItsConfig) {
  TempDir tmp;
  const nlohmann::json config = {{"architectures", {"Gemma4ForCausalLM"}}, {"hidden_size", 8}};
  write_config(tmp.path(), config);
  const float a[6] = {1, 2, 3, 4, 5, 6};
  const uint16_t b[2] = {0x3f80, 0xbf80};
  SafetensorsWriter w;
  w.add("model.a.weight", DType::kF32, {2, 3}, a, sizeof a);
  w.add("model.b.weight", DType::kBF16, {2}, b, sizeof b);
  ASSERT_EQ(w.write_sharded(tmp.path(), 16), 2);  // one tensor per shard, plus the index

  const std::shared_ptr<const Checkpoint> ckpt = open_checkpoint(tmp.path());
  EXPECT_EQ(ckpt->format(), "safetensors");
  EXPECT_EQ(ckpt->path(), tmp.path());
  EXPECT_EQ(ckpt->config(), config);
  EXPECT_EQ(ckpt->config_source(), (tmp.path() / "config.json").string());
  ASSERT_EQ(ckpt->tensors().size(), 2u);
  const CheckpointTensor* ta = ckpt->find("model.a.weight");
  ASSERT_NE(ta, nullptr);
  EXPECT_EQ(ta->dtype, DType::kF32);
  EXPECT_EQ(ta->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(ta->nbytes, sizeof a);
  EXPECT_EQ(std::memcmp(ta->data, a, sizeof a), 0);
  const CheckpointTensor* tb = ckpt->find("model.b.weight");
  ASSERT_NE(tb, nullptr);
  EXPECT_EQ(tb->dtype, DType::kBF16);
  EXPECT_NE(tb->file, ta->file);  // each from its own shard
  EXPECT_EQ(ckpt->find("model.c.weight"), nullptr);
  EXPECT_EQ(ckpt->total_bytes(), sizeof a + sizeof b);
}

TEST(CheckpointTest, HfFolderWithoutConfigNamesTheMissingFile) {
  TempDir tmp;
  const float a[1] = {1};
  SafetensorsWriter w;
  w.add("a", DType::kF32, {1}, a, sizeof a);
  w.write(tmp.path() / "model.safetensors");
  std::string error = "(no error)";
  try {
    open_checkpoint(tmp.path());
  } catch (const InputError& e) {
    error = e.what();
  }
  EXPECT_EQ(error, (tmp.path() / "config.json").string() +
                       ": missing (not a Hugging Face checkpoint folder?)");
}

}  // namespace
}  // namespace gemmaserve
