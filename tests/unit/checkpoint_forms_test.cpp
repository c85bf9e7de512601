// Every checkpoint form (sharded, f32, f16, per_layer_config, Gemma4ForCausalLM) of the small
// fixture models loads to the same ModelWeights and gives the same logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "io/json_file.h"
#include "io/safetensors.h"
#include "model/checkpoint_convert.h"
#include "model/config.h"
#include "model/gemma4_model.h"
#include "model/kv_cache.h"
#include "model/test_model_presets.h"
#include "model/weights.h"
#include "test_support.h"

namespace gemmaserve {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::TempDir;

// The repo's copy of a fixture model, else the shared one; empty when neither exists.
fs::path repo_fixture(const std::string& name) {
  const fs::path p = testing::source_dir() / "tests/data/golden/models" / name;
  return fs::exists(p / "config.json") ? p : fs::path();
}

#define REQUIRE_FIXTURE(var, name)                              \
  fs::path var = repo_fixture(name);                            \
  if (var.empty()) {                                            \
    GS_REQUIRE_SHARED(shared_root);                             \
    var = shared_root / "fixtures/gemma4-tiny/models" / (name); \
  }                                                             \
  ASSERT_TRUE(fs::exists(var / "config.json")) << var

// Every weight of a model as (label, values in f32, rows, cols); absent matrices have no values.
struct FlatWeight {
  std::string label;
  std::vector<float> values;
  int64_t rows = 0, cols = 0;
  DType dtype = DType::kF32;
};

void add_matrix(std::vector<FlatWeight>* out, const std::string& label, const WeightMatrix& m) {
  FlatWeight f{label, {}, m.rows, m.cols, m.dtype};
  if (m) {
    f.values.resize(static_cast<size_t>(m.rows * m.cols));
    convert_to_f32(m.dtype, m.data, f.values.data(), f.values.size());
  }
  out->push_back(std::move(f));
}

void add_vector(std::vector<FlatWeight>* out, const std::string& label,
                const std::vector<float>& v) {
  out->push_back({label, v, 1, static_cast<int64_t>(v.size())});
}

std::vector<FlatWeight> flatten(const ModelWeights& w) {
  std::vector<FlatWeight> out;
  add_matrix(&out, "embed_tokens", w.embed_tokens);
  add_matrix(&out, "lm_head", w.lm_head);
  add_vector(&out, "final_norm", w.final_norm);
  add_matrix(&out, "embed_tokens_per_layer", w.embed_tokens_per_layer);
  add_matrix(&out, "per_layer_model_projection", w.per_layer_model_projection);
  add_vector(&out, "per_layer_projection_norm", w.per_layer_projection_norm);
  for (size_t i = 0; i < w.layers.size(); ++i) {
    const LayerWeights& l = w.layers[i];
    const std::string p = "layers." + std::to_string(i) + ".";
    add_vector(&out, p + "input_layernorm", l.input_layernorm);
    add_vector(&out, p + "post_attention_layernorm", l.post_attention_layernorm);
    add_vector(&out, p + "pre_feedforward_layernorm", l.pre_feedforward_layernorm);
    add_vector(&out, p + "post_feedforward_layernorm", l.post_feedforward_layernorm);
    add_matrix(&out, p + "q_proj", l.q_proj);
    add_matrix(&out, p + "k_proj", l.k_proj);
    add_matrix(&out, p + "v_proj", l.v_proj);
    add_matrix(&out, p + "o_proj", l.o_proj);
    add_vector(&out, p + "q_norm", l.q_norm);
    add_vector(&out, p + "k_norm", l.k_norm);
    add_matrix(&out, p + "gate_proj", l.gate_proj);
    add_matrix(&out, p + "up_proj", l.up_proj);
    add_matrix(&out, p + "down_proj", l.down_proj);
    add_vector(&out, p + "layer_scalar", {l.layer_scalar});
    add_matrix(&out, p + "per_layer_input_gate", l.per_layer_input_gate);
    add_matrix(&out, p + "per_layer_projection", l.per_layer_projection);
    add_vector(&out, p + "post_per_layer_input_norm", l.post_per_layer_input_norm);
    add_matrix(&out, p + "router_proj", l.router_proj);
    add_vector(&out, p + "router_scale", l.router_scale);
    add_vector(&out, p + "router_per_expert_scale", l.router_per_expert_scale);
    add_matrix(&out, p + "experts_gate_up", l.experts_gate_up);
    add_matrix(&out, p + "experts_down", l.experts_down);
    add_vector(&out, p + "pre_feedforward_layernorm_2", l.pre_feedforward_layernorm_2);
    add_vector(&out, p + "post_feedforward_layernorm_1", l.post_feedforward_layernorm_1);
    add_vector(&out, p + "post_feedforward_layernorm_2", l.post_feedforward_layernorm_2);
  }
  return out;
}

void expect_same_layers(const TextConfig& a, const TextConfig& b) {
  ASSERT_EQ(a.layers.size(), b.layers.size());
  for (size_t i = 0; i < a.layers.size(); ++i) {
    const LayerSpec &x = a.layers[i], &y = b.layers[i];
    EXPECT_EQ(x.type, y.type) << "layer " << i;
    EXPECT_EQ(x.head_dim, y.head_dim) << "layer " << i;
    EXPECT_EQ(x.num_kv_heads, y.num_kv_heads) << "layer " << i;
    EXPECT_EQ(x.k_eq_v, y.k_eq_v) << "layer " << i;
    EXPECT_EQ(x.kv_source_layer, y.kv_source_layer) << "layer " << i;
    EXPECT_EQ(x.intermediate_size, y.intermediate_size) << "layer " << i;
    EXPECT_EQ(x.layer_index, y.layer_index) << "layer " << i;
  }
}

void expect_same_text_config(const TextConfig& a, const TextConfig& b) {
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.hidden_size, b.hidden_size);
  EXPECT_EQ(a.num_hidden_layers, b.num_hidden_layers);
  EXPECT_EQ(a.num_attention_heads, b.num_attention_heads);
  EXPECT_EQ(a.sliding_window, b.sliding_window);
  EXPECT_EQ(a.hidden_size_per_layer_input, b.hidden_size_per_layer_input);
  EXPECT_EQ(a.num_kv_shared_layers, b.num_kv_shared_layers);
  EXPECT_EQ(a.enable_moe_block, b.enable_moe_block);
  EXPECT_EQ(a.num_experts, b.num_experts);
  EXPECT_EQ(a.top_k_experts, b.top_k_experts);
  EXPECT_EQ(a.final_logit_softcapping, b.final_logit_softcapping);
  EXPECT_EQ(a.tie_word_embeddings, b.tie_word_embeddings);
  for (int t = 0; t < kNumAttentionTypes; ++t) {
    EXPECT_EQ(a.rope[t].theta, b.rope[t].theta);
    EXPECT_EQ(a.rope[t].partial_rotary_factor, b.rope[t].partial_rotary_factor);
  }
  expect_same_layers(a, b);
}

