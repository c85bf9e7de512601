// Random-weight Gemma 4 checkpoints with the real tensor names and shapes of each released
// variant (and a tiny one covering every code path), for tests, demos and benchmarks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "io/safetensors.h"
#include "model/config.h"

namespace gemmaserve {

// How a tensor's random values are drawn.
struct TensorInit {
  // kPermutation: an I64 tensor holding a permutation of [0, numel) (an index buffer).
  enum class Kind { kNormal, kUniform, kPermutation };
  Kind kind = Kind::kNormal;
  float a = 0.0f;  // normal: mean; uniform: low
  float b = 1.0f;  // normal: standard deviation; uniform: high (exclusive)
};

struct TestTensor {
  TensorSpec spec;  // full checkpoint name, dtype, shape
  std::string key;  // name without the text prefix: seeds this tensor's random stream
  TensorInit init;
  // Set when stored block-quantized: spec is then U8 [rows..., row_bytes] and the values are
  // those of the F32 tensor with `cols` columns, quantized row by row.
  std::optional<DType> quantized;
  int64_t cols = 0;
};

struct TestModelSpec {
  std::string preset;
  nlohmann::json config;             // config.json
  nlohmann::json generation_config;  // generation_config.json
  std::vector<TestTensor> tensors;   // the text decoder's, then the vision and audio towers'

  int64_t num_parameters() const;  // logical elements (quantized tensors count their values)
  uint64_t total_bytes() const;    // tensor data only
  std::vector<TensorSpec> specs() const;
};

// "tiny", "e2b", "e4b", "31b", "26b-a4b".
const std::vector<std::string>& test_model_preset_names();

// config.json of a preset in the official Gemma4ForConditionalGeneration layout (nested
// text_config, the variant's vision_config, and for e2b / e4b the real audio_config; null for
// the others, which have no audio tower). `dtype` only sets the "dtype" fields. Throws
// InputError naming the preset when unknown.
nlohmann::json test_model_config(const std::string& preset, DType dtype = DType::kBF16);

// generation_config.json of an instruction-tuned Gemma 4: stop ids [1, 106, 50], bos 2, pad 0,
// sampling defaults temperature 1.0, top_k 64, top_p 0.95.
nlohmann::json test_generation_config();

// The text-decoder tensors any parsed config needs (names under config.tensor_prefix, no
// lm_head since embeddings are tied, no k/v tensors on KV-shared layers), with init rules that
// keep activations near unit scale: matrices N(0, 1/fan_in), norm weights N(1, 0.1) so a
// `1 + w` bug shows, layer_scalar and router scales uniform in [0.5, 1.5).
std::vector<TestTensor> text_decoder_tensors(const ModelConfig& config, DType dtype);

// The vision tower's and its projection's tensors (none without config.vision; the unified
// family's image and audio embedders instead), with the real names (`.linear.` wrappers, 0-dim clip
// bounds with use_clipped_linears, std_bias/std_scale with standardize) and the same init rules.
std::vector<TestTensor> vision_tower_tensors(const ModelConfig& config, DType dtype);

// The audio tower's and embed_audio's tensors (none without config.audio) under the names
// weights.cpp binds (`.linear.` wrappers, 0-dim clip bounds with use_clipped_linears), the
// convolutions N(0, 1/fan_in), per_dim_scale around 0 (HF's initial value), the same rules else.
std::vector<TestTensor> audio_tower_tensors(const ModelConfig& config, DType dtype);

// Preset config + tensor list. dtype is F32, F16, BF16 or a quantized type (Q8_0, Q4_0, Q4_K:
// the matrices model/quantize.h quantizes are stored quantized when their rows are whole blocks,
// the rest as BF16, and config.json gets a quantization_config); InputError otherwise.
TestModelSpec make_test_model_spec(const std::string& preset, DType dtype);

// Writes `config` (config.json) and random weights of `dtype` (model.safetensors: the text
// decoder, and the vision and audio towers the config has) into `dir`, for configs no preset has
// (e.g. the tiny text decoder with a real-size vision tower).
void write_test_model_of_config(const std::filesystem::path& dir, const nlohmann::json& config,
                                DType dtype, uint64_t seed);
// A random-weight Gemma 4 MTP assistant drafter (model_type gemma4_assistant) paired with
// `target_preset`: the released drafters' decoder sizes (4 layers, 3 sliding + 1 full; the
// tiny one: hidden 32, 4 heads, centroid head), the target's head geometry, RoPE, window and
// vocabulary, tied embeddings, a permutation as token_ordering. dtype F32, F16 or BF16;
// InputError otherwise or for an unknown preset (test_assistant_presets.cpp).
TestModelSpec make_test_assistant_spec(const std::string& target_preset, DType dtype);

// The drafter's own sizes; head geometry, RoPE, window and vocabulary come from the target.
struct AssistantShape {
  int hidden_size = 32;
  int intermediate_size = 64;
  int num_attention_heads = 4;
  bool use_ordered_embeddings = false;
  int num_centroids = 2048;
  int centroid_intermediate_top_k = 32;
};
// An assistant for any Gemma 4 target config.json (nested or flat text config), e.g. a test
// fixture's; `name` is its preset label.
TestModelSpec make_test_assistant_spec_for(const nlohmann::json& target_config,
                                           const AssistantShape& shape, DType dtype,
                                           const std::string& name);

// Writes elements [first, first + count) of `t` in its dtype. Values depend only on (seed,
// t.key, element index), so any chunking or thread split gives the same bytes.
void fill_test_tensor(const TestTensor& t, uint64_t seed, int64_t first, int64_t count,
                      std::byte* dst);

}  // namespace gemmaserve
