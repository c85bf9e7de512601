// Every way a checkpoint folder can be broken gives an InputError whose message names the file
// (and the tensor or field) at fault; nothing crashes and nothing is half-loaded.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "model/test_model_presets.h"
#include "model/weights.h"
#include "test_support.h"

namespace gemmaserve {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::TempDir;

constexpr const char* kPrefix = "model.language_model.";

// The tiny preset (PLE, MoE, k_eq_v, KV sharing) shrunk to a 512-token vocabulary, without
// its vision tower (gemma4_vision_test checks the tower's tensors).
json small_config() {
  json c = test_model_config("tiny");
  c["vision_config"] = nullptr;
  c["text_config"]["vocab_size"] = 512;
  c["text_config"]["vocab_size_per_layer_input"] = 512;
  return c;
}

struct Entry {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<std::byte> data;
};

std::vector<Entry> make_entries(const json& config) {
  std::vector<Entry> out;
  for (const auto& t : text_decoder_tensors(parse_model_config(config, "test"), DType::kBF16)) {
    Entry e{t.spec.name, t.spec.dtype, t.spec.shape, std::vector<std::byte>(t.spec.nbytes())};
    fill_test_tensor(t, 1, 0, t.spec.numel(), e.data.data());
    out.push_back(std::move(e));
  }
  return out;
}

Entry* find(std::vector<Entry>& es, const std::string& short_name) {
  for (auto& e : es) {
    if (e.name == kPrefix + short_name) return &e;
  }
  ADD_FAILURE() << "no tensor " << short_name;
  return nullptr;
}

void write_text(const fs::path& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << s;
}

void write_config(const fs::path& dir, const json& config) {
  write_text(dir / "config.json", config.dump(2));
}

void write_tensors(const fs::path& file, const std::vector<Entry>& es) {
  SafetensorsWriter w;
  for (const auto& e : es) w.add(e.name, e.dtype, e.shape, e.data.data(), e.data.size());
  w.write(file);
}

// A complete, valid checkpoint; tests then break one thing.
void write_model(const fs::path& dir, const json& config, const std::vector<Entry>& es) {
  write_config(dir, config);
  write_tensors(dir / "model.safetensors", es);
}

// A raw safetensors file: 8-byte length, the header text as given, then `data_bytes` zeros.
void write_raw(const fs::path& file, const std::string& header, size_t data_bytes,
               std::optional<uint64_t> stated_len = std::nullopt) {
  std::string bytes(8, '\0');
  const uint64_t len = stated_len.value_or(header.size());
  std::memcpy(bytes.data(), &len, 8);
  bytes += header;
  bytes.append(data_bytes, '\0');
  write_text(file, bytes);
}

// Loads and returns the InputError's message ("" and a test failure when nothing throws).
std::string load_error(const fs::path& dir) {
  try {
    ModelWeights w = load_model_weights(dir);
    ADD_FAILURE() << "load_model_weights(" << dir << ") did not throw";
  } catch (const InputError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not an InputError: " << e.what();
  }
  return "";
}

class LoaderErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = small_config();
    entries_ = make_entries(config_);
  }
  const fs::path& dir() const { return tmp_.path(); }
  std::string file() const { return (dir() / "model.safetensors").string(); }
  std::string config_file() const { return (dir() / "config.json").string(); }

  TempDir tmp_;
  json config_;
  std::vector<Entry> entries_;
};

TEST_F(LoaderErrors, ValidModelLoads) {
  write_model(dir(), config_, entries_);
  ModelWeights w = load_model_weights(dir());
  EXPECT_EQ(w.layers.size(), 6u);
  EXPECT_EQ(w.config.tensor_prefix, kPrefix);
}

// --- config.json ---

TEST_F(LoaderErrors, MissingConfig) {
  write_tensors(dir() / "model.safetensors", entries_);
  EXPECT_EQ(load_error(dir()), config_file() + ": missing (not a Hugging Face checkpoint folder?)");
}