// Weights equal bit for bit after conversion to f32 (tolerance 0), or within a relative
// tolerance; returns the largest relative difference seen.
double expect_same_weights(const ModelWeights& a, const ModelWeights& b, double rel_tol) {
  const auto fa = flatten(a), fb = flatten(b);
  EXPECT_EQ(fa.size(), fb.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(fa.size(), fb.size()); ++i) {
    const FlatWeight &x = fa[i], &y = fb[i];
    EXPECT_EQ(x.rows, y.rows) << x.label;
    EXPECT_EQ(x.cols, y.cols) << x.label;
    if (x.values.size() != y.values.size()) {
      ADD_FAILURE() << x.label << ": " << x.values.size() << " vs " << y.values.size();
      continue;
    }
    if (rel_tol == 0) {
      EXPECT_TRUE(x.values.empty() ||
                  std::memcmp(x.values.data(), y.values.data(), x.values.size() * 4) == 0)
          << x.label;
      continue;
    }
    for (size_t k = 0; k < x.values.size(); ++k) {
      // f16 keeps bf16's 8 significant bits except below its normal range (6.1e-5).
      const double d = std::fabs(double(x.values[k]) - y.values[k]);
      const double rel = d / std::max(std::fabs(double(x.values[k])), 6.1e-5);
      worst = std::max(worst, rel);
      if (rel > rel_tol) {
        ADD_FAILURE() << x.label << "[" << k << "]: " << x.values[k] << " vs " << y.values[k];
        return worst;
      }
    }
  }
  return worst;
}

