// GPTQ, AWQ and compressed-tensors checkpoints (checkpoint/packed_checkpoint.h) against the
// shared fixtures written the way the quantization tools pack them (tests/data/quantized, from
// shared/fixtures/quantized: see its README): unpacking bit for bit against the exactly
// dequantized float32 twins, logits through the real model against Hugging Face's on those
// twins, and the errors bad input gets.
#include "checkpoint/packed_checkpoint.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "gemma4_golden_harness.h"
#include "io/json_file.h"
#include "io/safetensors.h"
#include "kernels/cpu/quant.h"
#include "model/tensor_parallel.h"
#include "model/weights.h"
#include "test_support.h"

namespace gemmaserve {
namespace {

namespace fs = std::filesystem;
using testing::input_error_of;
using testing::TempDir;

const std::vector<std::string> kDense = {"dense-gptq-w4-g16-asym-actorder", "dense-gptq-w8-g16-sym",
                                         "dense-awq-w4-g16", "dense-ct-w4a16-g16-asym",
                                         "dense-ct-w8a16-channel-attn-mlp"};
const std::vector<std::string> kMoe = {"moe-gptq-w8-g16-asym-actorder", "moe-awq-w4-g16",
                                       "moe-ct-w4a16-g16-sym"};

fs::path data_dir() { return testing::source_dir() / "tests/data/quantized"; }
fs::path packed_dir(const std::string& name) { return data_dir() / "packed" / name; }

const PackedCheckpoint& as_packed(const std::shared_ptr<const Checkpoint>& c) {
  const auto* p = dynamic_cast<const PackedCheckpoint*>(c.get());
  if (!p) throw std::runtime_error(c->path().string() + " did not open as a PackedCheckpoint");
  return *p;
}

// A listed tensor's values as f32 (dequantized when block-quantized).
std::vector<float> values_f32(const TensorView& v) {
  std::vector<float> out(static_cast<size_t>(v.numel()));
  if (dtype_is_quantized(v.dtype)) {
    const int64_t cols = v.shape.back(), rows = v.numel() / cols;
    const size_t row_bytes = dtype_row_bytes(v.dtype, cols);
    for (int64_t r = 0; r < rows; ++r) {
      cpu::dequantize_row(v.dtype, v.data + r * row_bytes, out.data() + r * cols, cols);
    }
  } else {
    std::vector<std::byte> copy(v.nbytes);  // convert_to_f32 wants aligned elements
    std::memcpy(copy.data(), v.data, v.nbytes);
    convert_to_f32(v.dtype, copy.data(), out.data(), out.size());
  }
  return out;
}

TEST(PackedCheckpoint, OpensEveryFixtureWithItsMethod) {
  const std::map<std::string, std::string> methods = {
      {"gptq", "gptq"}, {"awq", "awq"}, {"ct", "compressed-tensors"}};
  for (const auto& list : {kDense, kMoe}) {
    for (const std::string& name : list) {
      const auto ckpt = open_checkpoint(packed_dir(name));
      const PackedCheckpoint& p = as_packed(ckpt);
      EXPECT_EQ(p.format(), "safetensors") << name;
      EXPECT_EQ(p.quant_method(),
                methods.at(name.substr(name.find('-') + 1,
                                       name.find('-', name.find('-') + 1) - name.find('-') - 1)))
          << name;
      // The packed tensors are hidden; each module is listed once as X.weight.
      for (const auto& [tensor, v] : p.tensors()) {
        for (const char* hidden : {".qweight", ".qzeros", ".scales", ".g_idx", ".weight_packed",
                                   ".weight_scale", ".weight_zero_point", ".weight_shape"}) {
          EXPECT_EQ(tensor.find(hidden), std::string::npos) << name << ": " << tensor;
        }
      }
      for (const PackedModuleReport& m : p.summary().modules) {
        ASSERT_TRUE(p.find(m.tensor)) << m.tensor;
        EXPECT_EQ(p.find(m.tensor)->dtype, m.dtype) << m.tensor;
      }
      std::printf("PACKED %s: %s\n", name.c_str(), p.summary().text().c_str());
    }
  }
}

// Every module unpacks to exactly the twin's float32 values; every listed tensor equals the
// twin's bit for bit when converted exactly (and passed-through bf16 ones), and within Q8_0's
// rounding when re-rounded.
TEST(PackedCheckpoint, UnpacksDenseFixturesBitExactAgainstTheirTwins) {
  GS_REQUIRE_SHARED(shared);
  for (const std::string& name : kDense) {
    SCOPED_TRACE(name);
    const auto ckpt = open_checkpoint(packed_dir(name));
    const PackedCheckpoint& p = as_packed(ckpt);
    const SafetensorsFile twin(shared / "fixtures/quantized/dequant" / name / "model.safetensors");
    for (const auto& m : p.modules()) {
      const TensorView& want = twin.tensors().at(m->module() + ".weight");
      ASSERT_EQ(want.shape, (std::vector<int64_t>{m->rows(), m->cols()})) << m->module();
      std::vector<float> got(static_cast<size_t>(m->rows() * m->cols()));
      m->unpack_f32(got.data());
      EXPECT_EQ(0, std::memcmp(got.data(), want.data, want.nbytes)) << m->module();
    }
    std::map<std::string, const PackedModuleReport*> reports;
    for (const PackedModuleReport& r : p.summary().modules) reports[r.tensor] = &r;
    size_t listed = 0;
    for (const auto& [tensor, want] : twin.tensors()) {
      const TensorView* got = p.find(tensor);
      ASSERT_TRUE(got) << tensor;
      ++listed;
      EXPECT_EQ(got->shape, want.shape) << tensor;
      const std::vector<float> a = values_f32(*got), b = values_f32(want);
      auto it = reports.find(tensor);
      if (it == reports.end() || it->second->exact) {
        EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4)) << tensor;
        continue;
      }
      float amax = 0, err = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        amax = std::max(amax, std::fabs(b[i]));
        err = std::max(err, std::fabs(a[i] - b[i]));
      }
      EXPECT_LE(err, 4.0e-3f * amax) << tensor;  // Q8_0: half a step of max|x| / 127
      EXPECT_NEAR(it->second->max_rel_error, err / amax, 1e-6) << tensor;
    }
    EXPECT_EQ(listed, p.tensors().size());
  }
}