TEST_F(LoaderErrors, MalformedConfigJson) {
  write_model(dir(), config_, entries_);
  write_text(dir() / "config.json", "{\"architectures\": [\"Gemma4ForConditionalGeneration\",");
  const std::string msg = load_error(dir());
  EXPECT_EQ(msg.rfind(config_file() + ": malformed JSON: ", 0), 0u) << msg;
}

TEST_F(LoaderErrors, ConfigNotAnObject) {
  write_model(dir(), config_, entries_);
  write_text(dir() / "config.json", "[1, 2]");
  EXPECT_EQ(load_error(dir()), config_file() + ": config must be a JSON object");
}

TEST_F(LoaderErrors, UnknownArchitecture) {
  config_["architectures"] = {"LlamaForCausalLM"};
  write_model(dir(), config_, entries_);
  EXPECT_EQ(load_error(dir()), config_file() +
                                   ": unsupported architecture 'LlamaForCausalLM' (supported: "
                                   "Gemma4ForConditionalGeneration, Gemma4ForCausalLM, "
                                   "Gemma4UnifiedForConditionalGeneration, "
                                   "Gemma4UnifiedForCausalLM)");
}

TEST_F(LoaderErrors, NoArchitectureAndForeignModelType) {
  config_.erase("architectures");
  config_["model_type"] = "llama";
  write_model(dir(), config_, entries_);
  EXPECT_EQ(load_error(dir()),
            config_file() + ": no 'architectures' and model_type 'llama' is not a Gemma 4 type");
}

TEST_F(LoaderErrors, ConditionalGenerationWithoutTextConfig) {
  config_.erase("text_config");
  write_model(dir(), config_, entries_);
  EXPECT_EQ(load_error(dir()), config_file() +
                                   ": field 'text_config' is required for "
                                   "Gemma4ForConditionalGeneration");
}

TEST_F(LoaderErrors, WrongFieldType) {
  config_["text_config"]["hidden_size"] = "64";
  write_model(dir(), config_, entries_);
  EXPECT_EQ(load_error(dir()),
            config_file() + ": field 'text_config.hidden_size' must be an integer");
}

TEST_F(LoaderErrors, KvHeadsNotDividingHeads) {
  config_["text_config"]["num_key_value_heads"] = 3;
  write_model(dir(), config_, entries_);
  EXPECT_EQ(load_error(dir()),
            config_file() + ": layer 0 has 3 KV heads, which must divide 4 attention heads");
}

TEST_F(LoaderErrors, LayerTypesOfWrongLength) {
  config_["text_config"]["layer_types"].erase(0);
  write_model(dir(), config_, entries_);
  EXPECT_EQ(load_error(dir()), config_file() +
                                   ": field 'text_config.layer_types' must be a list of "
                                   "num_hidden_layers (6) layer types");
}

TEST_F(LoaderErrors, UnknownLayerType) {
  config_["text_config"]["layer_types"][2] = "chunked_attention";
  write_model(dir(), config_, entries_);
  EXPECT_EQ(load_error(dir()), config_file() +
                                   ": field 'text_config.layer_types' holds "
                                   "'\"chunked_attention\"' (expected sliding_attention or "
                                   "full_attention)");
}

