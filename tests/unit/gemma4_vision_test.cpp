// The vision config, the soft-token count of a patch grid, the vision tower's input errors and
// the text model's multimodal inputs (pad-id lookups, input validation). Golden logits are in
// gemma4_vision_golden_test.
#include "model/gemma4_vision.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include "core/error.h"
#include "gemma4_golden_harness.h"
#include "io/json_file.h"
#include "model/config.h"
#include "model/test_model_presets.h"

namespace gemmaserve {
namespace {

using nlohmann::json;

json multimodal_config(json vision) {
  return {{"architectures", {"Gemma4ForConditionalGeneration"}},
          {"text_config", {{"num_hidden_layers", 2}, {"hidden_size", 64}}},
          {"vision_config", std::move(vision)}};
}

std::string config_error(const json& config) {
  try {
    parse_model_config(config, "cfg");
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

TEST(VisionConfig, AbsentFieldsTakeHuggingFaceDefaults) {
  const ModelConfig c = parse_model_config(multimodal_config(json::object()), "cfg");
  ASSERT_TRUE(c.vision.has_value());
  EXPECT_TRUE(c.has_vision);
  const VisionConfig& v = *c.vision;
  EXPECT_EQ(v.hidden_size, 768);
  EXPECT_EQ(v.intermediate_size, 3072);
  EXPECT_EQ(v.num_hidden_layers, 16);
  EXPECT_EQ(v.num_attention_heads, 12);
  EXPECT_EQ(v.num_key_value_heads, 12);
  EXPECT_EQ(v.head_dim, 64);
  EXPECT_EQ(v.rope_theta, 100.0);
  EXPECT_EQ(v.patch_size, 16);
  EXPECT_EQ(v.pooling_kernel_size, 3);
  EXPECT_EQ(v.position_embedding_size, 10240);
  EXPECT_FALSE(v.use_clipped_linears);
  EXPECT_FALSE(v.standardize);
  EXPECT_EQ(v.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.image_token_id, 258880);
  EXPECT_EQ(c.boi_token_id, 255999);
  EXPECT_EQ(c.eoi_token_id, 258882);
  EXPECT_EQ(c.video_token_id, 258884);
  EXPECT_EQ(c.audio_token_id, 258881);
}

TEST(VisionConfig, ReadsEveryField) {
  const json v = {{"hidden_size", 1152},
                  {"intermediate_size", 4304},
                  {"num_hidden_layers", 27},
                  {"num_attention_heads", 16},
                  {"num_key_value_heads", 16},
                  {"head_dim", 72},
                  {"rms_norm_eps", 1e-5},
                  {"rope_parameters", {{"rope_theta", 50.0}}},
                  {"patch_size", 14},
                  {"pooling_kernel_size", 2},
                  {"standardize", true},
                  {"use_clipped_linears", true},
                  {"position_embedding_size", 4096},
                  {"default_output_length", 280}};
  json config = multimodal_config(v);
  config["image_token_id"] = 7;
  config["vision_soft_tokens_per_image"] = 280;
  const ModelConfig c = parse_model_config(config, "cfg");
  EXPECT_EQ(c.vision->hidden_size, 1152);
  EXPECT_EQ(c.vision->intermediate_size, 4304);
  EXPECT_EQ(c.vision->num_hidden_layers, 27);
  EXPECT_EQ(c.vision->num_attention_heads, 16);
  EXPECT_EQ(c.vision->head_dim, 72);
  EXPECT_EQ(c.vision->rms_norm_eps, 1e-5);
  EXPECT_EQ(c.vision->rope_theta, 50.0);
  EXPECT_EQ(c.vision->patch_size, 14);
  EXPECT_EQ(c.vision->pooling_kernel_size, 2);
  EXPECT_TRUE(c.vision->standardize);
  EXPECT_TRUE(c.vision->use_clipped_linears);
  EXPECT_EQ(c.vision->position_embedding_size, 4096);
  EXPECT_EQ(c.vision->default_output_length, 280);
  EXPECT_EQ(c.image_token_id, 7);
  EXPECT_EQ(c.vision_soft_tokens_per_image, 280);
}

TEST(VisionConfig, TextOnlyLayoutsHaveNoVisionAndNoMultimodalIds) {
  const json flat = {{"architectures", {"Gemma4ForCausalLM"}}, {"num_hidden_layers", 2}};
  const ModelConfig c = parse_model_config(flat, "cfg");
  EXPECT_FALSE(c.vision.has_value());
  EXPECT_FALSE(c.image_token_id.has_value());
  json null_vision = multimodal_config(nullptr);
  EXPECT_FALSE(parse_model_config(null_vision, "cfg").vision.has_value());
}

TEST(VisionConfig, BadFieldsAreNamed) {
  EXPECT_EQ(config_error(multimodal_config({{"head_dim", 66}})),
            "cfg: field 'vision_config.head_dim' must be a multiple of 4 (2-D RoPE)");
  EXPECT_EQ(config_error(multimodal_config({{"num_key_value_heads", 5}})),
            "cfg: field 'vision_config.num_key_value_heads' must divide num_attention_heads");
  EXPECT_EQ(config_error(multimodal_config(
                {{"rope_parameters", {{"rope_type", "proportional"}, {"rope_theta", 1.0}}}})),
            "cfg: field 'vision_config.rope_parameters' must be rope_type 'default' without a "
            "factor (2-D vision RoPE)");
  EXPECT_EQ(config_error(multimodal_config({{"model_type", "siglip_vision_model"}})),
            "cfg: field 'vision_config.model_type' is 'siglip_vision_model', expected "
            "'gemma4_vision'");
  EXPECT_EQ(config_error(multimodal_config({{"hidden_activation", "relu"}})),
            "cfg: field 'vision_config.hidden_activation' 'relu' is not supported");
  EXPECT_EQ(config_error(multimodal_config(3)), "cfg: field 'vision_config' must be an object");
}

// A w x h patch grid (row-major, (x, y) per patch) padded with (-1, -1) to `total` patches.
std::vector<int32_t> grid(int w, int h, int total) {
  std::vector<int32_t> pos;
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) pos.insert(pos.end(), {x, y});
  }
  while (static_cast<int>(pos.size()) < 2 * total) pos.insert(pos.end(), {-1, -1});
  return pos;
}

TEST(VisionSoftTokens, SpecExamplesAtTheDefaultBudget) {
  const VisionConfig v;  // patch 16, pooling 3
  // 896x896 at 280 soft tokens is resized to 768x768: 48x48 patches, 256 tokens (not 280).
  EXPECT_EQ(vision_soft_tokens(v, grid(48, 48, 2520)), 256);
  EXPECT_EQ(vision_soft_tokens(v, grid(63, 39, 2520)), 21 * 13);
  EXPECT_EQ(vision_soft_tokens(v, grid(3, 3, 9)), 1);
}

std::string soft_token_error(const VisionConfig& v, const std::vector<int32_t>& positions) {
  try {
    vision_soft_tokens(v, positions);
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

TEST(VisionSoftTokens, MalformedPositionsAreRejected) {
  VisionConfig v;
  v.pooling_kernel_size = 2;
  v.position_embedding_size = 64;
  EXPECT_EQ(soft_token_error(v, {0, 0, 1}),
            "image position ids must be (x, y) pairs; got 3 values");
  EXPECT_EQ(soft_token_error(v, grid(3, 2, 6)),
            "an image of 6 patches cannot be pooled 2x2: the patch count (padding included) must "
            "be a positive multiple of 4");
  EXPECT_EQ(soft_token_error(v, {0, 0, 64, 0, 0, 1, 1, 1}),
            "image patch 1 has position (64, 0), outside the position table (0..63, or (-1, -1) "
            "for padding)");
  EXPECT_EQ(soft_token_error(v, {-1, 3, 0, 0, 0, 1, 1, 1}),
            "image patch 0 has position (-1, 3), outside the position table (0..63, or (-1, -1) "
            "for padding)");
  EXPECT_EQ(soft_token_error(v, grid(0, 0, 4)), "an image has no patches (all are padding)");
  EXPECT_EQ(soft_token_error(v, {0, 0, 1, 0, 0, 1, 0, 2}),
            "image patch 3 at (0, 2) falls outside the 1 pooled soft tokens its patch count "
            "allows");
}

class VisionModelInputs : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = golden::load_model(golden::golden_dir() / "models" / "vision", 2).release();
  }
  static void TearDownTestSuite() { delete model_; }

  static std::vector<float> last_logits(const std::vector<int32_t>& prompt,
                                        const golden::PagedRunner::ImageInputs& in = {}) {
    golden::PagedRunner runner(*model_, 16, 64);
    const int id = runner.add_sequence();
    return runner.step({id}, {prompt}, LogitsWanted::kLast, {in}).logits;
  }
  static std::string forward_error(const golden::PagedRunner::ImageInputs& in) {
    try {
      last_logits({2, 3, 4, 5}, in);
    } catch (const InputError& e) {
      return e.what();
    }
    return "no error";
  }

  static inline Gemma4Model* model_ = nullptr;
};

TEST_F(VisionModelInputs, EncodeRejectsAMismatchedPixelCount) {
  std::vector<float> out;
  const std::vector<float> pixels(10, 0.5f);
  const std::vector<int32_t> positions = grid(2, 2, 4);
  try {
    model_->encode_image({pixels, positions}, &out);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(),
                 "image pixel values hold 10 floats; 4 patches of 48 (3 x patch_size²) expected");
  }
}

TEST(VisionModel, TextOnlyModelHasNoEncoder) {
  auto model = golden::load_model(golden::golden_dir() / "models" / "dense-clm", 1);
  std::vector<float> out;
  try {
    model->encode_image({}, &out);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "This model does not accept image input: it has no vision_config.");
  }
}

