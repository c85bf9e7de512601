// Gemma 4 GGUF files (llama.cpp's converter and llama-quantize, ../shared/fixtures/gguf) load as
// the same model as the Hugging Face checkpoint they were converted from: every tensor under its
// HF name with the same values, the same config, HF's logits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include "checkpoint/checkpoint.h"
#include "checkpoint/gguf_checkpoint.h"
#include "core/dtype.h"
#include "gemma4_golden_checks.h"
#include "io/gguf.h"
#include "kernels/cpu/convert.h"
#include "model/config.h"
#include "model/gemma4_gguf.h"
#include "model/weight_conversion.h"
#include "model/weights.h"
#include "test_support.h"

namespace gemmaserve {
namespace {

namespace fs = std::filesystem;
using golden::RefCase;

fs::path gguf_models(const fs::path& shared) { return shared / "fixtures" / "gguf" / "models"; }
fs::path tiny_models(const fs::path& shared) {
  return shared / "fixtures" / "gemma4-tiny" / "models";
}

std::vector<float> values(const CheckpointTensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  cpu::to_f32(t.dtype, t.data, out.data(), out.size());
  return out;
}

// Every tensor of the f32 GGUF, under its HF name, equals the bf16 checkpoint's bit for bit (the
// converter widened bf16 to f32); the checkpoint has no tensor the GGUF lacks.
void expect_same_tensors(const Checkpoint& gguf, const Checkpoint& hf) {
  for (const auto& [name, t] : gguf.tensors()) {
    SCOPED_TRACE(name);
    const CheckpointTensor* want = hf.find(name);
    ASSERT_NE(want, nullptr) << "no such tensor in the HF checkpoint";
    EXPECT_EQ(t->numel(), want->numel());
    if (t->numel() != want->numel()) continue;
    EXPECT_TRUE(values(*t) == values(*want));
    if (want->shape.size() > 0) {
      EXPECT_EQ(t->shape, want->shape);
    }
  }
  for (const auto& [name, t] : hf.tensors()) {
    EXPECT_NE(gguf.find(name), nullptr) << name << " is missing from the GGUF view";
  }
}

TEST(GgufModel, F32TensorsAreTheCheckpointsUnderHfNames) {
  GS_REQUIRE_SHARED(shared);
  for (const std::string m : {"dense", "moe", "keqv"}) {
    SCOPED_TRACE(m);
    const auto gguf = open_model_checkpoint(gguf_models(shared) / (m + "-f32.gguf"));
    const auto hf = open_checkpoint(tiny_models(shared) / m);
    EXPECT_EQ(gguf->format(), "gguf");
    expect_same_tensors(*gguf, *hf);
  }
  // The vision tower comes from the mmproj (its conv-shaped patch embedding back in HF order).
  const auto gguf = open_model_checkpoint(gguf_models(shared) / "vision-f32.gguf",
                                          gguf_models(shared) / "vision-mmproj-f32.gguf");
  expect_same_tensors(*gguf, *open_checkpoint(tiny_models(shared) / "vision"));
}

// The config.json the metadata describes parses to the checkpoint's own geometry.
TEST(GgufModel, MetadataGivesTheCheckpointsConfig) {
  GS_REQUIRE_SHARED(shared);
  for (const std::string m : {"dense", "moe", "keqv", "vision", "e2b-shape"}) {
    SCOPED_TRACE(m);
    const std::optional<fs::path> mmproj =
        m == "vision" ? std::optional(gguf_models(shared) / "vision-mmproj-f16.gguf")
                      : std::nullopt;
    const std::string type = m == "e2b-shape" ? "-Q4_K_M.gguf" : "-Q8_0.gguf";
    const auto gguf = open_model_checkpoint(gguf_models(shared) / (m + type), mmproj);
    const ModelConfig got = parse_model_config(gguf->config(), gguf->config_source());
    const ModelConfig want = load_model_config(tiny_models(shared) / m);
    const TextConfig &g = got.text, &w = want.text;
    EXPECT_EQ(g.vocab_size, w.vocab_size);
    EXPECT_EQ(g.hidden_size, w.hidden_size);
    EXPECT_EQ(g.num_hidden_layers, w.num_hidden_layers);
    EXPECT_EQ(g.num_attention_heads, w.num_attention_heads);
    EXPECT_EQ(g.layer_types, w.layer_types);
    EXPECT_EQ(g.sliding_window, w.sliding_window);
    EXPECT_EQ(g.final_logit_softcapping, w.final_logit_softcapping);
    EXPECT_EQ(g.hidden_size_per_layer_input, w.hidden_size_per_layer_input);
    EXPECT_EQ(g.vocab_size_per_layer_input, w.vocab_size_per_layer_input);
    EXPECT_EQ(g.num_kv_shared_layers, w.num_kv_shared_layers);
    EXPECT_EQ(g.enable_moe_block, w.enable_moe_block);
    EXPECT_EQ(g.num_experts, w.num_experts);
    EXPECT_EQ(g.top_k_experts, w.top_k_experts);
    EXPECT_EQ(g.moe_intermediate_size, w.moe_intermediate_size);
    EXPECT_EQ(g.tie_word_embeddings, w.tie_word_embeddings);
    EXPECT_FLOAT_EQ(static_cast<float>(g.rms_norm_eps), static_cast<float>(w.rms_norm_eps));
    for (int t = 0; t < kNumAttentionTypes; ++t) {
      EXPECT_EQ(g.rope[t].theta, w.rope[t].theta);
      EXPECT_EQ(g.rope[t].partial_rotary_factor, w.rope[t].partial_rotary_factor);
    }
    ASSERT_EQ(g.layers.size(), w.layers.size());
    for (size_t i = 0; i < g.layers.size(); ++i) {
      SCOPED_TRACE(i);
      EXPECT_EQ(g.layers[i].type, w.layers[i].type);
      EXPECT_EQ(g.layers[i].head_dim, w.layers[i].head_dim);
      EXPECT_EQ(g.layers[i].num_kv_heads, w.layers[i].num_kv_heads);
      EXPECT_EQ(g.layers[i].k_eq_v, w.layers[i].k_eq_v);
      EXPECT_EQ(g.layers[i].kv_source_layer, w.layers[i].kv_source_layer);
      EXPECT_EQ(g.layers[i].intermediate_size, w.layers[i].intermediate_size);
    }
    EXPECT_EQ(got.has_vision, want.has_vision);
    if (got.vision && want.vision) {
      EXPECT_EQ(got.vision->hidden_size, want.vision->hidden_size);
      EXPECT_EQ(got.vision->num_hidden_layers, want.vision->num_hidden_layers);
      EXPECT_EQ(got.vision->head_dim, want.vision->head_dim);
      EXPECT_EQ(got.vision->num_key_value_heads, want.vision->num_key_value_heads);
      EXPECT_EQ(got.vision->pooling_kernel_size, want.vision->pooling_kernel_size);
      EXPECT_EQ(got.vision->position_embedding_size, want.vision->position_embedding_size);
      EXPECT_EQ(got.vision->standardize, want.vision->standardize);
      EXPECT_EQ(got.vision->use_clipped_linears, want.vision->use_clipped_linears);
      EXPECT_EQ(got.image_token_id, want.image_token_id);
      EXPECT_EQ(got.boi_token_id, want.boi_token_id);
      EXPECT_EQ(got.eoi_token_id, want.eoi_token_id);
    }
  }
}

// f32 and bf16 GGUFs hold the checkpoint's own values: HF's logits within 1e-4.
TEST(GgufModel, FloatFilesMatchTheHfReference) {
  GS_REQUIRE_SHARED(shared);
  golden::GoldenOptions opt;
  opt.incremental_case = "short";
  for (const std::string m : {"dense", "moe", "keqv"}) {
    for (const std::string type : {"f32", "bf16"}) {
      golden::run_golden(m + "-" + type + ".gguf", gguf_models(shared) / (m + "-" + type + ".gguf"),
                         golden::golden_dir() / "ref" / (m + ".json"), opt);
    }
  }
}

// A bf16 GGUF and the bf16 safetensors are the same weights: bit-identical logits.
TEST(GgufModel, Bf16FileEqualsTheSafetensorsBitForBit) {
  GS_REQUIRE_SHARED(shared);
  const RefCase c = golden::load_ref(golden::golden_dir() / "ref" / "moe.json").cases.at(1);
  std::vector<float> logits[2];
  const fs::path paths[2] = {gguf_models(shared) / "moe-bf16.gguf",
                             golden::golden_dir() / "models" / "moe"};
  for (int i = 0; i < 2; ++i) {
    auto model = golden::load_model(paths[i], 2);
    golden::PagedRunner runner(*model, 16, 256);
    logits[i] = runner.step1(runner.add_sequence(), c.prompt, LogitsWanted::kAll).logits;
  }
  ASSERT_FALSE(logits[0].empty());
  EXPECT_EQ(std::memcmp(logits[0].data(), logits[1].data(), logits[0].size() * sizeof(float)), 0);
}

float max_dlogprob(const float* a, const float* b, int n) {
  auto lse = [n](const float* x) {
    const float m = *std::max_element(x, x + n);
    double s = 0;
    for (int i = 0; i < n; ++i) s += std::exp(static_cast<double>(x[i] - m));
    return m + static_cast<float>(std::log(s));
  };
  const float la = lse(a), lb = lse(b);
  float worst = 0;
  for (int i = 0; i < n; ++i) worst = std::max(worst, std::fabs((a[i] - la) - (b[i] - lb)));
  return worst;
}

// Quantized files run on the int8-activation kernels: the fixture README's tolerance against
// references computed on the files' exact dequantized weights (1.5 in log-probability, greedy
// tokens up to the first reference margin below 0.5).
void expect_near_quantized_reference(const fs::path& file, const fs::path& ref_path) {
  SCOPED_TRACE(file.filename().string());
  std::ifstream in(ref_path);
  const nlohmann::json ref = nlohmann::json::parse(in);
  auto model = golden::load_model(file, 2);
  const int V = model->vocab_size();
  golden::PagedRunner runner(*model, 16, 4096);
  for (const auto& c : ref.at("cases")) {
    const std::string name = c.at("name").get<std::string>();
    SCOPED_TRACE(name);
    std::vector<int32_t> tokens = c.at("prompt_ids").get<std::vector<int32_t>>();
    const std::vector<float> want = c.at("last_logits").get<std::vector<float>>();
    const int id = runner.add_sequence();
    ForwardOutput out = runner.step1(id, tokens, LogitsWanted::kLast);
    ASSERT_EQ(out.logits.size(), static_cast<size_t>(V));
    const float d = max_dlogprob(out.logits.data(), want.data(), V);
    std::printf("GGUF %s/%s max|dlogprob| = %.3f\n", file.filename().c_str(), name.c_str(), d);
    EXPECT_LT(d, 1.5f);
    const auto& steps = c.at("greedy").at("steps");
    for (const auto& s : steps) {
      const int got = golden::argmax(out.logits.data(), V);
      if (s.at("margin").get<float>() < 0.5f) break;
      ASSERT_EQ(got, s.at("token").get<int>());
      out = runner.step1(id, {got}, LogitsWanted::kLast);
    }
    runner.free_sequence(id);
  }
}

TEST(GgufModel, Q8_0AndQ4_0FilesMatchTheirDequantizedReferences) {
  GS_REQUIRE_SHARED(shared);
  const fs::path refs = shared / "fixtures" / "gguf" / "ref";
  for (const std::string m : {"dense-Q8_0", "moe-Q8_0", "keqv-Q8_0", "vision-Q8_0", "dense-Q4_0",
                              "moe-Q4_0", "keqv-Q4_0"}) {
    expect_near_quantized_reference(gguf_models(shared) / (m + ".gguf"), refs / (m + ".json"));
  }
}

// llama-quantize's Q4_K_M mix of the E2B-shaped model: Q4_K binds as stored, the Q6_K tensors
// (tied embedding, per-layer embeddings, some v / down) are converted to Q8_0 at load.
TEST(GgufModel, Q4_K_MFileMatchesItsDequantizedReference) {
  GS_REQUIRE_SHARED(shared);
  expect_near_quantized_reference(gguf_models(shared) / "e2b-shape-Q4_K_M.gguf",
                                  shared / "fixtures" / "gguf" / "ref" / "e2b-shape-Q4_K_M.json");
  const ModelWeights w = load_model_weights(gguf_models(shared) / "e2b-shape-Q4_K_M.gguf");
  EXPECT_EQ(w.layers[0].q_proj.dtype, DType::kQ4_K);
  EXPECT_EQ(w.embed_tokens.dtype, DType::kQ8_0);  // Q6_K in the file
  EXPECT_EQ(w.per_layer_model_projection.dtype, DType::kBF16);
}

// Every storage-only type converts to Q8_0 within half an 8-bit step of each block's largest
// magnitude of ggml's own dequantized values (rows of ggml-types.gguf, ggml's quantizers).
TEST(GgufModel, StorageOnlyTypesConvertToQ8_0WithinHalfAStep) {
  const GgufCheckpoint types(testing::source_dir() / "tests" / "data" / "gguf" / "ggml-types.gguf");
  std::vector<std::shared_ptr<const void>> owned;
  WeightConversionTally tally;
  int converted = 0;
  for (const auto& [name, t] : types.tensors()) {
    if (!name.ends_with(".quant") || !dtype_is_storage_only(t->dtype)) continue;
    SCOPED_TRACE(name);
    const int64_t cols = t->shape.back(), rows = t->numel() / cols;
    const WeightMatrix m = convert_for_kernels(*t, rows, cols, &owned, nullptr, &tally);
    ASSERT_EQ(m.dtype, DType::kQ8_0);
    std::vector<float> exact(static_cast<size_t>(t->numel())), got(exact.size());
    cpu::to_f32(t->dtype, t->data, exact.data(), exact.size());
    cpu::to_f32(DType::kQ8_0, m.data, got.data(), got.size());
    for (size_t b = 0; b < exact.size(); b += 32) {
      float amax = 0;
      for (size_t i = b; i < b + 32; ++i) amax = std::max(amax, std::fabs(exact[i]));
      for (size_t i = b; i < b + 32; ++i) {
        // Half a step of amax / 127, plus the f16 rounding of the block scale (subnormal below
        // 6.1e-5: its step 2^-24 times 127 levels).
        ASSERT_LE(std::fabs(got[i] - exact[i]), amax / 254 * 1.01f + 127.0f * 0x1p-24f) << i;
      }
    }
    ++converted;
  }
  EXPECT_GE(converted, 20);
  EXPECT_EQ(tally.by_type.size(), static_cast<size_t>(converted));
}

// The mmproj's tower encodes an image as the checkpoint's tower does.
TEST(GgufModel, MmprojTowerEncodesLikeTheCheckpoint) {
  GS_REQUIRE_SHARED(shared);
  auto from_gguf = std::make_unique<Gemma4Model>(
      load_model_weights(gguf_models(shared) / "vision-bf16.gguf", nullptr,
                         [&] {
                           WeightLoadOptions o;
                           o.mmproj = gguf_models(shared) / "vision-mmproj-f32.gguf";
                           return o;
                         }()),
      std::make_shared<ThreadPool>(2));
  auto from_hf = golden::load_model(golden::golden_dir() / "models" / "vision", 2);
  const VisionConfig& v = *from_hf->config().vision;
  const int side = 8, patch = 3 * v.patch_size * v.patch_size;
  ImagePatches image;
  std::vector<float> pixels(static_cast<size_t>(side * side * patch));
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<float>((i * 37) % 101) / 100;
  std::vector<int32_t> positions;
  for (int y = 0; y < side; ++y) {
    for (int x = 0; x < side; ++x) positions.insert(positions.end(), {x, y});
  }
  std::vector<float> a, b;
  from_gguf->encode_image({pixels, positions}, &a);
  from_hf->encode_image({pixels, positions}, &b);
  ASSERT_EQ(a.size(), b.size());
  ASSERT_FALSE(a.empty());
  EXPECT_LT(golden::max_abs_diff(a.data(), b.data(), a.size()), 1e-5f);
}

std::string load_error(const fs::path& model, std::optional<fs::path> mmproj = std::nullopt) {
  return testing::input_error_of([&] {
    WeightLoadOptions o;
    o.mmproj = mmproj;
    load_model_weights(model, nullptr, o);
  });
}

TEST(GgufModel, ClearErrorsForWrongFiles) {
  GS_REQUIRE_SHARED(shared);
  const fs::path mmproj = gguf_models(shared) / "vision-mmproj-f16.gguf";
  EXPECT_EQ(load_error(mmproj), mmproj.string() +
                                    ": is a multimodal projector (mmproj) file; pass the model "
                                    "GGUF and give this one with --mmproj");
  const fs::path text = gguf_models(shared) / "dense-Q4_0.gguf";
  EXPECT_EQ(load_error(text, text), text.string() +
                                        ": --mmproj needs a multimodal projector GGUF, this is a "
                                        "gemma4 model");
  const fs::path folder = golden::golden_dir() / "models" / "dense";
  EXPECT_EQ(load_error(folder, mmproj),
            "--mmproj: " + mmproj.string() + " is a GGUF vision projector, but the model " +
                folder.string() + " is not a GGUF file (its vision tower comes from the folder)");
  // The vocabulary-only GGUF of the real tokenizer carries 26B-A4B's metadata but no tensors.
  const fs::path vocab = shared / "data" / "gemma4-tokenizer" / "ggml-vocab-gemma-4.gguf";
  EXPECT_EQ(load_error(vocab), vocab.string() + ": missing tensor 'token_embd.weight'");
  // Another architecture is named.
  testing::TempDir dir;
  const fs::path llama = dir.path() / "llama.gguf";
  {
    std::string b = "GGUF";
    auto put = [&b](auto v) { b.append(reinterpret_cast<const char*>(&v), sizeof v); };
    put(uint32_t{3});
    put(uint64_t{0});
    put(uint64_t{1});
    const std::string key = "general.architecture", value = "llama";
    put(uint64_t{key.size()});
    b += key;
    put(uint32_t{8});
    put(uint64_t{value.size()});
    b += value;
    std::ofstream(llama, std::ios::binary).write(b.data(), static_cast<std::streamsize>(b.size()));
  }
  EXPECT_EQ(load_error(llama), llama.string() +
                                   ": GGUF architecture is 'llama'; gemmaserve serves Gemma 4 "
                                   "(architecture 'gemma4')");
}

}  // namespace
}  // namespace gemmaserve
