// `make-test-model`: the tiny preset writes a loadable, deterministic checkpoint that generates
// tokens; --dry-run of the big presets reports the parameter counts of the real variants.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <regex>
#include <string>
#include <vector>

#include "cli/make_test_model_command.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "io/json_file.h"
#include "io/safetensors.h"
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

struct CmdResult {
  int rc = -1;
  std::string out, err;
};

CmdResult run_cmd(const std::vector<std::string>& args) {
  CmdResult r;
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  r.rc = run_make_test_model_command(args);
  r.out = ::testing::internal::GetCapturedStdout();
  r.err = ::testing::internal::GetCapturedStderr();
  return r;
}

std::string file_bytes(const fs::path& p) {
  std::string s(fs::file_size(p), '\0');
  std::ifstream(p, std::ios::binary).read(s.data(), static_cast<std::streamsize>(s.size()));
  return s;
}

int64_t field(const std::string& out, const std::string& name) {
  std::smatch m;
  const std::regex re("\n" + name + ": (\\d+)");
  if (!std::regex_search(out, m, re)) {
    ADD_FAILURE() << "no '" << name << "' line in dry-run output";
    return -1;
  }
  return std::stoll(m[1]);
}

// One tiny checkpoint shared by the tests that only read it.
class TinyModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<TempDir>();
    const CmdResult r = run_cmd({"--preset", "tiny", "--seed", "7", "--out", path().string()});
    ASSERT_EQ(r.rc, 0) << r.err;
  }
  static void TearDownTestSuite() { dir_.reset(); }
  static fs::path path() { return dir_->path() / "tiny"; }
  static std::unique_ptr<TempDir> dir_;
};
std::unique_ptr<TempDir> TinyModel::dir_;

TEST_F(TinyModel, WritesTheOfficialLayout) {
  EXPECT_TRUE(fs::exists(path() / "model.safetensors"));
  EXPECT_FALSE(fs::exists(path() / "model.safetensors.index.json"));
  const json c = read_json_file(path() / "config.json");
  EXPECT_EQ(c["architectures"], json({"Gemma4ForConditionalGeneration"}));
  EXPECT_EQ(c["model_type"], "gemma4");
  EXPECT_EQ(c["vision_config"]["hidden_size"], 32);  // spec §10's tiny tower
  EXPECT_TRUE(c["audio_config"].is_null());
  EXPECT_EQ(c["text_config"]["vocab_size"], 262144);
  EXPECT_EQ(c["text_config"]["model_type"], "gemma4_text");
  EXPECT_EQ(c["text_config"]["dtype"], "bfloat16");
  const GenerationConfig g = load_generation_config(path());
  EXPECT_EQ(g.eos_token_ids, (std::vector<int>{1, 106, 50}));
  EXPECT_EQ(g.bos_token_id, 2);
  EXPECT_EQ(g.pad_token_id, 0);
  EXPECT_EQ(g.temperature, 1.0);
  EXPECT_EQ(g.top_k, 64);
  EXPECT_EQ(g.top_p, 0.95);
  const SafetensorsFile f(path() / "model.safetensors");
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.tensors().count("lm_head.weight"), 0u);  // tied, as HF saves it
}