TEST_F(LoaderErrors, RopeParametersNotKeyedByLayerType) {
  config_["text_config"]["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1e4}};
  write_model(dir(), config_, entries_);
  EXPECT_EQ(load_error(dir()), config_file() +
                                   ": field 'text_config.rope_parameters' must be keyed by layer "
                                   "type (sliding_attention, full_attention)");
}

TEST_F(LoaderErrors, TooManyKvSharedLayers) {
  config_["text_config"]["num_kv_shared_layers"] = 6;
  write_model(dir(), config_, entries_);
  EXPECT_EQ(load_error(dir()), config_file() +
                                   ": field 'text_config.num_kv_shared_layers' must be smaller "
                                   "than num_hidden_layers");
}

TEST_F(LoaderErrors, MoeTopKLargerThanExperts) {
  config_["text_config"]["top_k_experts"] = 5;
  write_model(dir(), config_, entries_);
  EXPECT_EQ(load_error(dir()),
            config_file() + ": field 'text_config.top_k_experts' must be in [1, num_experts]");
}

TEST_F(LoaderErrors, PerLayerConfigBadKey) {
  config_["text_config"]["per_layer_config"] = {{"x", {{"head_dim", 64}}}};
  write_model(dir(), config_, entries_);
  EXPECT_EQ(load_error(dir()), config_file() +
                                   ": field 'text_config.per_layer_config' has key 'x' that is "
                                   "not a layer index < 6");
}

TEST_F(LoaderErrors, PerLayerConfigKeyOutOfRange) {
  config_["text_config"]["per_layer_config"] = {{"6", {{"head_dim", 64}}}};
  write_model(dir(), config_, entries_);
  EXPECT_EQ(load_error(dir()), config_file() +
                                   ": field 'text_config.per_layer_config' has key '6' that is "
                                   "not a layer index < 6");
}

TEST_F(LoaderErrors, PerLayerConfigSignedKey) {
  config_["text_config"]["per_layer_config"] = {{"+1", {{"head_dim", 64}}}};
  write_model(dir(), config_, entries_);
  EXPECT_EQ(load_error(dir()), config_file() +
                                   ": field 'text_config.per_layer_config' has key '+1' that is "
                                   "not a layer index < 6");
}

TEST_F(LoaderErrors, PerLayerConfigTwoKeysForOneLayer) {
  config_["text_config"]["per_layer_config"] = {{"1", {{"head_dim", 64}}},
                                                {"01", {{"head_dim", 64}}}};
  write_model(dir(), config_, entries_);
  EXPECT_EQ(load_error(dir()), config_file() +
                                   ": field 'text_config.per_layer_config' has two keys for "
                                   "layer 1");
}

TEST_F(LoaderErrors, PerLayerConfigUnsupportedAttribute) {
  config_["text_config"]["per_layer_config"] = {{"1", {{"intermediate_size", 64}}}};
  write_model(dir(), config_, entries_);
  EXPECT_EQ(load_error(dir()), config_file() +
                                   ": field 'text_config.per_layer_config.1.intermediate_size' "
                                   "is not supported (per-layer head_dim and num_key_value_heads "
                                   "only)");
}

TEST_F(LoaderErrors, PerLayerConfigEntryNotAnObject) {
  config_["text_config"]["per_layer_config"] = {{"1", 64}};
  write_model(dir(), config_, entries_);
  EXPECT_EQ(load_error(dir()),
            config_file() + ": field 'text_config.per_layer_config.1' must be an object");
}

TEST_F(LoaderErrors, PerLayerConfigKvHeadsNotDividingHeads) {
  config_["text_config"]["per_layer_config"] = {
      {"1", {{"head_dim", 64}, {"num_key_value_heads", 3}}},
      {"5", {{"head_dim", 64}, {"num_key_value_heads", 1}}}};
  write_model(dir(), config_, entries_);
  EXPECT_EQ(load_error(dir()),
            config_file() + ": layer 1 has 3 KV heads, which must divide 4 attention heads");
}

TEST_F(LoaderErrors, KvSharedLayerWithDifferentGeometry) {
  // Layer 5 (full, KV-shared) reads layer 1's cache but would have another head_dim.
  config_["text_config"]["per_layer_config"] = {
      {"1", {{"head_dim", 64}, {"num_key_value_heads", 1}}},
      {"5", {{"head_dim", 32}, {"num_key_value_heads", 1}}}};
  write_model(dir(), config_, entries_);
  EXPECT_EQ(load_error(dir()), config_file() +
                                   ": KV-shared layer 5 has a different head geometry from its "
                                   "source layer 1");
}

// HF writes per_layer_config keys zero-padded to a common width; such a config must load
// with the same geometry as the global_head_dim form (the loader used to miss "01").
TEST_F(LoaderErrors, PerLayerConfigZeroPaddedKeysLoad) {
  json c = config_;
  c["text_config"].erase("global_head_dim");
  c["text_config"].erase("num_global_key_value_heads");
  c["text_config"]["per_layer_config"] = {{"01", {{"head_dim", 64}, {"num_key_value_heads", 1}}},
                                          {"05", {{"head_dim", 64}, {"num_key_value_heads", 1}}}};
  write_model(dir(), c, entries_);
  ModelWeights w = load_model_weights(dir());
  const auto& layers = w.config.text.layers;
  EXPECT_EQ(layers[1].head_dim, 64);
  EXPECT_EQ(layers[1].num_kv_heads, 1);
  EXPECT_EQ(layers[5].head_dim, 64);
  EXPECT_EQ(layers[0].head_dim, 32);
  EXPECT_EQ(layers[0].num_kv_heads, 2);
}

// --- safetensors files ---

TEST_F(LoaderErrors, MissingSafetensors) {
  write_config(dir(), config_);
  EXPECT_EQ(
      load_error(dir()),
      dir().string() + ": no model.safetensors, model.safetensors.index.json or *.safetensors");
}

TEST_F(LoaderErrors, FileTooSmall) {
  write_config(dir(), config_);
  write_text(dir() / "model.safetensors", "abc");
  EXPECT_EQ(load_error(dir()), file() + ": too small to be a safetensors file");
}

TEST_F(LoaderErrors, HeaderLargerThanFile) {
  write_config(dir(), config_);
  write_raw(dir() / "model.safetensors", "{}", 0, 1000);
  EXPECT_EQ(load_error(dir()),
            file() + ": safetensors header length 1000 is larger than the file (10 bytes)");
}

TEST_F(LoaderErrors, MalformedHeaderJson) {
  write_config(dir(), config_);
  write_raw(dir() / "model.safetensors", "{\"a\": {\"dtype\": ", 0);
  const std::string msg = load_error(dir());
  EXPECT_EQ(msg.rfind(file() + ": malformed safetensors header: ", 0), 0u) << msg;
}

TEST_F(LoaderErrors, HeaderNotAnObject) {
  write_config(dir(), config_);
  write_raw(dir() / "model.safetensors", "[1,2,3]", 0);
  EXPECT_EQ(load_error(dir()), file() + ": safetensors header is not a JSON object");
}

TEST_F(LoaderErrors, HeaderEntryMissingFields) {
  write_config(dir(), config_);
  write_raw(dir() / "model.safetensors", R"({"x": {"dtype": "F32", "shape": [2]}})", 8);
  EXPECT_EQ(load_error(dir()),
            file() + ": tensor 'x': header entry needs dtype, shape and two data_offsets");
}

TEST_F(LoaderErrors, UnknownDtype) {
  write_config(dir(), config_);
  write_raw(dir() / "model.safetensors",
            R"({"x": {"dtype": "F8_E9M9", "shape": [2], "data_offsets": [0, 2]}})", 2);
  EXPECT_EQ(load_error(dir()), file() + ": tensor 'x': unknown dtype 'F8_E9M9'");
}

TEST_F(LoaderErrors, NegativeShape) {
  write_config(dir(), config_);
  write_raw(dir() / "model.safetensors",
            R"({"x": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", 8);
  EXPECT_EQ(load_error(dir()), file() + ": tensor 'x': shape must hold non-negative integers");
}

TEST_F(LoaderErrors, DataSizeDisagreesWithShape) {
  write_config(dir(), config_);
  write_raw(dir() / "model.safetensors",
            R"({"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 8]}})", 8);
  EXPECT_EQ(load_error(dir()),
            file() + ": tensor 'x': 8 bytes of data but shape [4] of F32 needs 16");
}