// Prefill of a prompt longer than the sliding window, then greedy decoding; returns the
// logits of every step (prefill's last row, then one row per decoded token).
std::vector<float> run_logits(const fs::path& dir, int decode_steps,
                              std::vector<int32_t>* tokens_out = nullptr) {
  auto pool = std::make_shared<ThreadPool>(2);
  Gemma4Model model(load_model_weights(dir), pool);
  const int vocab = model.vocab_size();
  std::vector<int32_t> prompt = {2};
  for (int i = 1; i < 40; ++i) prompt.push_back((i * 37 + 11) % std::min(vocab, 512));
  const int block = 16;
  const int blocks = (static_cast<int>(prompt.size()) + decode_steps) / block + 2;
  KvCache cache(model.text_config(), {blocks, blocks}, block);
  std::vector<int32_t> table(static_cast<size_t>(blocks));
  std::iota(table.begin(), table.end(), 0);
  std::vector<float> all;
  std::vector<int32_t> step_tokens = prompt;
  int32_t pos = 0;
  for (int step = 0; step <= decode_steps; ++step) {
    SequenceInput in;
    in.tokens = step_tokens;
    in.start_pos = pos;
    for (int t = 0; t < kNumAttentionTypes; ++t) in.block_tables[t] = table;
    in.logits = LogitsWanted::kLast;
    ForwardOutput out;
    model.forward(std::span<const SequenceInput>(&in, 1), cache, &out);
    EXPECT_EQ(out.rows, 1);
    all.insert(all.end(), out.logits.begin(), out.logits.begin() + vocab);
    pos += static_cast<int32_t>(step_tokens.size());
    const auto best = std::max_element(out.logits.begin(), out.logits.begin() + vocab);
    step_tokens = {static_cast<int32_t>(best - out.logits.begin())};
    if (tokens_out) tokens_out->push_back(step_tokens[0]);
  }
  return all;
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

struct Form {
  const char* name;
  CheckpointForm form;
  bool exact;  // weights bitwise equal after conversion to f32
};

std::vector<Form> forms() {
  std::vector<Form> v;
  v.push_back({"f32", {DType::kF32, 0, false, false}, true});
  v.push_back({"sharded3", {std::nullopt, 3, false, false}, true});
  v.push_back({"per_layer_config", {std::nullopt, 0, true, false}, true});
  v.push_back({"causal_lm", {std::nullopt, 0, false, true}, true});
  v.push_back({"f32_sharded5_plc_clm", {DType::kF32, 5, true, true}, true});
  v.push_back({"f16", {DType::kF16, 0, false, false}, false});
  return v;
}

class CheckpointForms : public ::testing::TestWithParam<std::string> {};

TEST_P(CheckpointForms, EveryFormLoadsToTheSameWeights) {
  REQUIRE_FIXTURE(src, GetParam());
  const ModelWeights original = load_model_weights(src);
  for (const Form& f : forms()) {
    SCOPED_TRACE(f.name);
    TempDir tmp;
    const fs::path dst = tmp.path() / f.name;
    convert_checkpoint(src, dst, f.form);
    if (f.form.num_shards > 0) {
      ASSERT_TRUE(fs::exists(dst / "model.safetensors.index.json"));
      EXPECT_FALSE(fs::exists(dst / "model.safetensors"));
      const json index = read_json_file(dst / "model.safetensors.index.json");
      std::set<std::string> shards;
      for (const auto& [name, shard] : index["weight_map"].items()) shards.insert(shard);
      EXPECT_EQ(shards.size(), static_cast<size_t>(f.form.num_shards));
    }
    const json cfg = read_json_file(dst / "config.json");
    const json& text = f.form.causal_lm ? cfg : cfg["text_config"];
    if (f.form.per_layer_config) {
      EXPECT_TRUE(text.contains("per_layer_config"));
      EXPECT_FALSE(text.contains("global_head_dim"));
      EXPECT_FALSE(text.contains("num_global_key_value_heads"));
    }
    if (f.form.causal_lm) {
      const bool unified = GetParam() == "unified";
      EXPECT_EQ(cfg["architectures"],
                json({unified ? "Gemma4UnifiedForCausalLM" : "Gemma4ForCausalLM"}));
      EXPECT_EQ(cfg["model_type"], unified ? "gemma4_unified_text" : "gemma4_text");
    }
    EXPECT_TRUE(fs::exists(dst / "generation_config.json"));
    const ModelWeights converted = load_model_weights(dst);
    EXPECT_EQ(converted.config.tensor_prefix,
              f.form.causal_lm ? "model." : "model.language_model.");
    expect_same_text_config(original.config.text, converted.config.text);
    if (f.exact) {
      expect_same_weights(original, converted, 0.0);
    } else {
      // bf16 -> f16 is exact except for values below f16's normal range.
      const double worst = expect_same_weights(original, converted, 1e-2);
      std::printf("[ weights ] %s f16: worst relative weight error %g\n", GetParam().c_str(),
                  worst);
    }
  }
}

TEST_P(CheckpointForms, EveryFormGivesTheSameLogits) {
  REQUIRE_FIXTURE(src, GetParam());
  std::vector<int32_t> tokens;
  const std::vector<float> ref = run_logits(src, 4, &tokens);
  ASSERT_FALSE(ref.empty());
  for (const Form& f : forms()) {
    SCOPED_TRACE(f.name);
    TempDir tmp;
    const fs::path dst = tmp.path() / f.name;
    convert_checkpoint(src, dst, f.form);
    std::vector<int32_t> got_tokens;
    const std::vector<float> got = run_logits(dst, 4, &got_tokens);
    const float diff = max_abs_diff(ref, got);
    std::printf("[ logits ] %s %s: max |diff| = %g over %zu logits\n", GetParam().c_str(), f.name,
                diff, ref.size());
    if (f.exact) {
      EXPECT_EQ(diff, 0.0f);
      EXPECT_EQ(got_tokens, tokens);
    } else {
      // Observed about 1e-5 on these models (only sub-6e-5 weights change in f16).
      EXPECT_LT(diff, 1e-3f);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CheckpointForms,
                         ::testing::Values("dense", "keqv", "moe", "unified"),
                         [](const auto& info) { return info.param; });

// dense-clm is HF's own Gemma4ForCausalLM save of dense's weights: the conversion reproduces
// its config and tensors exactly.
TEST(CheckpointConvert, CausalLmFormMatchesHfSave) {
  REQUIRE_FIXTURE(dense, "dense");
  REQUIRE_FIXTURE(clm, "dense-clm");
  TempDir tmp;
  convert_checkpoint(dense, tmp.path() / "clm", {std::nullopt, 0, false, true});
  EXPECT_EQ(read_json_file(tmp.path() / "clm/config.json"), read_json_file(clm / "config.json"));
  const SafetensorsCheckpoint ours(tmp.path() / "clm"), hf(clm);
  ASSERT_EQ(ours.all().size(), hf.all().size());
  for (const auto& [name, v] : hf.all()) {
    const TensorView* o = ours.find(name);
    ASSERT_NE(o, nullptr) << name;
    EXPECT_EQ(o->dtype, v->dtype) << name;
    EXPECT_EQ(o->shape, v->shape) << name;
    ASSERT_EQ(o->nbytes, v->nbytes) << name;
    EXPECT_EQ(std::memcmp(o->data, v->data, v->nbytes), 0) << name;
  }
}

TEST(CheckpointConvert, RefusesSourceAsTargetAndNonEmptyTarget) {
  REQUIRE_FIXTURE(dense, "dense");
  TempDir tmp;
  convert_checkpoint(dense, tmp.path() / "a", {});
  EXPECT_THROW(convert_checkpoint(tmp.path() / "a", tmp.path() / "a", {}), InputError);
  try {
    convert_checkpoint(dense, tmp.path() / "a", {});
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              (tmp.path() / "a").string() + ": already holds a checkpoint (model.safetensors)");
  }
  EXPECT_THROW(convert_checkpoint(dense, tmp.path() / "b", {DType::kI32, 0, false, false}),
               InputError);
}

// The per_layer_config form as HF transformers >= 5.15 writes it for the real variants.
TEST(PerLayerConfigForm, RealVariants) {
  const json e2b = to_per_layer_config_form(test_model_config("e2b"));
  const json& t = e2b["text_config"];
  EXPECT_FALSE(t.contains("global_head_dim"));
  EXPECT_FALSE(t.contains("num_global_key_value_heads"));
  json want = json::object();
  for (int i = 4; i < 35; i += 5) {
    std::string key = std::to_string(i);
    if (key.size() < 2) key = "0" + key;  // zero-padded to a common width
    want[key] = {{"head_dim", 512}};
  }
  EXPECT_EQ(t["per_layer_config"], want);

  const json b31 = to_per_layer_config_form(test_model_config("31b"));
  EXPECT_EQ(b31["text_config"]["per_layer_config"].size(), 10u);
  EXPECT_EQ(b31["text_config"]["per_layer_config"]["05"],
            json({{"head_dim", 512}, {"num_key_value_heads", 4}}));
  EXPECT_EQ(b31["text_config"]["per_layer_config"]["59"],
            json({{"head_dim", 512}, {"num_key_value_heads", 4}}));

  for (const auto& preset : test_model_preset_names()) {
    SCOPED_TRACE(preset);
    const json c = test_model_config(preset);
    const ModelConfig a = parse_model_config(c, "a");
    const ModelConfig b = parse_model_config(to_per_layer_config_form(c), "b");
    expect_same_layers(a.text, b.text);
    const ModelConfig clm = parse_model_config(to_causal_lm_config(c), "clm");
    EXPECT_EQ(clm.architecture, a.family == ModelFamily::kGemma4Unified ? "Gemma4UnifiedForCausalLM"
                                                                        : "Gemma4ForCausalLM");
    EXPECT_EQ(clm.tensor_prefix, "model.");
    expect_same_layers(a.text, clm.text);
  }
}

// An attribute that ends up equal on every layer becomes global, as HF serializes it.
TEST(PerLayerConfigForm, UniformValuesBecomeGlobal) {
  json c = test_model_config("e2b");
  c["text_config"]["global_head_dim"] = 256;
  const json t = to_per_layer_config_form(c)["text_config"];
  EXPECT_EQ(t["per_layer_config"], json::object());
  EXPECT_EQ(t["head_dim"], 256);
  // Every layer full: the global head_dim itself becomes the full layers' value.
  json all_full = test_model_config("tiny");
  all_full["text_config"]["layer_types"] = json::array();
  for (int i = 0; i < 6; ++i) all_full["text_config"]["layer_types"].push_back("full_attention");
  all_full["text_config"]["num_kv_shared_layers"] = 0;
  const json u = to_per_layer_config_form(all_full)["text_config"];
  EXPECT_EQ(u["per_layer_config"], json::object());
  EXPECT_EQ(u["head_dim"], 64);
  EXPECT_EQ(u["num_key_value_heads"], 1);
  const ModelConfig a = parse_model_config(all_full, "a");
  const ModelConfig b = parse_model_config(to_per_layer_config_form(all_full), "b");
  expect_same_layers(a.text, b.text);
}

}  // namespace
}  // namespace gemmaserve
