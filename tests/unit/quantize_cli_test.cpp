// `gemmaserve quantize`, loading quantized checkpoints, --quantization, and their errors.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/weights.h"
#include "test_support.h"

namespace gemmaserve {
namespace {

namespace fs = std::filesystem;
using testing::cli_binary;
using testing::run_command;

std::string cli() { return cli_binary().string(); }

fs::path golden_model(const std::string& name) {
  return testing::source_dir() / "tests/data/golden/models" / name;
}

// Runs the CLI, returning exit code and stderr.
testing::CommandResult run_err(const std::string& args) {
  return run_command(cli() + " " + args + " 2>&1 >/dev/null");
}

size_t matrix_bytes(const WeightMatrix& m) {
  return static_cast<size_t>(m.rows) * dtype_row_bytes(m.dtype, m.cols);
}

TEST(QuantizeCli, WritesACheckpointThatLoadsLikeLoadTimeQuantization) {
  testing::TempDir tmp;
  const fs::path out = tmp.path() / "q8";
  auto r = run_command(cli() + " quantize " + golden_model("dense").string() + " " + out.string() +
                       " --type q8_0 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(fs::exists(out / "generation_config.json"));
  std::ifstream in(out / "config.json");
  const auto config = nlohmann::json::parse(in);
  ASSERT_TRUE(config.contains("quantization_config"));
  EXPECT_EQ(config["quantization_config"]["quant_method"], "gemmaserve");
  EXPECT_EQ(config["quantization_config"]["weight_type"], "q8_0");

  const ModelWeights stored = load_model_weights(out);
  ASSERT_TRUE(stored.quantization);
  EXPECT_EQ(*stored.quantization, DType::kQ8_0);
  EXPECT_EQ(stored.embed_tokens.dtype, DType::kQ8_0);
  EXPECT_EQ(stored.lm_head.data, stored.embed_tokens.data);  // tied: one copy
  EXPECT_EQ(stored.layers[0].q_proj.dtype, DType::kQ8_0);
  // per_layer_projection is [H, P = 8]: rows of 8 are not whole blocks and stay float.
  EXPECT_EQ(stored.layers[0].per_layer_projection.dtype, DType::kBF16);

  WeightLoadOptions opts;
  opts.quantization = DType::kQ8_0;
  const ModelWeights at_load = load_model_weights(golden_model("dense"), nullptr, opts);
  for (auto pair : {std::make_pair(&stored.embed_tokens, &at_load.embed_tokens),
                    std::make_pair(&stored.layers[3].down_proj, &at_load.layers[3].down_proj)}) {
    ASSERT_EQ(pair.first->dtype, pair.second->dtype);
    ASSERT_EQ(matrix_bytes(*pair.first), matrix_bytes(*pair.second));
    EXPECT_EQ(std::memcmp(pair.first->data, pair.second->data, matrix_bytes(*pair.first)), 0)
        << pair.first->name;
  }
  // Same type again is a no-op; another type is an error.
  EXPECT_NO_THROW(load_model_weights(out, nullptr, opts));
  opts.quantization = DType::kQ4_0;
  try {
    load_model_weights(out, nullptr, opts);
    ADD_FAILURE() << "re-quantizing did not throw";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("already quantized to q8_0"), std::string::npos)
        << e.what();
  }
  // Generation runs on the stored checkpoint, and --quantization q4_0 is refused there.
  const std::string gen =
      " --prompt-ids 2,3,4 --max-tokens 3 --max-model-len 512 --kv-cache-memory 64M";
  r = run_command(cli() + " generate " + out.string() + gen + " 2>/dev/null");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_FALSE(r.out.empty());
  r = run_err("generate " + out.string() + gen + " --quantization q4_0");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("already quantized to q8_0"), std::string::npos) << r.out;
  // Quantizing a quantized checkpoint again is refused too.
  r = run_err("quantize " + out.string() + " " + (tmp.path() / "again").string() + " --type q4_0");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("already quantized"), std::string::npos) << r.out;
}

TEST(QuantizeCli, LoadTimeQuantizationGenerates) {
  for (const char* type : {"q8_0", "q4_0", "q4_k"}) {
    auto r = run_command(cli() + " generate " + golden_model("moe").string() +
                         " --prompt-ids 2,3,4 --max-tokens 4 --max-model-len 512"
                         " --kv-cache-memory 64M --quantization " +
                         type + " 2>/dev/null");
    EXPECT_EQ(r.exit_code, 0) << type;
    EXPECT_FALSE(r.out.empty()) << type;
  }
}