TEST_F(LoaderErrors, OffsetsEndBeforeBegin) {
  write_config(dir(), config_);
  write_raw(dir() / "model.safetensors",
            R"({"x": {"dtype": "F32", "shape": [0], "data_offsets": [8, 4]}})", 8);
  EXPECT_EQ(load_error(dir()), file() + ": tensor 'x': data_offsets end before they begin");
}

TEST_F(LoaderErrors, TruncatedData) {
  write_config(dir(), config_);
  write_raw(dir() / "model.safetensors",
            R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
            R"( "b": {"dtype": "F32", "shape": [100], "data_offsets": [8, 408]}})",
            200);
  EXPECT_EQ(load_error(dir()), file() +
                                   ": tensor 'b': data_offsets [8, 408) run past the end of the "
                                   "data (200 bytes; file truncated?)");
}

TEST_F(LoaderErrors, TruncatedRealCheckpoint) {
  write_model(dir(), config_, entries_);
  fs::resize_file(dir() / "model.safetensors", fs::file_size(dir() / "model.safetensors") - 1);
  const std::string msg = load_error(dir());
  EXPECT_EQ(msg.rfind(file() + ": tensor '", 0), 0u) << msg;
  EXPECT_NE(msg.find("run past the end of the data"), std::string::npos) << msg;
}