TEST_F(TinyModel, LoadsWithEveryCodePathAndSaneRandomWeights) {
  const ModelWeights w = load_model_weights(path());
  const TextConfig& c = w.config.text;
  EXPECT_EQ(c.vocab_size, 262144);
  EXPECT_EQ(c.num_hidden_layers, 6);
  EXPECT_TRUE(c.enable_moe_block);
  EXPECT_EQ(c.hidden_size_per_layer_input, 16);
  EXPECT_EQ(c.first_kv_shared_layer(), 3);
  EXPECT_EQ(c.layers[1].head_dim, 64);
  EXPECT_EQ(c.layers[1].num_kv_heads, 1);
  EXPECT_TRUE(c.layers[1].k_eq_v);
  EXPECT_EQ(c.layers[3].kv_source_layer, 2);
  EXPECT_EQ(c.layers[5].kv_source_layer, 1);
  EXPECT_EQ(c.layers[4].intermediate_size, 256);  // double-wide on KV-shared layers
  ASSERT_TRUE(w.embed_tokens_per_layer);
  // Norm weights around 1 (not exactly 1, so a `1 + w` bug shows).
  double sum = 0, sq = 0;
  for (float x : w.final_norm) {
    sum += x;
    sq += x * x;
  }
  const double mean = sum / w.final_norm.size();
  const double sd = std::sqrt(sq / w.final_norm.size() - mean * mean);
  EXPECT_NEAR(mean, 1.0, 0.05);
  EXPECT_NEAR(sd, 0.1, 0.04);
  std::set<float> scalars;
  for (const auto& l : w.layers) {
    EXPECT_GE(l.layer_scalar, 0.5f);
    EXPECT_LT(l.layer_scalar, 1.5f);
    scalars.insert(l.layer_scalar);
    for (float s : l.router_per_expert_scale) {
      EXPECT_GE(s, 0.5f);
      EXPECT_LT(s, 1.5f);
    }
  }
  EXPECT_GT(scalars.size(), 3u);
  // A matrix is N(0, 1/fan_in): down_proj of layer 0 has fan_in 128.
  const WeightMatrix& d = w.layers[0].down_proj;
  std::vector<float> v(static_cast<size_t>(d.rows * d.cols));
  convert_to_f32(d.dtype, d.data, v.data(), v.size());
  sq = 0;
  for (float x : v) sq += x * x;
  EXPECT_NEAR(std::sqrt(sq / v.size()), 1.0 / std::sqrt(128.0), 0.01);
}

TEST_F(TinyModel, GeneratesTokens) {
  auto pool = std::make_shared<ThreadPool>(2);
  Gemma4Model model(load_model_weights(path()), pool);
  const std::vector<int32_t> prompt = {
      2,   818,  5279, 529, 7001, 563, 236764,
      108, 1437, 3617, 19,  2001, 14};  // longer than the window of 8
  const int block = 16, blocks = 4;
  KvCache cache(model.text_config(), {blocks, blocks}, block);
  std::vector<int32_t> table(blocks);
  std::iota(table.begin(), table.end(), 0);
  std::vector<int32_t> step = prompt, generated;
  int32_t pos = 0;
  for (int i = 0; i < 6; ++i) {
    SequenceInput in;
    in.tokens = step;
    in.start_pos = pos;
    for (int t = 0; t < kNumAttentionTypes; ++t) in.block_tables[t] = table;
    ForwardOutput out;
    model.forward(std::span<const SequenceInput>(&in, 1), cache, &out);
    ASSERT_EQ(out.rows, 1);
    ASSERT_EQ(out.logits.size(), 262144u);
    for (float x : out.logits) ASSERT_TRUE(std::isfinite(x) && std::fabs(x) <= 30.0f);
    pos += static_cast<int32_t>(step.size());
    step = {static_cast<int32_t>(std::max_element(out.logits.begin(), out.logits.end()) -
                                 out.logits.begin())};
    generated.push_back(step[0]);
  }
  EXPECT_EQ(generated.size(), 6u);
}