// The vision fixture with its vision_config changed: the tower's tensors no longer fit it.
std::string load_error_with_vision(const char* field, int value) {
  const std::filesystem::path src = golden::golden_dir() / "models" / "vision";
  testing::TempDir dir;
  std::filesystem::copy_file(src / "model.safetensors", dir.path() / "model.safetensors");
  json config = read_json_file(src / "config.json");
  config["vision_config"][field] = value;
  std::ofstream(dir.path() / "config.json") << config.dump();
  try {
    load_model_weights(dir.path());
  } catch (const InputError& e) {
    std::string msg = e.what();
    const size_t at = msg.find(": ");  // drop the temp dir's name
    return msg.substr(at == std::string::npos ? 0 : at + 2);
  }
  return "no error";
}

TEST(VisionWeights, ShapesAndNamesAreChecked) {
  EXPECT_EQ(load_error_with_vision("hidden_size", 48),
            "tensor 'model.vision_tower.patch_embedder.input_proj.weight' has shape [32, 48], "
            "expected [48, 48]");
  EXPECT_EQ(load_error_with_vision("num_hidden_layers", 3),
            "missing tensor 'model.vision_tower.encoder.layers.2.input_layernorm.weight'");
}

TEST_F(VisionModelInputs, TowerWeightsAreBound) {
  const VisionWeights& v = model_->weights().vision;
  ASSERT_EQ(v.layers.size(), 2u);
  EXPECT_EQ(v.position_table.rows, 2 * 64);
  EXPECT_EQ(v.embedding_projection.rows, 64);
  EXPECT_EQ(v.std_scale.size(), 32u);
  // The fixture's clip bounds are finite (HF's initial ±inf would clip nothing).
  EXPECT_TRUE(std::isfinite(v.layers[0].q_proj.input_min));
  EXPECT_LT(v.layers[1].down_proj.output_min, v.layers[1].down_proj.output_max);
}

