// The Gemma 4 MTP assistant drafter: config parsing (HF's defaults and validation, exact
// errors), pairing with a target, loading with name/shape checks, and the draft step against
// an independent plain-loop re-implementation (double precision, raw file bytes) on the tiny
// random checkpoint pair, for both LM heads (dense and centroid-masked).
#include "model/gemma4_assistant.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <numeric>
#include <vector>

#include "core/dtype.h"
#include "io/json_file.h"
#include "io/safetensors.h"
#include "model/gemma4_model.h"
#include "model/test_model_presets.h"
#include "test_support.h"

namespace gemmaserve {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::input_error_of;

void write_spec(const TestModelSpec& spec, const fs::path& dir, const std::string& skip_tensor = "",
                const std::string& zero_tensor = "") {
  fs::create_directories(dir);
  std::vector<TestTensor> tensors;
  for (const TestTensor& t : spec.tensors) {
    if (t.spec.name != skip_tensor) tensors.push_back(t);
  }
  std::vector<TensorSpec> specs;
  for (const TestTensor& t : tensors) specs.push_back(t.spec);
  write_safetensors(dir, specs, plan_single_file(specs, {{"format", "pt"}}),
                    [&](size_t i, int64_t first, int64_t count, std::byte* dst) {
                      if (tensors[i].spec.name == zero_tensor) {
                        std::memset(dst, 0, static_cast<size_t>(count) * 8);
                        return;
                      }
                      fill_test_tensor(tensors[i], 5, first, count, dst);
                    });
  std::ofstream(dir / "config.json") << spec.config.dump(2);
}

// The tiny target (bf16) and its assistant (f32), written once for the whole suite.
class TinyPair : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    write_spec(make_test_model_spec("tiny", DType::kBF16), dir_->path() / "target");
    assistant_spec_ = new TestModelSpec(make_test_assistant_spec("tiny", DType::kF32));
    write_spec(*assistant_spec_, dir_->path() / "assistant");
    // The same weights with the dense (tied embedding) LM head.
    TestModelSpec dense = *assistant_spec_;
    dense.config["use_ordered_embeddings"] = false;
    write_spec(dense, dir_->path() / "dense");
  }
  static void TearDownTestSuite() {
    delete assistant_spec_;
    delete dir_;
  }
  static fs::path path(const char* name) { return dir_->path() / name; }
  static inline testing::TempDir* dir_ = nullptr;
  static inline TestModelSpec* assistant_spec_ = nullptr;
};

json tiny_assistant_config() { return make_test_assistant_spec("tiny", DType::kF32).config; }

std::string parse_error(const json& config) {
  return input_error_of([&] { parse_assistant_config(config, "cfg"); });
}

TEST(AssistantConfig, ParsesTheTinyPreset) {
  const AssistantConfig c = parse_assistant_config(tiny_assistant_config(), "cfg");
  EXPECT_EQ(c.architecture, "Gemma4AssistantForCausalLM");
  EXPECT_EQ(c.model_type, "gemma4_assistant");
  EXPECT_EQ(c.backbone_hidden_size, 64);
  EXPECT_TRUE(c.use_ordered_embeddings);
  EXPECT_EQ(c.num_centroids, 2048);
  EXPECT_EQ(c.centroid_intermediate_top_k, 32);
  EXPECT_EQ(c.vocab_size_per_centroid(), 128);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int>{1, 106}));
  EXPECT_EQ(c.text.hidden_size, 32);
  EXPECT_EQ(c.text.num_hidden_layers, 4);
  EXPECT_EQ(c.text.vocab_size, 262144);
  ASSERT_EQ(c.text.layers.size(), 4u);
  EXPECT_EQ(c.text.layers[0].type, AttentionType::kSliding);
  EXPECT_EQ(c.text.layers[0].head_dim, 32);
  EXPECT_EQ(c.text.layers[0].num_kv_heads, 2);
  EXPECT_EQ(c.text.layers[3].type, AttentionType::kFull);
  EXPECT_EQ(c.text.layers[3].head_dim, 64);
  EXPECT_EQ(c.text.layers[3].num_kv_heads, 1);  // num_global_key_value_heads with k_eq_v
  EXPECT_EQ(c.text.layers[3].intermediate_size, 64);
  EXPECT_FALSE(c.text.final_logit_softcapping.has_value());
  EXPECT_TRUE(is_assistant_config(tiny_assistant_config()));
  EXPECT_FALSE(is_assistant_config(test_model_config("tiny")));
}