TEST(QuantizeCli, MakeTestModelWritesQuantizedWeightsDirectly) {
  testing::TempDir tmp;
  const fs::path q = tmp.path() / "q4", f = tmp.path() / "f32";
  auto r = run_command(cli() + " make-test-model --preset tiny --dtype q4_0 --seed 5 --out " +
                       q.string() + " 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  r = run_command(cli() + " make-test-model --preset tiny --dtype f32 --seed 5 --out " +
                  f.string() + " 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const ModelWeights direct = load_model_weights(q);
  ASSERT_TRUE(direct.quantization);
  EXPECT_EQ(*direct.quantization, DType::kQ4_0);
  EXPECT_EQ(direct.embed_tokens.dtype, DType::kQ8_0);  // the tied LM head keeps 8 bits
  EXPECT_EQ(direct.layers[0].q_proj.dtype, DType::kQ4_0);
  WeightLoadOptions opts;
  opts.quantization = DType::kQ4_0;
  const ModelWeights at_load = load_model_weights(f, nullptr, opts);
  for (auto pair :
       {std::make_pair(&direct.embed_tokens, &at_load.embed_tokens),
        std::make_pair(&direct.layers[1].experts_gate_up, &at_load.layers[1].experts_gate_up),
        std::make_pair(&direct.layers[2].o_proj, &at_load.layers[2].o_proj)}) {
    ASSERT_EQ(pair.first->dtype, pair.second->dtype) << pair.first->name;
    ASSERT_EQ(matrix_bytes(*pair.first), matrix_bytes(*pair.second));
    EXPECT_EQ(std::memcmp(pair.first->data, pair.second->data, matrix_bytes(*pair.first)), 0)
        << pair.first->name;
  }
  r = run_command(cli() + " generate " + q.string() +
                  " --prompt-ids 2,3,4 --max-tokens 3 --max-model-len 256 --kv-cache-memory 64M"
                  " 2>/dev/null");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_FALSE(r.out.empty());
}

TEST(QuantizeCli, ReplacesAStaleCheckpointInOutDir) {
  testing::TempDir tmp;
  const fs::path out = tmp.path() / "q";
  fs::create_directories(out);
  std::ofstream(out / "model.safetensors.index.json") << "{}";
  std::ofstream(out / "model-00001-of-00002.safetensors") << "junk";
  auto r = run_command(cli() + " quantize " + golden_model("keqv").string() + " " + out.string() +
                       " --type q4_0 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_FALSE(fs::exists(out / "model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(out / "model-00001-of-00002.safetensors"));
  EXPECT_EQ(*load_model_weights(out).quantization, DType::kQ4_0);
}

TEST(QuantizeCli, Errors) {
  testing::TempDir tmp;
  const std::string in = golden_model("dense").string();
  auto r = run_err("quantize " + in + " " + (tmp.path() / "x").string() + " --type q5_k");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("--type: unknown quantization type 'q5_k'"), std::string::npos) << r.out;
  r = run_err("quantize " + in + " " + (tmp.path() / "x").string());
  EXPECT_EQ(r.exit_code, 2);
  // Hidden size 64, MLP 128: keqv's projections are not whole 256-element Q4_K blocks and fall
  // back to Q4_0 (logged); the tied embedding is Q8_0 as under every 4-bit type.
  const fs::path k4 = tmp.path() / "k4";
  r = run_err("quantize " + golden_model("keqv").string() + " " + k4.string() + " --type q4_k");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("row length 64 is not a multiple of 256; stored as Q4_0"), std::string::npos)
      << r.out;
  const ModelWeights w = load_model_weights(k4);
  EXPECT_EQ(*w.quantization, DType::kQ4_K);
  EXPECT_EQ(w.embed_tokens.dtype, DType::kQ8_0);
  EXPECT_EQ(w.layers[0].q_proj.dtype, DType::kQ4_0);
  // Loading with --quantization q4_k falls back the same way.
  WeightLoadOptions q4k;
  q4k.quantization = DType::kQ4_K;
  EXPECT_EQ(load_model_weights(golden_model("keqv"), nullptr, q4k).layers[0].q_proj.dtype,
            DType::kQ4_0);
  // Not a checkpoint.
  r = run_err("quantize " + tmp.path().string() + " " + (tmp.path() / "y").string() +
              " --type q8_0");
  EXPECT_EQ(r.exit_code, 2);
  r = run_err("generate " + in + " --prompt-ids 2 --quantization int8");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("--quantization: unknown quantization type 'int8'"), std::string::npos)
      << r.out;
}

}  // namespace
}  // namespace gemmaserve
