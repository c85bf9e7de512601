// The unified Gemma 4's config.json (gemma4_unified, Gemma 4 12B): Gemma4UnifiedTextConfig's own
// defaults, both layouts, the vision and audio sub-configs read field by field, and the exact
// error for each inconsistent field.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/config.h"
#include "model/test_model_presets.h"
#include "test_support.h"

namespace gemmaserve {
namespace {

using nlohmann::json;
using testing::input_error_of;

json unified() { return test_model_config("tiny-unified"); }

std::string error_of(const json& config) {
  return input_error_of([&] { parse_model_config(config, "config.json"); });
}

TEST(UnifiedConfig, PresetParsesAsTheUnifiedFamily) {
  const ModelConfig c = parse_model_config(unified(), "config.json");
  EXPECT_EQ(c.family, ModelFamily::kGemma4Unified);
  EXPECT_EQ(c.tensor_prefix, "model.language_model.");
  ASSERT_TRUE(c.unified_vision && c.unified_audio);
  EXPECT_FALSE(c.vision);
  EXPECT_TRUE(c.has_vision && c.has_audio);
  EXPECT_EQ(c.unified_vision->patch_dim(), 3 * 48 * 48);
  EXPECT_EQ(c.unified_audio->audio_embed_dim, 640);
  EXPECT_EQ(*c.boa_token_id, 256000);
  EXPECT_EQ(*c.eoa_token_id, 258883);
}

// Absent fields take Gemma4UnifiedTextConfig's defaults, not Gemma4TextConfig's: window 1024,
// 262144 positions, bidirectional images, no per-layer inputs.
TEST(UnifiedConfig, TextDefaultsAreTheUnifiedOnes) {
  json j = unified();
  for (const char* key : {"sliding_window", "max_position_embeddings",
                          "use_bidirectional_attention", "hidden_size_per_layer_input"}) {
    j["text_config"].erase(key);
  }
  const ModelConfig c = parse_model_config(j, "config.json");
  EXPECT_EQ(c.text.sliding_window, 1024);
  EXPECT_EQ(c.text.max_position_embeddings, 262144);
  EXPECT_EQ(c.text.use_bidirectional_attention, "vision");
  EXPECT_EQ(c.text.hidden_size_per_layer_input, 0);
  // An explicit null turns the bidirectional image blocks off, as HF reads None.
  j["text_config"]["use_bidirectional_attention"] = nullptr;
  EXPECT_EQ(parse_model_config(j, "config.json").text.use_bidirectional_attention, "");
  // Per-layer inputs and MoE fields are not read by the unified model (HF has no such
  // modules there); they are dropped, not half-applied.
  j["text_config"]["hidden_size_per_layer_input"] = 256;
  j["text_config"]["enable_moe_block"] = true;
  const ModelConfig dropped = parse_model_config(j, "config.json");
  EXPECT_EQ(dropped.text.hidden_size_per_layer_input, 0);
  EXPECT_FALSE(dropped.text.enable_moe_block);
}

TEST(UnifiedConfig, TextOnlyLayout) {
  json text = unified()["text_config"];
  text["architectures"] = {"Gemma4UnifiedForCausalLM"};
  ModelConfig c = parse_model_config(text, "config.json");
  EXPECT_EQ(c.family, ModelFamily::kGemma4Unified);
  EXPECT_EQ(c.tensor_prefix, "model.");
  EXPECT_FALSE(c.has_vision || c.has_audio);
  EXPECT_FALSE(c.image_token_id.has_value());
  text.erase("architectures");  // model_type alone names it
  c = parse_model_config(text, "config.json");
  EXPECT_EQ(c.architecture, "Gemma4UnifiedForCausalLM");
}

TEST(UnifiedConfig, VisionFields) {
  json j = unified();
  j["vision_config"] = {{"model_type", "gemma4_unified_vision"}};  // HF's defaults
  const ModelConfig c = parse_model_config(j, "config.json");
  EXPECT_EQ(c.unified_vision->patch_size, 16);
  EXPECT_EQ(c.unified_vision->pooling_kernel_size, 3);
  EXPECT_EQ(c.unified_vision->mm_embed_dim, 3840);
  EXPECT_EQ(c.unified_vision->mm_posemb_size, 1120);
}

TEST(UnifiedConfig, Errors) {
  // (JSON pointer, value or null to erase it, the whole message)
  const struct {
    const char* path;
    json value;
    const char* message;
  } cases[] = {
      {"/vision_config/model_patch_size", 32,
       "field 'vision_config.model_patch_size' must equal patch_size x pooling_kernel_size (48)"},
      {"/vision_config/output_proj_dims", 32,
       "field 'vision_config.output_proj_dims' must equal mm_embed_dim (64): the embedder's "
       "projection reads the position-normed patch embedding"},
      {"/vision_config/model_type", "gemma4_vision",
       "field 'vision_config.model_type' is 'gemma4_vision', expected 'gemma4_unified_vision'"},
      {"/audio_config/audio_samples_per_token", 320,
       "field 'audio_config.audio_samples_per_token' must equal audio_embed_dim (640): both are "
       "the samples of one audio soft token"},
      {"/audio_config/audio_embed_dim", 0,
       "field 'audio_config.audio_embed_dim' must be a positive integer"},
      {"/text_config/model_type", "gemma4_text",
       "field 'text_config.model_type' is 'gemma4_text', expected 'gemma4_unified_text'"},
      {"/text_config", nullptr,
       "field 'text_config' is required for Gemma4UnifiedForConditionalGeneration"},
      {"/text_config/use_bidirectional_attention", "all",
       "field 'text_config.use_bidirectional_attention' 'all' (encoder mode) is not supported"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.path);
    json j = unified();
    const json::json_pointer at(c.path);
    if (c.value.is_null()) {
      j.at(at.parent_pointer()).erase(at.back());
    } else {
      j[at] = c.value;
    }
    EXPECT_EQ(error_of(j), std::string("config.json: ") + c.message);
  }
}

}  // namespace
}  // namespace gemmaserve