TEST(AssistantConfig, HfDefaultsForAbsentFields) {
  const json c = {{"model_type", "gemma4_assistant"},
                  {"text_config",
                   {{"hidden_size_per_layer_input", 0},
                    {"vocab_size_per_layer_input", 0},
                    {"num_hidden_layers", 4}}}};
  const AssistantConfig a = parse_assistant_config(c, "cfg");
  EXPECT_EQ(a.backbone_hidden_size, 1536);
  EXPECT_FALSE(a.use_ordered_embeddings);
  EXPECT_EQ(a.num_centroids, 2048);
  EXPECT_EQ(a.centroid_intermediate_top_k, 32);
  EXPECT_TRUE(a.tie_word_embeddings);
  EXPECT_EQ(a.architecture, "Gemma4AssistantForCausalLM");
  EXPECT_EQ(a.text.layers.back().type, AttentionType::kFull);  // HF forces the last layer
}

TEST(AssistantConfig, BadConfigsNameTheField) {
  auto with = [](const std::string& key, const json& value) {
    json c = tiny_assistant_config();
    c[key] = value;
    return c;
  };
  auto with_text = [](const std::string& key, const json& value) {
    json c = tiny_assistant_config();
    if (value.is_null()) {
      c["text_config"].erase(key);
    } else {
      c["text_config"][key] = value;
    }
    return c;
  };
  EXPECT_EQ(parse_error(json::array()), "cfg: config must be a JSON object");
  EXPECT_EQ(parse_error(with("model_type", "gemma4")),
            "cfg: field 'model_type' is 'gemma4', expected 'gemma4_assistant'");
  EXPECT_EQ(parse_error(with("architectures", {"Gemma4ForCausalLM"})),
            "cfg: field 'architectures' names 'Gemma4ForCausalLM', expected "
            "'Gemma4AssistantForCausalLM'");
  EXPECT_EQ(parse_error(with("backbone_hidden_size", 0)),
            "cfg: field 'backbone_hidden_size' must be a positive integer");
  EXPECT_EQ(parse_error(with("use_ordered_embeddings", "yes")),
            "cfg: field 'use_ordered_embeddings' must be true or false");
  EXPECT_EQ(parse_error(with("num_centroids", 3000)),
            "cfg: field 'num_centroids' must divide text_config.vocab_size (262144)");
  EXPECT_EQ(parse_error(with("centroid_intermediate_top_k", 4096)),
            "cfg: field 'centroid_intermediate_top_k' must not exceed num_centroids");
  EXPECT_EQ(parse_error(with("text_config", nullptr)),
            "cfg: field 'text_config' is required (the drafter's gemma4_text decoder, an object)");
  // HF's validate_architecture(), with Gemma4TextConfig's defaults for absent fields.
  EXPECT_EQ(parse_error(with_text("hidden_size_per_layer_input", nullptr)),
            "cfg: field 'text_config.hidden_size_per_layer_input' must be 0 for an assistant "
            "(got 256)");
  EXPECT_EQ(parse_error(with_text("vocab_size_per_layer_input", 262144)),
            "cfg: field 'text_config.vocab_size_per_layer_input' must be 0 for an assistant "
            "(got 262144)");
  EXPECT_EQ(parse_error(with_text("enable_moe_block", true)),
            "cfg: field 'text_config.enable_moe_block' must be false for an assistant");
  EXPECT_EQ(parse_error(with_text("use_double_wide_mlp", true)),
            "cfg: field 'text_config.use_double_wide_mlp' must be false for an assistant");
  EXPECT_EQ(parse_error(with_text("num_kv_shared_layers", 2)),
            "cfg: field 'text_config.num_kv_shared_layers' must equal num_hidden_layers (4): "
            "every assistant layer reads the target's KV (got 2)");
  // 0 means "all" in HF.
  EXPECT_EQ(parse_error(with_text("num_kv_shared_layers", 0)), "no error");
  // The decoder itself goes through the Gemma 4 text parser (field paths kept).
  EXPECT_EQ(parse_error(with_text("hidden_size", "wide")),
            "cfg: field 'text_config.hidden_size' must be an integer");
  EXPECT_EQ(parse_error(with_text("layer_types", json::array({"sliding_attention"}))),
            "cfg: field 'text_config.layer_types' must be a list of num_hidden_layers (4) layer "
            "types");
}

TEST(AssistantConfig, PairingWithTheTarget) {
  const ModelConfig target = parse_model_config(test_model_config("tiny"), "target");
  const AssistantConfig a = parse_assistant_config(tiny_assistant_config(), "cfg");
  // Tiny target: S F S | S S F with the last 3 layers KV-shared: own caches end at 2 (S), 1 (F).
  const auto src = assistant_target_kv_layers(a, target.text);
  EXPECT_EQ(src[static_cast<int>(AttentionType::kSliding)], 2);
  EXPECT_EQ(src[static_cast<int>(AttentionType::kFull)], 1);

  AssistantConfig wide = a;
  wide.backbone_hidden_size = 128;
  EXPECT_EQ(input_error_of([&] { assistant_target_kv_layers(wide, target.text); }),
            "assistant backbone_hidden_size 128 differs from the target's hidden_size 64");
  json c = tiny_assistant_config();
  c["text_config"]["head_dim"] = 16;
  EXPECT_EQ(input_error_of(
                [&] { assistant_target_kv_layers(parse_assistant_config(c, "cfg"), target.text); }),
            "assistant layer 0 (sliding_attention) expects head_dim 16 with 2 KV heads, but "
            "target layer 2 caches head_dim 32 with 2 KV heads");
  c = tiny_assistant_config();
  c["text_config"]["vocab_size"] = 4096;
  EXPECT_EQ(input_error_of(
                [&] { assistant_target_kv_layers(parse_assistant_config(c, "cfg"), target.text); }),
            "assistant vocab_size 4096 differs from the target's 262144");
}