// HF looks placeholder ids (image, video, audio) up as the pad id, with or without an image.
TEST_F(VisionModelInputs, PlaceholderIdsEmbedAsPad) {
  const ModelConfig& c = model_->config();
  const std::vector<float> pad = last_logits({2, 100, 0, 101});
  for (int id : {*c.image_token_id, *c.video_token_id, *c.audio_token_id}) {
    const std::vector<float> placeholder = last_logits({2, 100, id, 101});
    EXPECT_EQ(0, std::memcmp(pad.data(), placeholder.data(), pad.size() * sizeof(float))) << id;
  }
  const std::vector<float> boi = last_logits({2, 100, *c.boi_token_id, 101});
  EXPECT_NE(0, std::memcmp(pad.data(), boi.data(), pad.size() * sizeof(float)));
}

// A given row replaces the token's embedding, and its per-layer token part is the pad id's.
TEST_F(VisionModelInputs, EmbeddingRowsReplaceTheTokenAndUsePadForPerLayerInputs) {
  const std::vector<float> row(static_cast<size_t>(model_->text_config().hidden_size), 0.25f);
  golden::PagedRunner::ImageInputs in;
  in.embeddings.push_back({2, 1, row.data()});
  const std::vector<float> over_token = last_logits({2, 100, 300, 101}, in);
  const std::vector<float> over_pad = last_logits({2, 100, 0, 101}, in);
  const std::vector<float> plain = last_logits({2, 100, 300, 101});
  EXPECT_EQ(0, std::memcmp(over_token.data(), over_pad.data(), plain.size() * sizeof(float)));
  EXPECT_NE(0, std::memcmp(over_token.data(), plain.data(), plain.size() * sizeof(float)));
}

TEST_F(VisionModelInputs, BadImageInputsAreNamed) {
  golden::PagedRunner::ImageInputs in;
  in.embeddings.push_back({1, 2, nullptr});
  EXPECT_EQ(forward_error(in),
            "batch sequence 0: embedding rows need a position >= 0, a count >= 0 and data");
  in = {};
  in.blocks.push_back({3, 3});
  EXPECT_EQ(forward_error(in), "batch sequence 0: image block [3, 3) is empty or negative");
  in.blocks = {{2, 6}};
  EXPECT_EQ(forward_error(in),
            "batch sequence 0: image block [2, 6) is split across steps (this step: [0, 4))");
}

}  // namespace
}  // namespace gemmaserve