TEST(PackedCheckpoint, ConvertsEachModuleToTheDtypeItsLayoutAllows) {
  // The fixtures' groups of 16 split 32-column blocks, so only channel-wise and group-128 ones
  // are Q8_0 copies; per_layer_projection (8 inputs) in group 8 is F32.
  const auto count = [](const std::string& name, DType dtype, bool exact) {
    const auto ckpt = open_checkpoint(packed_dir(name));
    int n = 0;
    for (const PackedModuleReport& m : as_packed(ckpt).summary().modules) {
      n += m.dtype == dtype && m.exact == exact;
    }
    return n;
  };
  EXPECT_EQ(count("dense-ct-w8a16-channel-attn-mlp", DType::kQ8_0, true), 62);
  EXPECT_EQ(count("dense-gptq-w8-g16-sym", DType::kQ8_0, true), 10);  // down_proj, group 128
  EXPECT_EQ(count("dense-gptq-w8-g16-sym", DType::kF32, true), 10);   // per_layer_projection
  EXPECT_EQ(count("dense-gptq-w8-g16-sym", DType::kQ8_0, false), 62);
  EXPECT_EQ(count("dense-gptq-w4-g16-asym-actorder", DType::kQ8_0, false), 72);
  EXPECT_EQ(count("moe-awq-w4-g16", DType::kQ8_0, false), 184);
}

double max_dlogprob(const float* a, const std::vector<float>& b) {
  const auto lse = [](const float* x, size_t n) {
    double m = x[0], s = 0;
    for (size_t i = 1; i < n; ++i) m = std::max<double>(m, x[i]);
    for (size_t i = 0; i < n; ++i) s += std::exp(x[i] - m);
    return m + std::log(s);
  };
  const double la = lse(a, b.size()), lb = lse(b.data(), b.size());
  double worst = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    worst = std::max(worst, std::fabs((a[i] - la) - (b[i] - lb)));
  }
  return worst;
}

