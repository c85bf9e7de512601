// GGUF reader: every metadata type, tensor infos and alignment, and exact errors for bad files;
// plus reading a small synthetic gemma4 vocabulary into a Tokenizer, and a GGUF file seen through
// checkpoint/'s interface.
#include "io/gguf.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/gguf_checkpoint.h"
#include "core/error.h"
#include "gguf_builder.h"
#include "model/weights.h"
#include "test_support.h"
#include "tokenizer/tokenizer.h"

namespace gemmaserve {
namespace {

namespace fs = std::filesystem;
using testing::GgufBuilder;

fs::path write(const testing::TempDir& dir, const std::string& name, const std::string& bytes) {
  const fs::path p = dir.path() / name;
  std::ofstream(p, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return p;
}

std::string error_of(const fs::path& p) {
  try {
    GgufFile f(p);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

// The InputError of opening p as a checkpoint, or "(no error)".
std::string checkpoint_error_of(const fs::path& p) {
  try {
    GgufCheckpoint c(p);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(GgufTest, ReadsEveryMetadataType) {
  testing::TempDir dir;
  GgufBuilder b;
  b.kv("u8", GgufType::kUint8, GgufBuilder::pod<uint8_t>(200))
      .kv("i8", GgufType::kInt8, GgufBuilder::pod<int8_t>(-5))
      .kv("u16", GgufType::kUint16, GgufBuilder::pod<uint16_t>(60000))
      .kv("i16", GgufType::kInt16, GgufBuilder::pod<int16_t>(-300))
      .kv_u32("u32", 4000000000u)
      .kv("i32", GgufType::kInt32, GgufBuilder::pod<int32_t>(-7))
      .kv("f32", GgufType::kFloat32, GgufBuilder::pod<float>(1.5f))
      .kv_bool("bool", true)
      .kv_str("str", "héllo")
      .kv("u64", GgufType::kUint64, GgufBuilder::pod<uint64_t>(1ull << 40))
      .kv("i64", GgufType::kInt64, GgufBuilder::pod<int64_t>(-(1ll << 40)))
      .kv("f64", GgufType::kFloat64, GgufBuilder::pod<double>(-2.25))
      .kv_strings("strs", {"a", "", "ccc"})
      .kv_array<int32_t>("ints", GgufType::kInt32, {1, -2, 3})
      .kv_array<float>("floats", GgufType::kFloat32, {0.5f, 2.0f})
      .kv_array<uint8_t>("bools", GgufType::kBool, {1, 0});
  // An array of two arrays of uint16.
  std::string nested;
  GgufBuilder::append<uint32_t>(nested, static_cast<uint32_t>(GgufType::kArray));
  GgufBuilder::append<uint64_t>(nested, 2);
  for (uint16_t first : {uint16_t{10}, uint16_t{20}}) {
    GgufBuilder::append<uint32_t>(nested, static_cast<uint32_t>(GgufType::kUint16));
    GgufBuilder::append<uint64_t>(nested, 2);
    GgufBuilder::append<uint16_t>(nested, first);
    GgufBuilder::append<uint16_t>(nested, static_cast<uint16_t>(first + 1));
  }
  b.kv("nested", GgufType::kArray, nested);
  const GgufFile f(write(dir, "all.gguf", b.bytes()));

  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.metadata().size(), 17u);
  EXPECT_EQ(f.get("u8").as_int(), 200);
  EXPECT_EQ(f.get("i8").as_int(), -5);
  EXPECT_EQ(f.get("u16").as_int(), 60000);
  EXPECT_EQ(f.get("i16").as_int(), -300);
  EXPECT_EQ(f.get("u32").as_int(), 4000000000ll);
  EXPECT_EQ(f.get("i32").as_int(), -7);
  EXPECT_FLOAT_EQ(static_cast<float>(f.get("f32").as_float()), 1.5f);
  EXPECT_TRUE(f.get("bool").as_bool());
  EXPECT_EQ(f.get("str").as_string(), "héllo");
  EXPECT_EQ(f.get("u64").as_int(), 1ll << 40);
  EXPECT_EQ(f.get("i64").as_int(), -(1ll << 40));
  EXPECT_DOUBLE_EQ(f.get("f64").as_float(), -2.25);
  EXPECT_EQ(f.get("strs").as_string_array(), (std::vector<std::string_view>{"a", "", "ccc"}));
  EXPECT_EQ(f.get("ints").as_int_array(), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(f.get("floats").as_float_array(), (std::vector<double>{0.5, 2.0}));
  EXPECT_EQ(f.get("bools").as_bool_array(), (std::vector<bool>{true, false}));
  EXPECT_EQ(f.get("ints").array_type(), GgufType::kInt32);
  const auto& inner = f.get("nested").as_nested_array();
  ASSERT_EQ(inner.size(), 2u);
  EXPECT_EQ(inner[1].as_int_array(), (std::vector<int64_t>{20, 21}));
  EXPECT_EQ(f.find("absent"), nullptr);
}

TEST(GgufTest, ReadsTensorInfosAndAlignedData) {
  testing::TempDir dir;
  std::string data(64 + 34, '\0');
  const float w[2] = {1.0f, -1.0f};
  std::memcpy(data.data(), w, sizeof(w));
  data[64] = 'x';
  GgufBuilder b;
  b.kv_u32("general.alignment", 64)
      .tensor("w", {2}, /*F32*/ 0, 0)
      .tensor("q", {32, 1}, /*Q8_0*/ 8, 64)
      .data(data, 64);
  const GgufFile f(write(dir, "t.gguf", b.bytes()));
  EXPECT_EQ(f.alignment(), 64u);
  ASSERT_EQ(f.tensors().size(), 2u);
  const GgufTensorInfo& t0 = f.tensors()[0];
  EXPECT_EQ(t0.name, "w");
  EXPECT_EQ(t0.dims, std::vector<uint64_t>{2});
  EXPECT_EQ(t0.byte_size, 8u);
  float got[2];
  std::memcpy(got, t0.data, sizeof(got));
  EXPECT_EQ(got[1], -1.0f);
  const GgufTensorInfo& t1 = f.tensors()[1];
  EXPECT_EQ(t1.ggml_type, 8u);
  EXPECT_EQ(t1.offset, 64u);
  EXPECT_EQ(t1.byte_size, 34u);
  EXPECT_EQ(static_cast<char>(t1.data[0]), 'x');
  EXPECT_EQ(t1.data - t0.data, 64);
}

// GGUF's dims run innermost first; a checkpoint tensor's shape outermost first, as HF's.
TEST(GgufCheckpointTest, ListsTensorsWithShapeDtypeBytesAndMetadata) {
  testing::TempDir dir;
  std::string data(64 + 34, '\0');
  data[64] = 'x';
  GgufBuilder b;
  b.kv_str("general.architecture", "gemma4")
      .kv_u32("gemma4.block_count", 2)
      .kv_bool("gemma4.flag", true)
      .kv_array<uint32_t>("gemma4.heads", GgufType::kUint32, {4, 8})
      .kv_strings("tokenizer.ggml.tokens", {"a", "b"})
      .kv_u32("general.alignment", 64)
      .tensor("w", {3, 2}, /*F32*/ 0, 0)
      .tensor("q", {32, 1}, /*Q8_0*/ 8, 64)
      .data(data, 64);
  const fs::path path = write(dir, "m.gguf", b.bytes());
  const std::shared_ptr<const Checkpoint> ckpt = open_checkpoint(path);
  EXPECT_EQ(ckpt->format(), "gguf");
  EXPECT_EQ(ckpt->path(), path);
  EXPECT_EQ(ckpt->config_source(), path.string());
  const nlohmann::json want = {{"general.architecture", "gemma4"},
                               {"gemma4.block_count", 2},
                               {"gemma4.flag", true},
                               {"gemma4.heads", {4, 8}},
                               {"general.alignment", 64}};
  EXPECT_EQ(ckpt->config(), want);  // the vocabulary's string array is left to the tokenizer
  ASSERT_EQ(ckpt->tensors().size(), 2u);
  const CheckpointTensor* w = ckpt->find("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->dtype, DType::kF32);
  EXPECT_EQ(w->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(w->nbytes, 24u);
  EXPECT_EQ(w->file, path);
  const CheckpointTensor* q = ckpt->find("q");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->dtype, DType::kQ8_0);
  EXPECT_EQ(q->shape, (std::vector<int64_t>{1, 32}));
  EXPECT_EQ(q->nbytes, 34u);
  EXPECT_EQ(static_cast<char>(q->data[0]), 'x');
  EXPECT_EQ(ckpt->find("absent"), nullptr);
  EXPECT_EQ(ckpt->total_bytes(), 24u + 34u);
}

// Unknown ggml types: ggml_dequant_test.cpp.
TEST(GgufCheckpointTest, RefusesRepeatedNames) {
  testing::TempDir dir;
  const fs::path twice = write(dir, "twice.gguf",
                               GgufBuilder()
                                   .tensor("t", {1}, 0, 0)
                                   .tensor("t", {1}, 0, 32)
                                   .data(std::string(36, '\0'))
                                   .bytes());
  EXPECT_EQ(checkpoint_error_of(twice), twice.string() + ": tensor 't' appears twice");
}

// A GGUF file without an architecture is refused by name (gguf_model_test has the real ones).
TEST(GgufCheckpointTest, ModelLoaderRefusesAGgufFileWithoutArchitecture) {
  testing::TempDir dir;
  const fs::path path = write(dir, "m.gguf", GgufBuilder().kv_u32("n", 1).bytes());
  std::string error = "(no error)";
  try {
    load_model_weights(path);
  } catch (const InputError& e) {
    error = e.what();
  }
  EXPECT_EQ(error, path.string() + ": missing metadata key 'general.architecture'");
}

TEST(GgufTest, RejectsBadMagicAndVersion) {
  testing::TempDir dir;
  const fs::path magic = write(dir, "magic.gguf", "GGML\x03\0\0\0");
  EXPECT_EQ(error_of(magic), magic.string() + ": not a GGUF file (bad magic)");
  const fs::path empty = write(dir, "empty.gguf", "");
  EXPECT_EQ(error_of(empty), empty.string() + ": not a GGUF file (bad magic)");
  const fs::path v1 = write(dir, "v1.gguf", GgufBuilder(1).bytes());
  EXPECT_EQ(error_of(v1), v1.string() + ": unsupported GGUF version 1 (expected 2 or 3)");
  EXPECT_EQ(GgufFile(write(dir, "v2.gguf", GgufBuilder(2).bytes())).version(), 2u);
  EXPECT_FALSE(GgufFile::has_gguf_magic(magic));
  EXPECT_FALSE(GgufFile::has_gguf_magic(dir.path() / "missing.gguf"));
}

TEST(GgufTest, TruncatedFilesFailWithTheOffset) {
  testing::TempDir dir;
  const std::string full = GgufBuilder()
                               .kv_str("name", "value")
                               .kv_strings("list", {"x", "yy"})
                               .tensor("w", {4}, 0, 0)
                               .data(std::string(16, '\1'))
                               .bytes();
  EXPECT_NO_THROW(GgufFile(write(dir, "full.gguf", full)));
  for (size_t n = 4; n < full.size(); ++n) {
    const fs::path p = write(dir, "cut.gguf", full.substr(0, n));
    EXPECT_THROW(GgufFile{p}, InputError) << "cut at " << n;
  }
  const fs::path header = write(dir, "h.gguf", full.substr(0, 8));
  EXPECT_EQ(error_of(header),
            header.string() + ": truncated GGUF file (tensor count at byte offset 8)");
  // A string whose length runs past the end of the file.
  std::string bad_key = GgufBuilder().bytes();
  bad_key[16] = 1;  // one key-value pair
  GgufBuilder::append<uint64_t>(bad_key, 100);
  bad_key += "abcdefgh";
  const fs::path key = write(dir, "key.gguf", bad_key);
  EXPECT_EQ(error_of(key), key.string() + ": truncated GGUF file (metadata key at byte offset 24)");
  const fs::path data = write(dir, "data.gguf", full.substr(0, full.size() - 1));
  EXPECT_EQ(
      error_of(data),
      data.string() + ": tensor 'w' data extends past the end of the file (truncated GGUF file)");
}

TEST(GgufTest, RejectsUnknownTypesAndReportsTypeMismatches) {
  testing::TempDir dir;
  const fs::path unknown =
      write(dir, "u.gguf", GgufBuilder().kv("odd", static_cast<GgufType>(13), "").bytes());
  EXPECT_EQ(error_of(unknown),
            unknown.string() + ": unknown GGUF metadata value type 13 for key 'odd'");
  std::string arr;
  GgufBuilder::append<uint32_t>(arr, 99);
  GgufBuilder::append<uint64_t>(arr, 0);
  const fs::path bad_array =
      write(dir, "a.gguf", GgufBuilder().kv("arr", GgufType::kArray, arr).bytes());
  EXPECT_EQ(error_of(bad_array),
            bad_array.string() + ": unknown GGUF array element type 99 for key 'arr'");
  const fs::path dup = write(dir, "d.gguf", GgufBuilder().kv_u32("k", 1).kv_u32("k", 2).bytes());
  EXPECT_EQ(error_of(dup), dup.string() + ": duplicate metadata key 'k'");

  const fs::path ok =
      write(dir, "ok.gguf", GgufBuilder().kv_u32("n", 7).kv_strings("s", {"a"}).bytes());
  const GgufFile f(ok);
  try {
    (void)f.get("n").as_string();
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), ok.string() + ": metadata key 'n' is uint32, expected string");
  }
  try {
    (void)f.get("s").as_int_array();
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              ok.string() + ": metadata key 's' is array of string, expected array of integers");
  }
  try {
    (void)f.get("nope");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), ok.string() + ": missing metadata key 'nope'");
  }
}

TEST(GgufTest, RejectsBadTensorInfos) {
  testing::TempDir dir;
  const fs::path dims =
      write(dir, "dims.gguf", GgufBuilder().tensor("t", {1, 1, 1, 1, 1}, 0, 0).bytes());
  EXPECT_EQ(error_of(dims), dims.string() + ": tensor 't' has 5 dimensions (at most 4)");
  const fs::path off = write(
      dir, "off.gguf", GgufBuilder().tensor("t", {1}, 0, 4).data(std::string(64, '\0')).bytes());
  EXPECT_EQ(error_of(off),
            off.string() + ": tensor 't' offset 4 is not a multiple of the alignment 32");
  const fs::path align =
      write(dir, "al.gguf", GgufBuilder().kv_u32("general.alignment", 48).bytes());
  EXPECT_EQ(error_of(align), align.string() + ": general.alignment 48 is not a power of two");
}

// A tiny gemma4-style vocabulary: bytes, ▁, a few letters and merges, specials.
GgufBuilder tiny_vocab(const std::string& model = "gemma4",
                       const std::vector<std::string>& merges = {"h i", "\u2581 hi"}) {
  std::vector<std::string> tokens = {"<pad>", "<eos>", "<bos>", "<unk>", "<|turn>", "<|\"|>"};
  std::vector<int32_t> types = {3, 3, 3, 3, 3, 4};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    tokens.push_back(name);
    types.push_back(6);
  }
  for (const char* t : {"\u2581", "h", "i", "hi", "\u2581hi"}) {
    tokens.push_back(t);
    types.push_back(1);
  }
  GgufBuilder b;
  b.kv_str("tokenizer.ggml.model", model)
      .kv_strings("tokenizer.ggml.tokens", tokens)
      .kv_array<int32_t>("tokenizer.ggml.token_type", GgufType::kInt32, types)
      .kv_strings("tokenizer.ggml.merges", merges)
      .kv_u32("tokenizer.ggml.bos_token_id", 2)
      .kv_u32("tokenizer.ggml.eos_token_id", 1)
      .kv_u32("tokenizer.ggml.unknown_token_id", 3)
      .kv_bool("tokenizer.ggml.add_bos_token", true);
  return b;
}

TEST(TokenizerGgufVocabTest, SyntheticGemma4VocabularyEncodesAndDecodes) {
  testing::TempDir dir;
  const Tokenizer t = Tokenizer::from_path(write(dir, "v.gguf", tiny_vocab().bytes()));
  const int32_t sp = 262;  // "▁" follows the 6 specials and 256 bytes
  EXPECT_EQ(t.vocab_size(), 267u);
  EXPECT_EQ(t.encode("hi hi", true, true), (std::vector<int32_t>{2, sp + 3, sp + 4}));
  EXPECT_EQ(t.encode("<|turn>hi<|\"|>", false, false),
            (std::vector<int32_t>{6 + '<', 6 + '|', 6 + 't', 6 + 'u', 6 + 'r', 6 + 'n', 6 + '>',
                                  sp + 3, 5}));
  EXPECT_EQ(t.decode(t.encode("hi <|turn>x", true, true), true), "hi x");
  EXPECT_EQ(t.bos_id(), 2);
  EXPECT_EQ(t.eos_ids(), std::vector<int32_t>{1});
}

TEST(TokenizerGgufVocabTest, RejectsOtherTokenizerModels) {
  testing::TempDir dir;
  const fs::path p = write(dir, "llama.gguf", tiny_vocab("llama").bytes());
  try {
    Tokenizer::from_path(p);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(
        std::string(e.what()),
        p.string() +
            ": tokenizer.ggml.model 'llama' is not supported (only 'gemma4' BPE vocabularies)");
  }
  const fs::path bad_merge = write(dir, "m.gguf", tiny_vocab("gemma4", {"h i", "hq"}).bytes());
  try {
    Tokenizer::from_path(bad_merge);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              bad_merge.string() +
                  ": tokenizer.ggml.merges[1] 'hq' is not two pieces separated by a space");
  }
  // A merge of a piece outside the vocabulary never applies (trimmed vocabularies have them).
  const fs::path unused = write(dir, "u.gguf", tiny_vocab("gemma4", {"h i", "h q"}).bytes());
  EXPECT_NO_THROW(Tokenizer::from_path(unused));
}

}  // namespace
}  // namespace gemmaserve