TEST_F(TinyPair, LoadsEveryTensorWithItsShape) {
  const AssistantWeights w = load_assistant_weights(path("assistant"));
  EXPECT_EQ(w.embed_tokens.rows, 262144);
  EXPECT_EQ(w.embed_tokens.cols, 32);
  EXPECT_EQ(w.lm_head.data, w.embed_tokens.data);  // tied
  EXPECT_EQ(w.pre_projection.rows, 32);
  EXPECT_EQ(w.pre_projection.cols, 128);
  EXPECT_EQ(w.post_projection.rows, 64);
  EXPECT_EQ(w.post_projection.cols, 32);
  ASSERT_EQ(w.layers.size(), 4u);
  EXPECT_EQ(w.layers[0].q_proj.rows, 4 * 32);
  EXPECT_EQ(w.layers[3].q_proj.rows, 4 * 64);
  EXPECT_EQ(w.layers[3].o_proj.cols, 4 * 64);
  EXPECT_FALSE(w.layers[0].k_proj);
  EXPECT_EQ(w.layers[0].q_norm.size(), 32u);
  EXPECT_NE(w.layers[2].layer_scalar, 1.0f);
  EXPECT_EQ(w.centroids.rows, 2048);
  ASSERT_EQ(w.token_ordering.size(), 262144u);
  std::vector<int32_t> sorted = w.token_ordering;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) ASSERT_EQ(sorted[i], static_cast<int32_t>(i));
}

TEST_F(TinyPair, LoadErrorsNameFileAndTensor) {
  const fs::path missing = path("missing");
  write_spec(*assistant_spec_, missing, "model.layers.1.self_attn.q_proj.weight");
  EXPECT_EQ(input_error_of([&] { load_assistant_weights(missing); }),
            missing.string() + ": missing tensor 'model.layers.1.self_attn.q_proj.weight'");

  TestModelSpec bad = *assistant_spec_;
  for (TestTensor& t : bad.tensors) {
    if (t.spec.name == "pre_projection.weight") t.spec.shape = {32, 64};
  }
  const fs::path shape = path("shape");
  write_spec(bad, shape);
  EXPECT_EQ(input_error_of([&] { load_assistant_weights(shape); }),
            (shape / "model.safetensors").string() +
                ": tensor 'pre_projection.weight' has shape [32, 64], expected [32, 128]");

  const fs::path order = path("order");
  write_spec(*assistant_spec_, order, "", "masked_embedding.token_ordering");
  EXPECT_EQ(input_error_of([&] { load_assistant_weights(order); }),
            order.string() +
                ": tensor 'masked_embedding.token_ordering' is not a permutation of the "
                "vocabulary (entry 1 is 0)");
}

// ---- The independent reference: plain loops in double over the raw file bytes. ----

struct RawTensors {
  explicit RawTensors(const fs::path& dir) : ckpt(dir) {}
  std::vector<double> get(const std::string& name) const {
    const TensorView* v = ckpt.find(name);
    EXPECT_NE(v, nullptr) << name;
    std::vector<double> out(static_cast<size_t>(v->numel()));
    for (size_t i = 0; i < out.size(); ++i) {
      if (v->dtype == DType::kF32) {
        float x;
        std::memcpy(&x, static_cast<const std::byte*>(v->data) + 4 * i, 4);
        out[i] = x;
      } else if (v->dtype == DType::kBF16) {
        uint16_t b;
        std::memcpy(&b, static_cast<const std::byte*>(v->data) + 2 * i, 2);
        const uint32_t bits = static_cast<uint32_t>(b) << 16;
        float x;
        std::memcpy(&x, &bits, 4);
        out[i] = x;
      } else if (v->dtype == DType::kI64) {
        int64_t x;
        std::memcpy(&x, static_cast<const std::byte*>(v->data) + 8 * i, 8);
        out[i] = static_cast<double>(x);
      } else {
        ADD_FAILURE() << name << " has an unexpected dtype";
      }
    }
    return out;
  }
  SafetensorsCheckpoint ckpt;
};

std::vector<double> matvec(const std::vector<double>& w, const std::vector<double>& x) {
  const size_t cols = x.size(), rows = w.size() / cols;
  std::vector<double> y(rows, 0.0);
  for (size_t r = 0; r < rows; ++r) {
    for (size_t c = 0; c < cols; ++c) y[r] += w[r * cols + c] * x[c];
  }
  return y;
}