// Every reference case through the real model: the last-position logits (max |dlogit| and max
// |dlogprob| per case) and greedy tokens, compared up to the first step whose reference margin
// is below `margin`.
struct FixtureLogits {
  std::map<std::string, double> dlogprob;
  double dlogit = 0;
  int greedy_agree = 0;
};

FixtureLogits run_fixture(const std::string& name, float margin) {
  const golden::RefFile ref = golden::load_ref(data_dir() / "ref" / (name + ".json"));
  auto model = golden::load_model(packed_dir(name), 2);
  golden::PagedRunner runner(*model, 16, 4096);
  const int V = model->vocab_size();
  FixtureLogits r;
  for (const golden::RefCase& c : ref.cases) {
    const int id = runner.add_sequence();
    ForwardOutput out = runner.step1(id, c.prompt, LogitsWanted::kLast);
    EXPECT_EQ(out.logits.size(), static_cast<size_t>(V));
    if (out.logits.size() != static_cast<size_t>(V)) return r;
    r.dlogprob[c.name] = max_dlogprob(out.logits.data(), c.last_logits);
    r.dlogit = std::max<double>(r.dlogit,
                                golden::max_abs_diff(out.logits.data(), c.last_logits.data(), V));
    for (size_t s = 0; s < c.greedy.size() && c.greedy_margin[s] >= margin; ++s) {
      const int tok = golden::argmax(out.logits.data(), V);
      EXPECT_EQ(tok, c.greedy[s]) << name << "/" << c.name << " step " << s;
      if (tok != c.greedy[s]) break;
      ++r.greedy_agree;
      out = runner.step1(id, {tok}, LogitsWanted::kLast);
    }
    runner.free_sequence(id);
  }
  return r;
}

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~ScopedEnv() { unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

// With every module unpacked to F32 the model computes on the twins' exact weights: the
// fixtures README puts f32 engines within about 1e-4 of the reference's logits.
TEST(PackedCheckpoint, UnpackedToF32EveryFixtureGivesTheReferenceLogits) {
  const ScopedEnv f32("GEMMASERVE_PACKED_WEIGHTS", "f32");
  for (const auto& list : {kDense, kMoe}) {
    for (const std::string& name : list) {
      const FixtureLogits r = run_fixture(name, 0.05f);
      EXPECT_LE(r.dlogit, 2e-4) << name;
      std::printf("PACKED %s as F32: last-position max |dlogit| %.2e, %d greedy tokens agree\n",
                  name.c_str(), r.dlogit, r.greedy_agree);
    }
  }
}

// In the kernel dtypes, with activations quantized to int8 by the kernels. The fixtures README
// measured 0.17 to 1.23 for exact weights with int8 activations; the groups of 16 here are
// re-rounded to Q8_0 as well (3.9e-3 of max|w|), which the random nets amplify further in two
// cases: dense-gptq-w4 'long' (1.09 from the re-rounding alone with f32 activations, 1.61 with
// both) and moe-ct 'medium' (0.24 with f32 activations, 3.74 with both: an expert choice
// flips). Greedy tokens agree up to the first reference margin below 0.5 in every case.
TEST(PackedCheckpoint, LogitsOfEveryFixtureMatchTheReference) {
  const std::map<std::pair<std::string, std::string>, double> looser = {
      {{"dense-gptq-w4-g16-asym-actorder", "long"}, 2.0},
      {{"moe-ct-w4a16-g16-sym", "medium"}, 4.0}};
  for (const auto& list : {kDense, kMoe}) {
    for (const std::string& name : list) {
      const FixtureLogits r = run_fixture(name, 0.5f);
      double worst = 0;
      for (const auto& [c, d] : r.dlogprob) {
        auto it = looser.find({name, c});
        EXPECT_LT(d, it == looser.end() ? 1.5 : it->second) << name << "/" << c;
        worst = std::max(worst, d);
      }
      std::printf("PACKED %s: last-position max |dlogprob| %.3f, %d greedy tokens agree\n",
                  name.c_str(), worst, r.greedy_agree);
    }
  }
}

TEST(PackedCheckpoint, MoeExpertsAreFusedInOneDtype) {
  const ModelWeights w = load_model_weights(packed_dir("moe-ct-w4a16-g16-sym"));
  const TextConfig& c = w.config.text;
  for (const LayerWeights& l : w.layers) {
    EXPECT_EQ(l.experts_gate_up.dtype, DType::kQ8_0);
    EXPECT_EQ(l.experts_gate_up.rows, c.num_experts * 2 * c.moe_intermediate_size);
    EXPECT_EQ(l.experts_gate_up.cols, c.hidden_size);
    EXPECT_EQ(l.experts_down.rows, c.num_experts * c.hidden_size);
    EXPECT_EQ(l.router_proj.dtype, DType::kBF16);  // ignored: stays as stored
  }
  // Expert 1's up rows follow its gate rows: row (2 * 1 + 1) * I of the fused matrix.
  const auto ckpt = open_checkpoint(packed_dir("moe-ct-w4a16-g16-sym"));
  const TensorView* up = ckpt->find("model.language_model.layers.0.experts.1.up_proj.weight");
  ASSERT_TRUE(up);
  const size_t row = dtype_row_bytes(DType::kQ8_0, c.hidden_size);
  const auto* fused = static_cast<const std::byte*>(w.layers[0].experts_gate_up.data);
  EXPECT_EQ(0, std::memcmp(fused + 3 * c.moe_intermediate_size * row, up->data, up->nbytes));
}

// Under tensor parallelism a rank keeps its slices of the converted matrices (the buffers
// they point into stay owned by its weights).
TEST(PackedCheckpoint, TensorParallelRankHoldsSlicesOfTheConvertedMatrices) {
  const fs::path dir = packed_dir("dense-awq-w4-g16");
  const ModelWeights whole = load_model_weights(dir);
  WeightLoadOptions opt;
  opt.tensor_parallel_rank = 1;
  opt.tensor_parallel_size = 2;
  const ModelWeights part = load_model_weights(dir, nullptr, opt);
  const WeightMatrix &a = whole.layers[0].q_proj, &b = part.layers[0].q_proj;
  ASSERT_EQ(b.dtype, DType::kQ8_0);
  ASSERT_EQ(b.rows * 2, a.rows);
  const size_t row = dtype_row_bytes(a.dtype, a.cols);
  EXPECT_EQ(0, std::memcmp(b.data, static_cast<const std::byte*>(a.data) + b.rows * row,
                           static_cast<size_t>(b.rows) * row));
  EXPECT_EQ(part.layers[0].o_proj.cols * 2, whole.layers[0].o_proj.cols);
  EXPECT_LT(held_weight_bytes(part), held_weight_bytes(whole) * 6 / 10);
}

// --- bad input -------------------------------------------------------------------------------

// A copy of a fixture with its config and tensors edited.
using ConfigEdit = std::function<void(nlohmann::json&)>;
using TensorEdit = std::function<void(const std::string& name, DType& dtype,
                                      std::vector<int64_t>& shape, std::vector<std::byte>& data)>;

fs::path edited_fixture(const TempDir& tmp, const std::string& name, const ConfigEdit& config,
                        const TensorEdit& tensors = nullptr) {
  const fs::path src = packed_dir(name), dst = tmp.path() / name;
  fs::create_directories(dst);
  nlohmann::json c = read_json_file(src / "config.json");
  if (config) config(c);
  std::ofstream(dst / "config.json") << c.dump(2);
  const SafetensorsFile st(src / "model.safetensors");
  SafetensorsWriter w;
  for (const auto& [n, v] : st.tensors()) {
    DType dtype = v.dtype;
    std::vector<int64_t> shape = v.shape;
    std::vector<std::byte> data(v.data, v.data + v.nbytes);
    if (tensors) tensors(n, dtype, shape, data);
    if (!data.empty()) w.add(n, dtype, shape, data.data(), data.size());
  }
  w.write(dst / "model.safetensors");
  return dst;
}

std::string open_error(const fs::path& dir) {
  return input_error_of([&] { load_model_weights(dir); });
}

const std::string kLayer0 = "model.language_model.layers.0.";

TEST(PackedCheckpointErrors, UnsupportedBitsNameTheModule) {
  TempDir tmp;
  const fs::path dir = edited_fixture(tmp, "dense-gptq-w8-g16-sym", [](nlohmann::json& c) {
    c["quantization_config"]["dynamic"]["+:.*layers\\.1\\.self_attn\\.q_proj$"] = {{"bits", 3}};
  });
  EXPECT_EQ(open_error(dir), (dir / "model.safetensors").string() +
                                 ": 'model.language_model.layers.1.self_attn.q_proj' is quantized "
                                 "to 3 bits; only 4- and 8-bit GPTQ is supported");
}

TEST(PackedCheckpointErrors, AwqGemvIsRefused) {
  TempDir tmp;
  const fs::path dir = edited_fixture(tmp, "dense-awq-w4-g16", [](nlohmann::json& c) {
    c["quantization_config"]["version"] = "GEMV";
  });
  EXPECT_EQ(open_error(dir), (dir / "config.json").string() +
                                 ": quantization_config.version 'gemv' is not supported "
                                 "(AutoAWQ's GEMM layout, version gemm, is; re-export the model "
                                 "with version gemm)");
}

TEST(PackedCheckpointErrors, TruncatedQweightIsRefusedBeforeConversion) {
  TempDir tmp;
  const std::string q = kLayer0 + "mlp.down_proj.qweight";
  const fs::path dir = edited_fixture(
      tmp, "dense-gptq-w4-g16-asym-actorder", nullptr,
      [&](const std::string& n, DType&, std::vector<int64_t>& shape, std::vector<std::byte>& d) {
        if (n != q) return;
        shape[0] -= 1;  // 15 rows of 8 nibbles: 120 inputs, but g_idx lists 128
        d.resize(d.size() - static_cast<size_t>(shape[1]) * 4);
      });
  EXPECT_EQ(open_error(dir), (dir / "model.safetensors").string() + ": tensor '" + kLayer0 +
                                 "mlp.down_proj.g_idx' has shape [128], expected [120] (120 input "
                                 "columns (15 qweight rows of 8 4-bit values) in groups of 16, 64 "
                                 "outputs)");
}

TEST(PackedCheckpointErrors, ShapeMismatchNamesTheTensor) {
  TempDir tmp;
  fs::path dir = edited_fixture(
      tmp, "dense-awq-w4-g16", nullptr,
      [&](const std::string& n, DType&, std::vector<int64_t>& shape, std::vector<std::byte>& d) {
        if (n != kLayer0 + "self_attn.q_proj.scales") return;
        shape = {2, 64};
        d.resize(2 * 64 * 2);
      });
  EXPECT_EQ(open_error(dir), (dir / "model.safetensors").string() + ": tensor '" + kLayer0 +
                                 "self_attn.q_proj.scales' has shape [2, 64], expected [4, 64] (64 "
                                 "input columns in groups of 16, 64 outputs (qweight holds 8 per "
                                 "word))");
  TempDir tmp2;
  dir = edited_fixture(
      tmp2, "dense-ct-w4a16-g16-asym", nullptr,
      [&](const std::string& n, DType&, std::vector<int64_t>&, std::vector<std::byte>& d) {
        if (n != kLayer0 + "self_attn.q_proj.weight_shape") return;
        const int64_t wrong = 100;
        std::memcpy(d.data() + 8, &wrong, 8);
      });
  EXPECT_EQ(open_error(dir), (dir / "model.safetensors").string() + ": tensor '" + kLayer0 +
                                 "self_attn.q_proj.weight_shape' holds [64, 100], which disagrees "
                                 "with '" +
                                 kLayer0 +
                                 "self_attn.q_proj.weight_packed' [64, 8] (8 4-bit values per "
                                 "int32)");
}

TEST(PackedCheckpointErrors, UnknownQuantMethod) {
  TempDir tmp;
  const fs::path dir = edited_fixture(tmp, "dense-awq-w4-g16", [](nlohmann::json& c) {
    c["quantization_config"]["quant_method"] = "bitsandbytes";
  });
  EXPECT_EQ(open_error(dir),
            (dir / "config.json").string() +
                ": quantization_config quant_method 'bitsandbytes' is not "
                "supported (supported: gemmaserve, gptq, awq, compressed-tensors)");
}

TEST(PackedCheckpointErrors, ExclusionsAndOrphansAreRefused) {
  TempDir a, b, c, d;
  fs::path dir = edited_fixture(a, "dense-ct-w4a16-g16-asym", [](nlohmann::json& cfg) {
    cfg["quantization_config"]["ignore"].push_back("re:.*layers\\.0\\.mlp\\.up_proj$");
  });
  EXPECT_EQ(open_error(dir), (dir / "model.safetensors").string() + ": '" + kLayer0 +
                                 "mlp.up_proj' is stored quantized but quantization_config.ignore "
                                 "lists 're:.*layers\\.0\\.mlp\\.up_proj$'");
  dir = edited_fixture(b, "dense-gptq-w4-g16-asym-actorder", [](nlohmann::json& cfg) {
    cfg["quantization_config"]["dynamic"]["-:.*\\.o_proj$"] = nlohmann::json::object();
  });
  EXPECT_EQ(open_error(dir), (dir / "model.safetensors").string() + ": '" + kLayer0 +
                                 "self_attn.o_proj' is stored packed but "
                                 "quantization_config.dynamic rule '-:.*\\.o_proj$' excludes it "
                                 "from quantization");
  dir = edited_fixture(
      c, "dense-awq-w4-g16", nullptr,
      [&](const std::string& n, DType&, std::vector<int64_t>&, std::vector<std::byte>& data) {
        if (n == kLayer0 + "mlp.up_proj.qweight") data.clear();  // dropped
      });
  EXPECT_EQ(open_error(dir), (dir / "model.safetensors").string() + ": tensor '" + kLayer0 +
                                 "mlp.up_proj.qzeros' belongs to no module the awq reader "
                                 "converts (its other packed tensors are missing)");
  dir = edited_fixture(d, "dense-ct-w8a16-channel-attn-mlp", [](nlohmann::json& cfg) {
    cfg["quantization_config"]["config_groups"]["group_0"]["format"] = "float-quantized";
  });
  EXPECT_EQ(open_error(dir), (dir / "config.json").string() +
                                 ": quantization_config.config_groups.group_0.format "
                                 "'float-quantized' (FP8 weights) is not supported yet; integer "
                                 "weight schemes (pack-quantized, int-quantized) are");
}

TEST(PackedCheckpointErrors, NonFiniteScaleAndOutOfRangeGroupIndex) {
  TempDir a, b;
  fs::path dir = edited_fixture(
      a, "dense-gptq-w8-g16-sym", nullptr,
      [&](const std::string& n, DType&, std::vector<int64_t>&, std::vector<std::byte>& d) {
        if (n != kLayer0 + "self_attn.k_proj.scales") return;
        const uint16_t inf = 0x7c00;
        std::memcpy(d.data() + 2 * 3, &inf, 2);  // group 0, output 3
      });
  EXPECT_EQ(open_error(dir), (dir / "model.safetensors").string() + ": '" + kLayer0 +
                                 "self_attn.k_proj' has a scale that is not finite (inf) at "
                                 "output row 3, group 0");
  dir = edited_fixture(
      b, "dense-gptq-w4-g16-asym-actorder", nullptr,
      [&](const std::string& n, DType&, std::vector<int64_t>&, std::vector<std::byte>& d) {
        if (n != kLayer0 + "self_attn.q_proj.g_idx") return;
        const int32_t bad = 4;
        std::memcpy(d.data() + 4 * 5, &bad, 4);
      });
  EXPECT_EQ(open_error(dir), (dir / "model.safetensors").string() + ": tensor '" + kLayer0 +
                                 "self_attn.q_proj.g_idx' holds 4 at column 5, outside the groups "
                                 "[0, 4)");
}

TEST(PackedCheckpointErrors, UnknownPackedWeightsSetting) {
  const ScopedEnv bad("GEMMASERVE_PACKED_WEIGHTS", "bf16");
  EXPECT_EQ(open_error(packed_dir("dense-awq-w4-g16")),
            "GEMMASERVE_PACKED_WEIGHTS: unknown value 'bf16' (expected auto or f32)");
}

// --- --quantization --------------------------------------------------------------------------

TEST(PackedCheckpointFlag, VllmMethodNamesNameTheCheckpointsOwnMethod) {
  EXPECT_EQ(canonical_quantization_flag("GPTQ_Marlin", "--quantization"), "gptq");
  EXPECT_EQ(canonical_quantization_flag("awq_marlin", "--quantization"), "awq");
  EXPECT_EQ(canonical_quantization_flag("compressed-tensors", "--quantization"),
            "compressed-tensors");
  EXPECT_EQ(canonical_quantization_flag("gguf", "--quantization"), "gguf");
  EXPECT_EQ(canonical_quantization_flag("Q4_0", "--quantization"), "q4_0");
  EXPECT_EQ(input_error_of([] { canonical_quantization_flag("int8", "--quantization"); }),
            "--quantization: unknown quantization type 'int8' (expected q8_0, q4_0 or q4_k to "
            "quantize at load, or the checkpoint's own method: gptq, gptq_marlin, awq, "
            "awq_marlin, compressed-tensors, gguf)");

  const fs::path gptq = packed_dir("dense-gptq-w8-g16-sym");
  const auto load = [](const fs::path& dir, const std::string& flag) {
    WeightLoadOptions o;
    apply_quantization_flag(flag, "--quantization", &o);
    return load_model_weights(dir, nullptr, o);
  };
  EXPECT_EQ(load(gptq, "gptq_marlin").layers.size(), 10u);  // its own method: a no-op
  EXPECT_EQ(input_error_of([&] { load(gptq, "awq"); }),
            gptq.string() +
                ": --quantization awq names the checkpoint's quantization method, "
                "but the checkpoint is quantized with gptq");
  EXPECT_EQ(input_error_of([&] { load(gptq, "q8_0"); }),
            gptq.string() +
                ": checkpoint is already quantized with gptq; --quantization q8_0 "
                "would quantize it twice (drop the flag or pass gptq)");
  const fs::path dense = testing::source_dir() / "tests/data/golden/models/dense";
  EXPECT_EQ(input_error_of([&] { load(dense, "compressed-tensors"); }),
            dense.string() +
                ": --quantization compressed-tensors names the checkpoint's quantization method, "
                "but the checkpoint is not quantized (drop the flag, or pass q8_0, q4_0 or q4_k to "
                "quantize it at load)");
}

TEST(PackedCheckpointCli, GenerateServesAPackedCheckpointAndQuantizeRefusesIt) {
  const std::string cli = testing::cli_binary().string();
  const std::string dir = packed_dir("moe-ct-w4a16-g16-sym").string();
  testing::CommandResult r = testing::run_command(
      cli + " generate " + dir + " --prompt-ids 2,10,20 --max-tokens 4 --quantization " +
      "compressed-tensors 2>/dev/null");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), ','), 3) << r.out;
  TempDir tmp;
  r = testing::run_command(cli + " quantize " + dir + " " + (tmp.path() / "q").string() +
                           " --type q8_0 2>&1 >/dev/null");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find(dir + ": checkpoint is already quantized"), std::string::npos) << r.out;
  // Nor into a GGUF.
  r = testing::run_command(cli + " quantize " + dir + " " + (tmp.path() / "q.gguf").string() +
                           " --type q8_0 2>&1 >/dev/null");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find(dir + ": checkpoint is already quantized; quantize the original"),
            std::string::npos)
      << r.out;
}

}  // namespace
}  // namespace gemmaserve