TEST_F(LoaderErrors, OverlappingOffsets) {
  write_config(dir(), config_);
  write_raw(dir() / "model.safetensors",
            R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},)"
            R"( "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})",
            24);
  EXPECT_EQ(load_error(dir()), file() + ": tensors 'a' and 'b' have overlapping data_offsets");
}

TEST_F(LoaderErrors, MissingTensor) {
  std::erase_if(entries_, [](const Entry& e) {
    return e.name == std::string(kPrefix) + "layers.2.mlp.up_proj.weight";
  });
  write_model(dir(), config_, entries_);
  EXPECT_EQ(load_error(dir()),
            dir().string() + ": missing tensor 'model.language_model.layers.2.mlp.up_proj.weight'");
}

TEST_F(LoaderErrors, MissingEmbedding) {
  std::erase_if(entries_, [](const Entry& e) {
    return e.name == std::string(kPrefix) + "embed_tokens.weight";
  });
  write_model(dir(), config_, entries_);
  EXPECT_EQ(load_error(dir()),
            dir().string() + ": missing tensor 'model.language_model.embed_tokens.weight'");
}

TEST_F(LoaderErrors, MissingVOnLayerWithoutKEqV) {
  config_["text_config"]["attention_k_eq_v"] = false;
  config_["text_config"]["num_global_key_value_heads"] = nullptr;
  // Full layer 1 now has 2 KV heads of 64 and needs v_proj.
  auto entries = make_entries(config_);
  std::erase_if(entries, [](const Entry& e) {
    return e.name == std::string(kPrefix) + "layers.1.self_attn.v_proj.weight";
  });
  write_model(dir(), config_, entries);
  EXPECT_EQ(load_error(dir()), dir().string() +
                                   ": missing tensor "
                                   "'model.language_model.layers.1.self_attn.v_proj.weight'");
}

TEST_F(LoaderErrors, WrongShape) {
  Entry* q = find(entries_, "layers.1.self_attn.q_proj.weight");  // [4*64, 64] on a full layer
  ASSERT_NE(q, nullptr);
  q->shape = {128, 64};
  q->data.resize(128 * 64 * 2);
  write_model(dir(), config_, entries_);
  EXPECT_EQ(load_error(dir()), file() +
                                   ": tensor 'model.language_model.layers.1.self_attn.q_proj."
                                   "weight' has shape [128, 64], expected [256, 64]");
}

TEST_F(LoaderErrors, WrongNormShape) {
  Entry* n = find(entries_, "layers.0.self_attn.k_norm.weight");
  ASSERT_NE(n, nullptr);
  n->shape = {64};
  n->data.resize(128);
  write_model(dir(), config_, entries_);
  EXPECT_EQ(load_error(dir()), file() +
                                   ": tensor 'model.language_model.layers.0.self_attn.k_norm."
                                   "weight' has shape [64], expected [32]");
}

TEST_F(LoaderErrors, WrongLayerScalarShape) {
  Entry* s = find(entries_, "layers.3.layer_scalar");
  ASSERT_NE(s, nullptr);
  s->shape = {2};
  s->data.resize(4);
  write_model(dir(), config_, entries_);
  EXPECT_EQ(load_error(dir()), file() +
                                   ": tensor 'model.language_model.layers.3.layer_scalar' has "
                                   "shape [2], expected [1]");
}