TEST_F(TinyModel, SameSeedSameBytesWhateverTheThreadsOrSharding) {
  TempDir tmp;
  const std::string one = (tmp.path() / "one").string(), sh = (tmp.path() / "sh").string();
  ASSERT_EQ(run_cmd({"--preset=tiny", "--seed=7", "--threads=1", "--out=" + one}).rc, 0);
  EXPECT_EQ(file_bytes(path() / "model.safetensors"), file_bytes(one + "/model.safetensors"));
  EXPECT_EQ(file_bytes(path() / "config.json"), file_bytes(one + "/config.json"));
  // Sharded: the same tensors.
  ASSERT_EQ(run_cmd({"--preset", "tiny", "--seed", "7", "--max-shard-mb", "30", "--out", sh}).rc,
            0);
  ASSERT_TRUE(fs::exists(sh + "/model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(sh + "/model.safetensors"));
  const SafetensorsCheckpoint a(path()), b(sh);
  ASSERT_EQ(a.all().size(), b.all().size());
  for (const auto& [name, v] : a.all()) {
    const TensorView* o = b.find(name);
    ASSERT_NE(o, nullptr) << name;
    ASSERT_EQ(o->nbytes, v->nbytes);
    EXPECT_EQ(std::memcmp(o->data, v->data, v->nbytes), 0) << name;
  }
  // Rewriting a folder as a single file removes the stale shards and index.
  ASSERT_EQ(run_cmd({"--preset", "tiny", "--seed", "8", "--out", sh}).rc, 0);
  EXPECT_FALSE(fs::exists(sh + "/model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(sh + "/model-00001-of-00003.safetensors"));
  EXPECT_NE(file_bytes(sh + "/model.safetensors"), file_bytes(path() / "model.safetensors"));
}

TEST_F(TinyModel, OtherDtypesHoldTheSameValues) {
  TempDir tmp;
  ASSERT_EQ(run_cmd({"--preset", "tiny", "--seed", "7", "--dtype", "f32", "--out",
                     (tmp.path() / "f32").string()})
                .rc,
            0);
  ASSERT_EQ(run_cmd({"--preset", "tiny", "--seed", "7", "--dtype", "f16", "--out",
                     (tmp.path() / "f16").string()})
                .rc,
            0);
  EXPECT_EQ(read_json_file(tmp.path() / "f16/config.json")["text_config"]["dtype"], "float16");
  const SafetensorsCheckpoint bf(path()), f32(tmp.path() / "f32"), f16(tmp.path() / "f16");
  for (const char* name : {"model.language_model.layers.2.mlp.up_proj.weight",
                           "model.language_model.layers.0.input_layernorm.weight",
                           "model.language_model.layers.5.layer_scalar"}) {
    const TensorView *a = bf.find(name), *b = f32.find(name), *h = f16.find(name);
    ASSERT_TRUE(a && b && h) << name;
    EXPECT_EQ(b->dtype, DType::kF32);
    EXPECT_EQ(h->dtype, DType::kF16);
    std::vector<float> va(static_cast<size_t>(a->numel())), vb(va.size()), vh(va.size());
    convert_to_f32(a->dtype, a->data, va.data(), va.size());
    convert_to_f32(b->dtype, b->data, vb.data(), vb.size());
    convert_to_f32(h->dtype, h->data, vh.data(), vh.size());
    for (size_t i = 0; i < va.size(); ++i) {
      ASSERT_EQ(va[i], bf16_to_f32(f32_to_bf16(vb[i]))) << name << " " << i;  // bf16 = round(f32)
      ASSERT_EQ(vh[i], f16_to_f32(f32_to_f16(vb[i]))) << name << " " << i;
    }
  }
  load_model_weights(tmp.path() / "f16");
}

// Parameter counts from the spec's shapes (§1, §4), written out independently of the presets.
struct Geometry {
  int64_t H, I, L, nH, nKV, nKVfull, hd = 256, hdfull = 512;
  int period;  // every period-th layer is full attention
  bool k_eq_v;
  int64_t kv_shared = 0;
  bool double_wide = false;
  int64_t P = 0, E = 0, Ie = 0;
  int64_t V = 262144;
};

int64_t count_params(const Geometry& g, int64_t* non_embedding = nullptr) {
  int64_t n = 0;
  const int64_t first_shared = g.L - g.kv_shared;
  for (int64_t i = 0; i < g.L; ++i) {
    const bool full = (i + 1) % g.period == 0;
    const bool shared = i >= first_shared;
    const int64_t hd = full ? g.hdfull : g.hd, kv = full ? g.nKVfull : g.nKV;
    const int64_t I = g.double_wide && shared ? 2 * g.I : g.I;
    n += 4 * g.H + 1;               // four layer norms, layer_scalar
    n += 2 * g.nH * hd * g.H + hd;  // q_proj, o_proj, q_norm
    if (!shared) n += kv * hd * g.H * (full && g.k_eq_v ? 1 : 2) + hd;  // k (v), k_norm
    n += 3 * I * g.H;                                                   // gate, up, down
    if (g.P) n += 2 * g.P * g.H + g.H;  // PLE gate, projection, norm
    if (g.E) n += g.E * g.H + g.H + g.E + 3 * g.E * g.Ie * g.H + 3 * g.H;  // router, experts
  }
  n += g.H;                             // final norm
  if (g.P) n += g.L * g.P * g.H + g.P;  // PLE model projection and norm
  if (non_embedding) *non_embedding = n;
  n += g.V * g.H;                 // embed_tokens (tied lm_head)
  if (g.P) n += g.V * g.L * g.P;  // PLE table
  return n;
}

// The vision tower's parameters (spec §4): patch projection, 2-D position table, encoder
// layers, std buffers or clip bounds, and the projection into the text model (hidden H).
struct VisionGeometry {
  int64_t Hv, Iv, L, heads, hd;
  bool clipped, standardize;
};
int64_t count_vision_params(const VisionGeometry& v, int64_t H) {
  int64_t n = v.Hv * 768 + 2 * 10240 * v.Hv;
  n += v.L * (4 * v.Hv + 4 * v.heads * v.hd * v.Hv + 2 * v.hd + 3 * v.Iv * v.Hv +
              (v.clipped ? 7 * 4 : 0));
  if (v.standardize) n += 2 * v.Hv;
  return n + H * v.Hv;
}
const VisionGeometry kLargeTower{1152, 4304, 27, 16, 72, false, true};
const VisionGeometry kESeriesTower{768, 3072, 16, 12, 64, true, false};

// The E2B/E4B audio tower's parameters (spec §2, §4): 12 conformer layers of 1024, 8 heads,
// subsampling channels 128 and 32, kernel 5, output 1536, and the projection into hidden H.
int64_t count_audio_params(int64_t H) {
  const int64_t A = 1024, L = 12, hd = 128, K = 5, P = 1536;
  int64_t n = 128 * 9 + 128 + 32 * 128 * 9 + 32 + A * (32 * 32);  // convs, norms, input_proj
  const int64_t feed_forward = 2 * A + 2 * 4 * A * A;             // two norms, two linears
  const int64_t attention = 4 * A * A + A * A + hd;               // q/k/v/post, relative_k
  const int64_t light_conv = 2 * A + 2 * A * A + A * A + K * A;   // norms, start, end, conv
  const int64_t clip_bounds = 10 * 4;                             // 10 clippable linears
  n += L * (2 * feed_forward + attention + 3 * A + light_conv + clip_bounds);
  return n + P * A + P + H * P;  // output_proj (+ bias), embed_audio
}

TEST(MakeTestModel, DryRun31bReportsTheRealParameterCount) {
  const CmdResult r = run_cmd({"--preset", "31b", "--dry-run"});
  ASSERT_EQ(r.rc, 0) << r.err;
  const Geometry g{5376, 21504, 60, 32, 16, 4, 256, 512, 6, true};
  const int64_t text = count_params(g);
  const int64_t want = text + count_vision_params(kLargeTower, 5376);
  EXPECT_EQ(field(r.out, "parameters"), want);
  EXPECT_EQ(field(r.out, "total_bytes"), 2 * want);        // bf16
  EXPECT_NEAR(static_cast<double>(text), 30.7e9, 0.05e9);  // model card: 30.7B
  EXPECT_NE(r.out.find("model.vision_tower.encoder.layers.26.mlp.down_proj.linear.weight BF16 "
                       "[1152, 4304]\n"),
            std::string::npos);
  EXPECT_NE(r.out.find("model.language_model.layers.59.self_attn.q_proj.weight BF16 "
                       "[16384, 5376]\n"),
            std::string::npos);
  EXPECT_EQ(r.out.find("layers.59.self_attn.v_proj"), std::string::npos);  // k_eq_v
  EXPECT_NE(r.out.find("model.language_model.layers.0.self_attn.v_proj.weight BF16 "
                       "[4096, 5376]\n"),
            std::string::npos);
}

TEST(MakeTestModel, DryRun26bA4bReportsTheRealParameterCount) {
  const CmdResult r = run_cmd({"--preset=26b-a4b", "--dry-run", "--dtype=bf16"});
  ASSERT_EQ(r.rc, 0) << r.err;
  const Geometry g{2816, 2112, 30, 16, 8, 2, 256, 512, 6, true, 0, false, 0, 128, 704};
  const int64_t text = count_params(g);
  const int64_t want = text + count_vision_params(kLargeTower, 2816);
  EXPECT_EQ(field(r.out, "parameters"), want);
  EXPECT_EQ(field(r.out, "total_bytes"), 2 * want);
  const double experts = 30.0 * 128 * 3 * 2816 * 704;  // spec §1: ≈ 22.8B
  EXPECT_NEAR(experts, 22.8e9, 0.05e9);
  EXPECT_NEAR(static_cast<double>(text), 25.2e9, 0.1e9);  // model card: 25.2B total
  EXPECT_NE(r.out.find("model.language_model.layers.29.experts.gate_up_proj BF16 "
                       "[128, 1408, 2816]\n"),
            std::string::npos);
  EXPECT_NE(r.out.find("model.language_model.layers.29.experts.down_proj BF16 "
                       "[128, 2816, 704]\n"),
            std::string::npos);
}

TEST(MakeTestModel, E2bAndE4bMatchTheSpec) {
  int64_t non_embedding = 0;
  const Geometry e2b{1536, 6144, 35, 8, 1, 1, 256, 512, 5, false, 20, true, 256};
  const TestModelSpec s = make_test_model_spec("e2b", DType::kBF16);
  EXPECT_EQ(s.num_parameters(), count_params(e2b, &non_embedding) +
                                    count_vision_params(kESeriesTower, 1536) +
                                    count_audio_params(1536));
  EXPECT_NEAR(static_cast<double>(non_embedding), 1.88e9, 0.01e9);  // spec §1 sanity check
  EXPECT_NEAR(static_cast<double>(count_audio_params(1536)), 0.3e9, 0.01e9);  // spec §1
  EXPECT_NEAR(static_cast<double>(s.num_parameters()), 5.1e9, 0.05e9);        // model card: 5.1B
  const TensorSpec* ple = nullptr;
  for (const auto& t : s.tensors) {
    if (t.key == "embed_tokens_per_layer.weight") ple = &t.spec;
  }
  ASSERT_NE(ple, nullptr);
  EXPECT_EQ(ple->shape, (std::vector<int64_t>{262144, 8960}));
  const Geometry e4b{2560, 10240, 42, 8, 2, 2, 256, 512, 6, false, 18, false, 256};
  EXPECT_EQ(
      make_test_model_spec("e4b", DType::kBF16).num_parameters(),
      count_params(e4b) + count_vision_params(kESeriesTower, 2560) + count_audio_params(2560));
  // f32 doubles the bytes.
  EXPECT_EQ(make_test_model_spec("e2b", DType::kF32).total_bytes(), 2 * s.total_bytes());
}

// E2B's audio tower (E4B's is the same tower): the released audio_config and multimodal ids,
// the tensors under the names and shapes of spec §4.
TEST(MakeTestModel, E2bHasTheRealAudioTower) {
  const json c = test_model_config("e2b");
  const json& a = c["audio_config"];
  EXPECT_EQ(a["model_type"], "gemma4_audio");
  EXPECT_EQ(a["hidden_size"], 1024);
  EXPECT_EQ(a["num_hidden_layers"], 12);
  EXPECT_EQ(a["num_attention_heads"], 8);
  EXPECT_EQ(a["conv_kernel_size"], 5);
  EXPECT_EQ(a["attention_chunk_size"], 12);
  EXPECT_EQ(a["attention_context_left"], 13);
  EXPECT_EQ(a["attention_context_right"], 0);
  EXPECT_EQ(a["output_proj_dims"], 1536);
  EXPECT_EQ(a["subsampling_conv_channels"], json({128, 32}));
  EXPECT_EQ(c["audio_token_id"], 258881);
  EXPECT_EQ(c["boa_token_id"], 256000);
  EXPECT_EQ(c["eoa_token_index"], 258883);
  EXPECT_EQ(test_model_config("e4b")["audio_config"], a);
  for (const char* preset : {"tiny", "31b", "26b-a4b"}) {
    EXPECT_TRUE(test_model_config(preset)["audio_config"].is_null()) << preset;
  }
  const CmdResult r = run_cmd({"--preset", "e2b", "--dry-run"});
  ASSERT_EQ(r.rc, 0) << r.err;
  for (const char* line :
       {"model.audio_tower.subsample_conv_projection.layer0.conv.weight BF16 [128, 1, 3, 3]\n",
        "model.audio_tower.subsample_conv_projection.layer1.conv.weight BF16 [32, 128, 3, 3]\n",
        "model.audio_tower.subsample_conv_projection.input_proj_linear.weight BF16 [1024, 1024]\n",
        "model.audio_tower.layers.11.feed_forward2.ffw_layer_1.linear.weight BF16 [4096, 1024]\n",
        "model.audio_tower.layers.11.self_attn.relative_k_proj.weight BF16 [1024, 1024]\n",
        "model.audio_tower.layers.11.self_attn.per_dim_scale BF16 [128]\n",
        "model.audio_tower.layers.11.self_attn.post.output_max BF16 []\n",
        "model.audio_tower.layers.11.lconv1d.linear_start.linear.weight BF16 [2048, 1024]\n",
        "model.audio_tower.layers.11.lconv1d.depthwise_conv1d.weight BF16 [1024, 1, 5]\n",
        "model.audio_tower.output_proj.weight BF16 [1536, 1024]\n",
        "model.audio_tower.output_proj.bias BF16 [1536]\n",
        "model.embed_audio.embedding_projection.weight BF16 [1536, 1536]\n"}) {
    EXPECT_NE(r.out.find(line), std::string::npos) << line;
  }
}

// The audio tower's random weights bind (every name and shape weights.cpp asks for, nothing
// left over) and encode a clip to finite rows, at the fixture's small tower size.
TEST(MakeTestModel, AudioTowerWeightsLoadAndEncode) {
  TempDir tmp;
  json config = test_model_config("tiny");
  config["audio_config"] = test_model_config("e2b")["audio_config"];
  for (auto [key, value] : {std::pair{"hidden_size", 32},
                            {"num_hidden_layers", 2},
                            {"num_attention_heads", 2},
                            {"output_proj_dims", 48}}) {
    config["audio_config"][key] = value;
  }
  config["audio_config"]["subsampling_conv_channels"] = {128, 16};
  write_test_model_of_config(tmp.path(), config, DType::kBF16, 5);
  ::testing::internal::CaptureStderr();
  ModelWeights weights = load_model_weights(tmp.path());
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(log.find("ignoring"), std::string::npos) << log;
  Gemma4Model model(std::move(weights), std::make_shared<ThreadPool>(2));
  ASSERT_TRUE(model.accepts_audio());
  std::vector<float> clip(16000);
  for (size_t i = 0; i < clip.size(); ++i) clip[i] = 0.5f * std::sin(0.06f * float(i));
  std::vector<float> rows;
  model.encode_audio(clip, &rows);
  ASSERT_EQ(rows.size(), static_cast<size_t>(model.audio_soft_tokens(16000) * 64));
  EXPECT_EQ(model.audio_soft_tokens(16000), 25);  // 1 s: 40 ms per soft token
  double sq = 0;
  for (float x : rows) {
    ASSERT_TRUE(std::isfinite(x));
    sq += double{x} * x;
  }
  EXPECT_GT(sq, 0.0);
}

TEST(MakeTestModel, BadFlagsExitWithUsage) {
  CmdResult r = run_cmd({"--preset", "7b", "--out", "/tmp/x"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("--preset: unknown preset '7b'"), std::string::npos) << r.err;
  r = run_cmd({"--preset", "tiny", "--dtype", "int4", "--out", "/tmp/x"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("--dtype: unknown dtype 'int4'"), std::string::npos) << r.err;
  r = run_cmd({"--preset", "tiny"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("--out DIR is required"), std::string::npos) << r.err;
  r = run_cmd({"--out", "/tmp/x"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("--preset is required"), std::string::npos) << r.err;
  r = run_cmd({"--preset", "tiny", "--seed", "-1", "--out", "/tmp/x"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("--seed: expected a non-negative integer, got '-1'"), std::string::npos);
  r = run_cmd({"--preset", "tiny", "--sed", "1", "--out", "/tmp/x"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("unknown flag --sed"), std::string::npos) << r.err;
  r = run_cmd({"--help"});
  EXPECT_EQ(r.rc, 0);
  EXPECT_NE(r.out.find("usage: gemmaserve make-test-model"), std::string::npos);
}

TEST(MakeTestModel, RefusesWhenTheDiskIsTooSmall) {
  TempDir tmp;
  const fs::path target = tmp.path() / "not" / "yet" / "there";
  EXPECT_NO_THROW(check_free_disk_space(target, 1 << 20));
  try {
    check_free_disk_space(target, uint64_t{1} << 60);
    FAIL() << "no error";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("not enough disk space for " + target.string() +
                            ": the checkpoint needs 1152921504606846976 bytes",
                        0),
              0u)
        << msg;
    EXPECT_NE(msg.find("are free on " + tmp.path().string() + "; nothing was written"),
              std::string::npos)
        << msg;
  }
  EXPECT_FALSE(fs::exists(tmp.path() / "not"));
}

// The README's first command, through the real binary.
TEST(MakeTestModel, CliWritesTinyModel) {
  TempDir tmp;
  const auto r = testing::run_command(testing::cli_binary().string() +
                                      " make-test-model --preset tiny --out " +
                                      (tmp.path() / "m").string() + " 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("wrote "), std::string::npos) << r.out;
  EXPECT_NO_THROW(load_model_weights(tmp.path() / "m"));
}

}  // namespace
}  // namespace gemmaserve
