// Random-weight MTP assistant drafters paired with the test-model presets.
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "model/gemma4_assistant_config.h"
#include "model/test_model_presets.h"

namespace gemmaserve {
namespace {

using nlohmann::json;

// The drafter-specific sizes of the released assistants (their config.json; the rest follows
// the target), and a tiny one for tests.
struct AssistantVariant {
  const char* target;
  AssistantShape shape;
};

const AssistantShape& find_assistant_shape(const std::string& preset) {
  static const AssistantVariant v[] = {
      {"tiny", {32, 64, 4, true}},          {"e2b", {256, 2048, 4, true}},
      {"e4b", {256, 2048, 4, true}},        {"31b", {1024, 8192, 32, false}},
      {"26b-a4b", {1024, 8192, 16, false}},
  };
  for (const AssistantVariant& x : v) {
    if (preset == x.target) return x.shape;
  }
  throw InputError("no assistant preset for '" + preset +
                   "' (expected tiny, e2b, e4b, 31b or 26b-a4b)");
}

}  // namespace

TestModelSpec make_test_assistant_spec(const std::string& target_preset, DType dtype) {
  return make_test_assistant_spec_for(test_model_config(target_preset, dtype),
                                      find_assistant_shape(target_preset), dtype,
                                      target_preset + "-assistant");
}

TestModelSpec make_test_assistant_spec_for(const json& target_config, const AssistantShape& v,
                                           DType dtype, const std::string& name) {
  if (dtype != DType::kF32 && dtype != DType::kF16 && dtype != DType::kBF16) {
    throw InputError(std::string("an assistant test model is stored as f32, f16 or bf16, not ") +
                     dtype_name(dtype));
  }
  const json target =
      target_config.contains("text_config") ? target_config["text_config"] : target_config;
  const int layers = 4;
  json text = target;
  for (const char* key : {"moe_intermediate_size", "num_experts", "top_k_experts"}) {
    text[key] = nullptr;
  }
  text["enable_moe_block"] = false;
  text["final_logit_softcapping"] = nullptr;
  text["hidden_size"] = v.hidden_size;
  text["hidden_size_per_layer_input"] = 0;
  text["intermediate_size"] = v.intermediate_size;
  text["layer_types"] = {"sliding_attention", "sliding_attention", "sliding_attention",
                         "full_attention"};
  text["model_type"] = "gemma4_text";
  text["num_attention_heads"] = v.num_attention_heads;
  text["num_hidden_layers"] = layers;
  text["num_kv_shared_layers"] = layers;
  text.erase("per_layer_config");
  text["use_bidirectional_attention"] = nullptr;
  text["use_double_wide_mlp"] = false;
  text["vocab_size_per_layer_input"] = 0;

  TestModelSpec spec;
  spec.preset = name;
  spec.config = {
      {"architectures", {"Gemma4AssistantForCausalLM"}},
      {"backbone_hidden_size", target["hidden_size"]},
      {"centroid_intermediate_top_k", v.centroid_intermediate_top_k},
      {"dtype", dtype == DType::kF32   ? "float32"
                : dtype == DType::kF16 ? "float16"
                                       : "bfloat16"},
      {"eos_token_id", {1, 106}},
      {"model_type", "gemma4_assistant"},
      {"num_centroids", v.num_centroids},
      {"text_config", text},
      {"tie_word_embeddings", true},
      {"use_ordered_embeddings", v.use_ordered_embeddings},
  };
  spec.generation_config = test_generation_config();
  const AssistantConfig ac = parse_assistant_config(spec.config, "preset '" + spec.preset + "'");

  // The decoder's tensors are those of a Gemma 4 text model whose layers are all KV-shared.
  ModelConfig decoder;
  decoder.text = ac.text;
  decoder.tensor_prefix = "model.";
  for (LayerSpec& s : decoder.text.layers) s.kv_source_layer = -1;
  spec.tensors = text_decoder_tensors(decoder, dtype);
  const int64_t h = ac.text.hidden_size, B = ac.backbone_hidden_size, V = ac.text.vocab_size;
  auto add = [&](const std::string& name, DType type, std::vector<int64_t> shape, TensorInit init) {
    spec.tensors.push_back({TensorSpec{name, type, std::move(shape)}, name, init, std::nullopt, 0});
  };
  // N(0, 1/fan_in) keeps each projection's output at its input's scale.
  auto linear = [&](const std::string& name, int64_t rows, int64_t fan_in) {
    add(name, dtype, {rows, fan_in},
        {TensorInit::Kind::kNormal, 0.0f, 1.0f / std::sqrt(static_cast<float>(fan_in))});
  };
  linear("pre_projection.weight", h, 2 * B);
  linear("post_projection.weight", B, h);
  if (ac.use_ordered_embeddings) {
    linear("masked_embedding.centroids.weight", ac.num_centroids, h);
    add("masked_embedding.token_ordering", DType::kI64, {V}, {TensorInit::Kind::kPermutation});
  }
  return spec;
}

}  // namespace gemmaserve