TEST_F(LoaderErrors, WrongExpertShape) {
  Entry* e = find(entries_, "layers.0.experts.gate_up_proj");  // [4, 64, 64]
  ASSERT_NE(e, nullptr);
  e->shape = {4, 32, 64};
  e->data.resize(4 * 32 * 64 * 2);
  write_model(dir(), config_, entries_);
  EXPECT_EQ(load_error(dir()), file() +
                                   ": tensor 'model.language_model.layers.0.experts.gate_up_proj' "
                                   "has shape [4, 32, 64], expected [4, 64, 64]");
}

TEST_F(LoaderErrors, UnsupportedDtypeForWeight) {
  Entry* e = find(entries_, "embed_tokens.weight");
  ASSERT_NE(e, nullptr);
  e->dtype = DType::kI32;
  e->data.resize(e->data.size() * 2);
  write_model(dir(), config_, entries_);
  EXPECT_EQ(load_error(dir()), file() +
                                   ": tensor 'model.language_model.embed_tokens.weight' has "
                                   "unsupported dtype I32 (expected BF16, F16 or F32)");
}

TEST_F(LoaderErrors, UnsupportedDtypeForNorm) {
  Entry* e = find(entries_, "norm.weight");
  ASSERT_NE(e, nullptr);
  e->dtype = DType::kI16;
  write_model(dir(), config_, entries_);
  EXPECT_EQ(load_error(dir()), file() +
                                   ": tensor 'model.language_model.norm.weight' has unsupported "
                                   "dtype I16 (expected BF16, F16 or F32)");
}

TEST_F(LoaderErrors, UntiedWithoutLmHead) {
  config_["tie_word_embeddings"] = false;
  write_model(dir(), config_, entries_);
  EXPECT_EQ(load_error(dir()), dir().string() + ": missing tensor 'lm_head.weight'");
}

TEST_F(LoaderErrors, TiedLmHeadOfWrongShape) {
  entries_.push_back(
      Entry{"lm_head.weight", DType::kBF16, {512, 32}, std::vector<std::byte>(512 * 32 * 2)});
  write_model(dir(), config_, entries_);
  EXPECT_EQ(load_error(dir()),
            file() + ": tensor 'lm_head.weight' has shape [512, 32], expected [512, 64]");
}

// --- sharded checkpoints ---

// Writes entries_ as two shards plus index.
void write_two_shards(const fs::path& dir, const std::vector<Entry>& es) {
  std::vector<TensorSpec> specs;
  for (const auto& e : es) specs.push_back({e.name, e.dtype, e.shape});
  write_safetensors(dir, specs, plan_num_shards(specs, 2, {}),
                    [&es](size_t t, int64_t first, int64_t count, std::byte* dst) {
                      const size_t esize = dtype_size(es[t].dtype);
                      std::memcpy(dst, es[t].data.data() + first * esize, count * esize);
                    });
}

TEST_F(LoaderErrors, ShardedLoads) {
  write_config(dir(), config_);
  write_two_shards(dir(), entries_);
  ModelWeights w = load_model_weights(dir());
  EXPECT_EQ(w.layers.size(), 6u);
}

TEST_F(LoaderErrors, IndexNamesMissingShard) {
  write_config(dir(), config_);
  write_two_shards(dir(), entries_);
  fs::remove(dir() / "model-00002-of-00002.safetensors");
  const std::string msg = load_error(dir());
  const std::string index = (dir() / "model.safetensors.index.json").string();
  EXPECT_EQ(msg.rfind(index + ": shard 'model-00002-of-00002.safetensors' (holding tensor '", 0),
            0u)
      << msg;
  EXPECT_NE(msg.find("') does not exist"), std::string::npos) << msg;
}

TEST_F(LoaderErrors, IndexListsTensorMissingFromShard) {
  write_config(dir(), config_);
  write_two_shards(dir(), entries_);
  json index = json::parse(std::ifstream(dir() / "model.safetensors.index.json"));
  index["weight_map"]["model.language_model.layers.9.ghost.weight"] =
      "model-00001-of-00002.safetensors";
  write_text(dir() / "model.safetensors.index.json", index.dump());
  EXPECT_EQ(load_error(dir()), (dir() / "model-00001-of-00002.safetensors").string() +
                                   ": tensor 'model.language_model.layers.9.ghost.weight' listed "
                                   "in the index is missing from the shard");
}