std::vector<double> rmsnorm(const std::vector<double>& x, const std::vector<double>& w) {
  double ms = 0;
  for (double v : x) ms += v * v;
  const double inv = 1.0 / std::sqrt(ms / static_cast<double>(x.size()) + 1e-6);
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * w[i];
  return y;
}

void rope(double* x, int hd, int rotated, double theta, int pos) {
  const int half = hd / 2;
  for (int i = 0; i < rotated; ++i) {
    const double angle = pos / std::pow(theta, 2.0 * i / hd);
    const double a = x[i], b = x[i + half];
    x[i] = a * std::cos(angle) - b * std::sin(angle);
    x[i + half] = b * std::cos(angle) + a * std::sin(angle);
  }
}

double gelu_tanh(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

struct RefOutput {
  std::vector<double> logits, hidden;
  std::vector<int32_t> scored;  // masked head: the token ids that got a real logit
};

// One draft step of the tiny assistant exactly as HF's Gemma4AssistantForCausalLM describes it
// (docs/MTP_DRAFTER.md), reading the target's K/V slots through KvCache::read.
RefOutput reference_step(const fs::path& assistant_dir, const fs::path& target_dir, bool masked,
                         int32_t token, const std::vector<float>& hidden, int pos,
                         const KvCache& cache, const std::vector<int32_t>& table) {
  const RawTensors a(assistant_dir), t(target_dir);
  const int B = 64, h = 32, nH = 4, W = 8, V = 262144;
  std::vector<double> x(2 * B);
  const std::vector<double> emb = t.get("model.language_model.embed_tokens.weight");
  for (int i = 0; i < B; ++i) x[i] = emb[static_cast<size_t>(token) * B + i] * std::sqrt(64.0);
  for (int i = 0; i < B; ++i) x[B + i] = hidden[static_cast<size_t>(i)];
  std::vector<double> s = matvec(a.get("pre_projection.weight"), x);
  const bool sliding[4] = {true, true, true, false};
  for (int l = 0; l < 4; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const int hd = sliding[l] ? 32 : 64, nkv = sliding[l] ? 2 : 1;
    const int src = sliding[l] ? 2 : 1;  // the tiny target's last own-cache layers
    std::vector<double> q = matvec(a.get(p + "self_attn.q_proj.weight"),
                                   rmsnorm(s, a.get(p + "input_layernorm.weight")));
    const std::vector<double> qn = a.get(p + "self_attn.q_norm.weight");
    std::vector<double> attn(static_cast<size_t>(nH * hd), 0.0);
    const int begin = sliding[l] ? std::max(0, pos - W + 1) : 0;
    std::vector<float> k(static_cast<size_t>(nkv * hd)), v(k.size());
    for (int head = 0; head < nH; ++head) {
      std::vector<double> qh(q.begin() + head * hd, q.begin() + (head + 1) * hd);
      qh = rmsnorm(qh, qn);
      if (sliding[l]) {
        rope(qh.data(), hd, hd / 2, 10000.0, pos);
      } else {
        rope(qh.data(), hd, static_cast<int>(0.25 * hd / 2), 1000000.0, pos);
      }
      const int kvh = head / (nH / nkv);
      std::vector<double> scores;
      for (int j = begin; j < pos; ++j) {
        cache.read(src, table[static_cast<size_t>(j / cache.block_size())], j % cache.block_size(),
                   k.data(), v.data());
        double d = 0;
        for (int e = 0; e < hd; ++e)
          d += qh[static_cast<size_t>(e)] * k[static_cast<size_t>(kvh * hd + e)];
        scores.push_back(d);
      }
      const double mx = *std::max_element(scores.begin(), scores.end());
      double sum = 0;
      for (double& sc : scores) sum += (sc = std::exp(sc - mx));
      for (int j = begin; j < pos; ++j) {
        cache.read(src, table[static_cast<size_t>(j / cache.block_size())], j % cache.block_size(),
                   k.data(), v.data());
        for (int e = 0; e < hd; ++e) {
          attn[static_cast<size_t>(head * hd + e)] +=
              scores[static_cast<size_t>(j - begin)] / sum * v[static_cast<size_t>(kvh * hd + e)];
        }
      }
    }
    std::vector<double> o = rmsnorm(matvec(a.get(p + "self_attn.o_proj.weight"), attn),
                                    a.get(p + "post_attention_layernorm.weight"));
    for (int i = 0; i < h; ++i) s[i] += o[i];
    const std::vector<double> n = rmsnorm(s, a.get(p + "pre_feedforward_layernorm.weight"));
    std::vector<double> g = matvec(a.get(p + "mlp.gate_proj.weight"), n);
    const std::vector<double> u = matvec(a.get(p + "mlp.up_proj.weight"), n);
    for (size_t i = 0; i < g.size(); ++i) g[i] = gelu_tanh(g[i]) * u[i];
    const std::vector<double> f = rmsnorm(matvec(a.get(p + "mlp.down_proj.weight"), g),
                                          a.get(p + "post_feedforward_layernorm.weight"));
    const double scalar = a.get(p + "layer_scalar")[0];
    for (int i = 0; i < h; ++i) s[i] = (s[i] + f[i]) * scalar;
  }
  const std::vector<double> normed = rmsnorm(s, a.get("model.norm.weight"));
  RefOutput out;
  out.hidden = matvec(a.get("post_projection.weight"), normed);
  const std::vector<double> table_w = a.get("model.embed_tokens.weight");
  if (!masked) {
    out.logits = matvec(table_w, normed);
    return out;
  }
  // Centroid head: top-32 of 2048 clusters, 128 tokens each, the rest at min(scored) - 1.
  const std::vector<double> cl = matvec(a.get("masked_embedding.centroids.weight"), normed);
  const std::vector<double> ordering = a.get("masked_embedding.token_ordering");
  std::vector<int> rank(cl.size());
  std::iota(rank.begin(), rank.end(), 0);
  std::sort(rank.begin(), rank.end(), [&](int i, int j) { return cl[i] > cl[j]; });
  std::vector<double> scored_logits;
  for (int c = 0; c < 32; ++c) {
    for (int j = 0; j < 128; ++j) {
      const auto tok = static_cast<int32_t>(ordering[static_cast<size_t>(rank[c] * 128 + j)]);
      double d = 0;
      for (int e = 0; e < h; ++e) d += normed[e] * table_w[static_cast<size_t>(tok) * h + e];
      out.scored.push_back(tok);
      scored_logits.push_back(d);
    }
  }
  const double fill = *std::min_element(scored_logits.begin(), scored_logits.end()) - 1.0;
  out.logits.assign(static_cast<size_t>(V), fill);
  for (size_t i = 0; i < out.scored.size(); ++i) {
    out.logits[static_cast<size_t>(out.scored[i])] = scored_logits[i];
  }
  return out;
}

// A target prefill of `prompt` (longer than the sliding window) into a fresh cache.
struct TargetRun {
  TargetRun(Gemma4Model& model, const std::vector<int32_t>& prompt)
      : cache(model.text_config(), {16, 16}, 4), table(16) {
    std::iota(table.begin(), table.end(), 0);
    std::reverse(table.begin(), table.end());  // scattered blocks
    SequenceInput in;
    in.tokens = prompt;
    in.block_tables = {table, table};
    out.return_hidden = true;
    model.forward(std::span<const SequenceInput>(&in, 1), cache, &out);
  }
  KvCache cache;
  std::vector<int32_t> table;
  ForwardOutput out;
};

const std::vector<int32_t> kPrompt = {2, 17, 301, 45, 99, 12, 7, 480, 33, 61, 5, 250, 3};

double max_abs_diff(const float* got, const std::vector<double>& want) {
  double d = 0;
  for (size_t i = 0; i < want.size(); ++i) d = std::max(d, std::abs(got[i] - want[i]));
  return d;
}

TEST_F(TinyPair, TargetReturnsItsFinalNormedHiddenState) {
  Gemma4Model model(load_model_weights(path("target")), std::make_shared<ThreadPool>(2));
  TargetRun run(model, kPrompt);
  ASSERT_EQ(run.out.rows, 1);
  ASSERT_EQ(run.out.hidden.size(), 64u);
  // The LM head applied to it gives the logits (tied embedding, soft-capped at 30).
  const RawTensors t(path("target"));
  const std::vector<double> emb = t.get("model.language_model.embed_tokens.weight");
  for (int tok : {0, 17, 262143}) {
    double d = 0;
    for (int e = 0; e < 64; ++e) d += run.out.hidden[static_cast<size_t>(e)] * emb[tok * 64 + e];
    EXPECT_NEAR(run.out.logits[static_cast<size_t>(tok)], 30.0 * std::tanh(d / 30.0), 1e-4);
  }
  ForwardOutput plain;
  SequenceInput in;
  in.tokens = kPrompt;
  in.block_tables = {run.table, run.table};
  KvCache fresh(model.text_config(), {16, 16}, 4);
  model.forward(std::span<const SequenceInput>(&in, 1), fresh, &plain);
  EXPECT_TRUE(plain.hidden.empty());
  EXPECT_EQ(plain.logits, run.out.logits);  // asking for it changes nothing else
}

void check_against_reference(const fs::path& assistant_dir, const fs::path& target_dir,
                             bool masked) {
  Gemma4Model model(load_model_weights(target_dir), std::make_shared<ThreadPool>(2));
  TargetRun run(model, kPrompt);
  Gemma4Assistant drafter(load_assistant_weights(assistant_dir), model.weights(),
                          std::make_shared<ThreadPool>(2));
  const int pos = static_cast<int>(kPrompt.size());
  const int32_t token = 4242;
  DraftInput in;
  in.token = token;
  in.position = pos;
  in.hidden = run.out.hidden.data();
  in.block_tables = {run.table, run.table};
  DraftOutput out;
  drafter.step(std::span<const DraftInput>(&in, 1), run.cache, &out);
  ASSERT_EQ(out.rows, 1);
  ASSERT_EQ(out.logits.size(), 262144u);
  ASSERT_EQ(out.hidden.size(), 64u);
  const RefOutput ref = reference_step(assistant_dir, target_dir, masked, token, run.out.hidden,
                                       pos, run.cache, run.table);
  EXPECT_LT(max_abs_diff(out.hidden.data(), ref.hidden), 1e-5);
  EXPECT_LT(max_abs_diff(out.logits.data(), ref.logits), 1e-5);
  const auto argmax = [](const auto& v) {
    return std::max_element(v.begin(), v.end()) - v.begin();
  };
  EXPECT_EQ(argmax(out.logits), argmax(ref.logits));
}

TEST_F(TinyPair, MaskedHeadStepMatchesThePlainLoopReference) {
  check_against_reference(path("assistant"), path("target"), true);
}

TEST_F(TinyPair, DenseHeadStepMatchesThePlainLoopReference) {
  check_against_reference(path("dense"), path("target"), false);
}

// HF's Gemma4AssistantMaskedEmbedder: exactly top_k * (V / C) tokens scored, the rest at the
// smallest scored logit minus 1, so the argmax is always a scored token.
TEST_F(TinyPair, MaskedHeadScoresTheTopClustersOnly) {
  Gemma4Model model(load_model_weights(path("target")), std::make_shared<ThreadPool>(2));
  TargetRun run(model, kPrompt);
  Gemma4Assistant drafter(load_assistant_weights(path("assistant")), model.weights(), nullptr);
  DraftInput in{
      77, static_cast<int32_t>(kPrompt.size()), run.out.hidden.data(), {run.table, run.table}};
  DraftOutput out;
  drafter.step(std::span<const DraftInput>(&in, 1), run.cache, &out);
  const float fill = *std::min_element(out.logits.begin(), out.logits.end());
  std::vector<int32_t> scored;
  float lowest_scored = INFINITY;
  for (size_t i = 0; i < out.logits.size(); ++i) {
    if (out.logits[i] != fill) {
      scored.push_back(static_cast<int32_t>(i));
      lowest_scored = std::min(lowest_scored, out.logits[i]);
    }
  }
  ASSERT_EQ(scored.size(), 32u * 128u);
  EXPECT_EQ(fill, lowest_scored - 1.0f);
  // The scored tokens are whole clusters of token_ordering: 32 runs of 128 entries.
  const std::vector<int32_t>& order = drafter.weights().token_ordering;
  std::vector<uint8_t> is_scored(order.size(), 0);
  for (int32_t t : scored) is_scored[static_cast<size_t>(t)] = 1;
  int clusters = 0;
  for (size_t c = 0; c < 2048; ++c) {
    int n = 0;
    for (size_t j = 0; j < 128; ++j) n += is_scored[static_cast<size_t>(order[c * 128 + j])];
    EXPECT_TRUE(n == 0 || n == 128) << "cluster " << c << " partly scored";
    clusters += n == 128;
  }
  EXPECT_EQ(clusters, 32);
}

TEST_F(TinyPair, DeterministicAndBatchInvariant) {
  Gemma4Model model(load_model_weights(path("target")), std::make_shared<ThreadPool>(2));
  TargetRun a(model, kPrompt);
  const std::vector<int32_t> other = {2, 9, 8, 7, 6, 5, 4, 3, 10, 11};
  Gemma4Assistant drafter(load_assistant_weights(path("assistant")), model.weights(),
                          std::make_shared<ThreadPool>(2));
  // Sequence b lives in the same cache as a, in blocks a does not use.
  std::vector<int32_t> b_table = {0, 1, 2};
  std::vector<int32_t> a_table(a.table.begin(), a.table.begin() + 4);
  {
    SequenceInput in;
    in.tokens = other;
    in.block_tables = {b_table, b_table};
    ForwardOutput o;
    o.return_hidden = true;
    model.forward(std::span<const SequenceInput>(&in, 1), a.cache, &o);
    a.out.hidden.insert(a.out.hidden.end(), o.hidden.begin(), o.hidden.end());
  }
  std::vector<DraftInput> batch = {
      {5, static_cast<int32_t>(kPrompt.size()), a.out.hidden.data(), {a_table, a_table}},
      {6, static_cast<int32_t>(other.size()), a.out.hidden.data() + 64, {b_table, b_table}}};
  DraftOutput both, again, alone;
  drafter.step(batch, a.cache, &both);
  drafter.step(batch, a.cache, &again);
  EXPECT_EQ(both.logits, again.logits);
  EXPECT_EQ(both.hidden, again.hidden);
  drafter.step(std::span<const DraftInput>(&batch[1], 1), a.cache, &alone);
  ASSERT_EQ(both.rows, 2);
  EXPECT_EQ(0, std::memcmp(alone.logits.data(), both.logits.data() + 262144, 262144 * 4));
  EXPECT_EQ(0, std::memcmp(alone.hidden.data(), both.hidden.data() + 64, 64 * 4));
}

TEST_F(TinyPair, GreedyDraftChainsArgmaxAndHiddenAtOnePosition) {
  Gemma4Model model(load_model_weights(path("target")), std::make_shared<ThreadPool>(2));
  TargetRun run(model, kPrompt);
  Gemma4Assistant drafter(load_assistant_weights(path("dense")), model.weights(),
                          std::make_shared<ThreadPool>(2));
  DraftInput in{
      31, static_cast<int32_t>(kPrompt.size()), run.out.hidden.data(), {run.table, run.table}};
  std::vector<int32_t> tokens;
  drafter.draft_greedy(std::span<const DraftInput>(&in, 1), 3, run.cache, &tokens);
  ASSERT_EQ(tokens.size(), 3u);
  DraftInput cur = in;
  DraftOutput out;
  std::vector<float> hidden;
  for (int j = 0; j < 3; ++j) {
    drafter.step(std::span<const DraftInput>(&cur, 1), run.cache, &out);
    const auto best = static_cast<int32_t>(std::max_element(out.logits.begin(), out.logits.end()) -
                                           out.logits.begin());
    EXPECT_EQ(tokens[static_cast<size_t>(j)], best) << "step " << j;
    hidden = out.hidden;
    cur.token = best;
    cur.hidden = hidden.data();
  }
}

TEST_F(TinyPair, BadDraftInputsAreInputErrors) {
  Gemma4Model model(load_model_weights(path("target")), std::make_shared<ThreadPool>(2));
  TargetRun run(model, kPrompt);
  Gemma4Assistant drafter(load_assistant_weights(path("assistant")), model.weights(), nullptr);
  DraftOutput out;
  auto step = [&](DraftInput in) {
    return input_error_of(
        [&] { drafter.step(std::span<const DraftInput>(&in, 1), run.cache, &out); });
  };
  const DraftInput good{
      1, static_cast<int32_t>(kPrompt.size()), run.out.hidden.data(), {run.table, run.table}};
  EXPECT_EQ(step(good), "no error");
  DraftInput bad = good;
  bad.token = 262144;
  EXPECT_EQ(step(bad), "draft sequence 0: token 262144 is outside the vocabulary");
  bad = good;
  bad.position = 0;
  EXPECT_EQ(step(bad),
            "draft sequence 0: position 0 leaves no target KV to attend to (needs >= 1)");
  bad = good;
  bad.hidden = nullptr;
  EXPECT_EQ(step(bad), "draft sequence 0: no hidden state");
  const std::vector<int32_t> short_table = {0, 1};
  bad = good;
  bad.block_tables = {short_table, short_table};
  EXPECT_EQ(step(bad),
            "draft sequence 0: the sliding_attention block table covers 8 positions, fewer than "
            "its 13");
  const std::vector<int32_t> wild_table = {0, 1, 2, 99};
  bad = good;
  bad.block_tables = {wild_table, wild_table};
  EXPECT_EQ(step(bad), "draft batch: a block table names a block outside the target's cache");
}

int32_t first_max(const float* x, size_t n) {
  return static_cast<int32_t>(std::max_element(x, x + n) - x);
}

// The loop a proposer runs, at model level: the drafter proposes k tokens from the target's
// hidden row at the last accepted position, the target verifies [newest, drafts...] in one
// forward, the accepted prefix plus the target's own token are kept and the rejected K/V is
// simply overwritten later. Greedy output equals plain one-token decoding, whatever is accepted.
TEST_F(TinyPair, SpeculativeGreedyWithTheDrafterEqualsPlainGreedy) {
  Gemma4Model model(load_model_weights(path("target")), std::make_shared<ThreadPool>(2));
  const size_t V = 262144;
  const int kTokens = 12, k = 3;
  std::vector<int32_t> table(16);
  std::iota(table.begin(), table.end(), 0);
  auto forward = [&](KvCache& cache, std::span<const int32_t> tokens, int start, LogitsWanted w,
                     ForwardOutput* out) {
    SequenceInput in;
    in.tokens = tokens;
    in.start_pos = start;
    in.block_tables = {table, table};
    in.logits = w;
    out->return_hidden = true;
    model.forward(std::span<const SequenceInput>(&in, 1), cache, out);
  };
  std::vector<int32_t> plain;
  {
    KvCache cache(model.text_config(), {16, 16}, 4);
    ForwardOutput out;
    forward(cache, kPrompt, 0, LogitsWanted::kLast, &out);
    plain.push_back(first_max(out.logits.data(), V));
    while (static_cast<int>(plain.size()) < kTokens) {
      const int32_t t = plain.back();
      forward(cache, std::span<const int32_t>(&t, 1),
              static_cast<int>(kPrompt.size() + plain.size() - 1), LogitsWanted::kLast, &out);
      plain.push_back(first_max(out.logits.data(), V));
    }
  }
  Gemma4Assistant drafter(load_assistant_weights(path("assistant")), model.weights(),
                          std::make_shared<ThreadPool>(2));
  KvCache cache(model.text_config(), {16, 16}, 4);
  ForwardOutput out;
  forward(cache, kPrompt, 0, LogitsWanted::kLast, &out);
  std::vector<int32_t> spec = {first_max(out.logits.data(), V)};
  std::vector<float> hidden = out.hidden;
  int verified = 0;
  while (static_cast<int>(spec.size()) < kTokens) {
    const int32_t pos = static_cast<int32_t>(kPrompt.size() + spec.size() - 1);
    DraftInput in{spec.back(), pos, hidden.data(), {table, table}};
    std::vector<int32_t> drafts;
    drafter.draft_greedy(std::span<const DraftInput>(&in, 1), k, cache, &drafts);
    std::vector<int32_t> chunk = {spec.back()};
    chunk.insert(chunk.end(), drafts.begin(), drafts.end());
    forward(cache, chunk, pos, LogitsWanted::kAll, &out);
    ASSERT_EQ(out.rows, k + 1);
    int accepted = 0;
    while (accepted < k && first_max(&out.logits[accepted * V], V) == drafts[accepted]) {
      spec.push_back(drafts[static_cast<size_t>(accepted++)]);
    }
    spec.push_back(first_max(&out.logits[accepted * V], V));
    hidden.assign(out.hidden.begin() + accepted * 64, out.hidden.begin() + (accepted + 1) * 64);
    verified += k;
  }
  spec.resize(static_cast<size_t>(kTokens));
  EXPECT_EQ(spec, plain);
  EXPECT_GT(verified, 0);
}

// Load-time quantization of the drafter (and a quantized target's embedding table) keeps the
// step close to the float one: Q8_0 rounds each weight by at most 1/254 of its block's range.
TEST_F(TinyPair, QuantizedDrafterStaysCloseToFloat) {
  Gemma4Model model(load_model_weights(path("target")), std::make_shared<ThreadPool>(2));
  TargetRun run(model, kPrompt);
  auto pool = std::make_shared<ThreadPool>(2);
  Gemma4Assistant exact(load_assistant_weights(path("dense")), model.weights(), pool);
  AssistantWeights qw = load_assistant_weights(path("dense"));
  quantize_assistant_weights(qw, DType::kQ8_0, pool.get());
  EXPECT_EQ(qw.layers[0].q_proj.dtype, DType::kQ8_0);
  EXPECT_EQ(qw.pre_projection.dtype, DType::kQ8_0);
  EXPECT_EQ(qw.lm_head.data, qw.embed_tokens.data);
  Gemma4Assistant quantized(std::move(qw), model.weights(), pool);
  const DraftInput in{
      4242, static_cast<int32_t>(kPrompt.size()), run.out.hidden.data(), {run.table, run.table}};
  DraftOutput a, b;
  exact.step(std::span<const DraftInput>(&in, 1), run.cache, &a);
  quantized.step(std::span<const DraftInput>(&in, 1), run.cache, &b);
  double err = 0, norm = 0;
  for (size_t i = 0; i < a.logits.size(); ++i) {
    err += (a.logits[i] - b.logits[i]) * (a.logits[i] - b.logits[i]);
    norm += a.logits[i] * a.logits[i];
  }
  EXPECT_LT(std::sqrt(err / norm), 0.05);
}

TEST(AssistantCli, MakeTestModelWritesALoadableDrafter) {
  testing::TempDir dir;
  const std::string cli = testing::cli_binary().string() + " make-test-model --preset tiny";
  const auto ok = testing::run_command(cli + " --assistant --out " + (dir.path() / "a").string());
  ASSERT_EQ(ok.exit_code, 0) << ok.out;
  EXPECT_NE(ok.out.find("preset tiny-assistant"), std::string::npos) << ok.out;
  const AssistantWeights w = load_assistant_weights(dir.path() / "a");
  EXPECT_EQ(w.config.backbone_hidden_size, 64);
  EXPECT_EQ(w.layers.size(), 4u);
  // Stored quantized it would not load as HF checkpoints do: refused.
  const auto bad =
      testing::run_command(cli + " --assistant --dtype q8_0 --out " + (dir.path() / "b").string());
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "b" / "config.json"));
}

}  // namespace
}  // namespace gemmaserve