TEST_F(LoaderErrors, IndexWithoutWeightMap) {
  write_config(dir(), config_);
  write_two_shards(dir(), entries_);
  write_text(dir() / "model.safetensors.index.json", R"({"metadata": {}})");
  EXPECT_EQ(load_error(dir()),
            (dir() / "model.safetensors.index.json").string() + ": missing 'weight_map' object");
}

TEST_F(LoaderErrors, MalformedIndexJson) {
  write_config(dir(), config_);
  write_two_shards(dir(), entries_);
  write_text(dir() / "model.safetensors.index.json", R"({"weight_map": )");
  const std::string msg = load_error(dir());
  const std::string index = (dir() / "model.safetensors.index.json").string();
  EXPECT_EQ(msg.rfind(index + ": malformed JSON: ", 0), 0u) << msg;
}

TEST_F(LoaderErrors, IndexShardOutsideFolder) {
  write_config(dir(), config_);
  write_two_shards(dir(), entries_);
  write_text(dir() / "model.safetensors.index.json",
             R"({"weight_map": {"x": "../model-00001-of-00002.safetensors"}})");
  EXPECT_EQ(load_error(dir()), (dir() / "model.safetensors.index.json").string() +
                                   ": shard name '../model-00001-of-00002.safetensors' is not a "
                                   "plain file");
}

TEST_F(LoaderErrors, IndexWeightMapValueNotString) {
  write_config(dir(), config_);
  write_two_shards(dir(), entries_);
  write_text(dir() / "model.safetensors.index.json", R"({"weight_map": {"x": 3}})");
  EXPECT_EQ(load_error(dir()), (dir() / "model.safetensors.index.json").string() +
                                   ": weight_map['x'] is not a string");
}

TEST_F(LoaderErrors, TensorInTwoUnindexedFiles) {
  write_config(dir(), config_);
  write_tensors(dir() / "a.safetensors", entries_);
  write_tensors(dir() / "b.safetensors", {entries_.back()});
  EXPECT_EQ(load_error(dir()), (dir() / "b.safetensors").string() + ": tensor '" +
                                   entries_.back().name + "' appears in more than one file");
}

// Data that is not aligned to its element size (a header of odd length, which the format
// allows) loads to the same values as aligned data.
TEST_F(LoaderErrors, UnalignedTensorDataLoads) {
  write_model(dir(), config_, entries_);
  ModelWeights aligned = load_model_weights(dir());
  TempDir other;
  // Rebuild the file with one extra header byte so every tensor starts at an odd address.
  std::ifstream in(dir() / "model.safetensors", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  uint64_t len = 0;
  std::memcpy(&len, bytes.data(), 8);
  std::string header = bytes.substr(8, len);
  while (!header.empty() && header.back() == ' ') header.pop_back();
  header += (header.size() % 2 == 0) ? " " : "";
  write_config(other.path(), config_);
  write_raw(other.path() / "model.safetensors", header, 0);
  {
    std::ofstream out(other.path() / "model.safetensors", std::ios::binary | std::ios::app);
    out << bytes.substr(8 + len);
  }
  ModelWeights odd = load_model_weights(other.path());
  EXPECT_EQ(odd.final_norm, aligned.final_norm);
  EXPECT_EQ(odd.layers[2].q_norm, aligned.layers[2].q_norm);
  EXPECT_EQ(odd.layers[4].layer_scalar, aligned.layers[4].layer_scalar);
  const WeightMatrix& a = aligned.layers[0].gate_proj;
  const WeightMatrix& b = odd.layers[0].gate_proj;
  ASSERT_EQ(a.rows, b.rows);
  ASSERT_EQ(a.dtype, b.dtype);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data) % 2, 0u) << "matrix data must be aligned";
  EXPECT_EQ(std::memcmp(a.data, b.data, static_cast<size_t>(a.rows * a.cols) * 2), 0);
}

}  // namespace
}  // namespace gemmaserve
