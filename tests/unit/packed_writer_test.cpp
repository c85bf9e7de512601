// GPTQ, AWQ and compressed-tensors checkpoints written by an independent writer kept here (plain
// round-to-nearest and bit packing from the formats' descriptions, never the loader's code),
// from a random-weight model with 256-wide layers: which dtype each module becomes (Q4_0 or Q8_0
// copies of the codes, Q8_0 re-rounded), the copies equal to the writer's dequantized weights
// bit for bit, and the model's logits near those of the same weights as f32.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <numeric>
#include <random>

#include "checkpoint/packed_checkpoint.h"
#include "core/thread_pool.h"
#include "io/json_file.h"
#include "io/safetensors.h"
#include "kernels/cpu/quant.h"
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

// --- the writer ------------------------------------------------------------------------------

struct Scheme {
  std::string method;  // "gptq", "gptq_v2", "awq", "ct" (pack-quantized), "ct-int" (int8)
  int bits = 4;
  int group = 128;  // 0: one group per row (channel)
  bool sym = true;
  bool act_order = false;
  DType scale_dtype = DType::kF16;
};

// One module quantized round-to-nearest: unsigned codes q and zero points z, w = s * (q - z).
struct Quantized {
  int64_t N = 0, K = 0, G = 0;
  std::vector<int32_t> g_idx;  // [K]
  std::vector<uint32_t> q;     // [N, K]
  std::vector<float> s;        // [N, G], already in the stored dtype
  std::vector<uint32_t> z;     // [N, G]
  std::vector<float> deq;      // [N, K]
};

float stored(DType d, float x) {
  if (d == DType::kF16) return f16_to_f32(f32_to_f16(x));
  if (d == DType::kBF16) return bf16_to_f32(f32_to_bf16(x));
  return x;
}

Quantized quantize(const std::vector<float>& w, int64_t N, int64_t K, const Scheme& sc,
                   uint32_t seed) {
  Quantized m;
  m.N = N;
  m.K = K;
  const int64_t group = sc.group <= 0 ? K : sc.group;  // 0: channel, -1: GPTQ's one group
  m.G = (K + group - 1) / group;
  std::vector<int64_t> order(static_cast<size_t>(K));
  std::iota(order.begin(), order.end(), 0);
  if (sc.act_order) std::shuffle(order.begin(), order.end(), std::mt19937(seed));
  m.g_idx.resize(static_cast<size_t>(K));
  for (int64_t i = 0; i < K; ++i)
    m.g_idx[static_cast<size_t>(order[i])] = static_cast<int32_t>(i / group);
  const uint32_t maxq = (1u << sc.bits) - 1, mid = 1u << (sc.bits - 1);
  m.q.resize(static_cast<size_t>(N * K));
  m.deq.resize(static_cast<size_t>(N * K));
  m.s.resize(static_cast<size_t>(N * m.G));
  m.z.resize(static_cast<size_t>(N * m.G));
  for (int64_t n = 0; n < N; ++n) {
    const float* row = &w[static_cast<size_t>(n * K)];
    for (int64_t g = 0; g < m.G; ++g) {
      float lo = 0, hi = 0;
      for (int64_t k = 0; k < K; ++k) {
        if (m.g_idx[static_cast<size_t>(k)] != g) continue;
        lo = std::min(lo, row[k]);
        hi = std::max(hi, row[k]);
      }
      float s;
      uint32_t z;
      if (sc.sym) {
        s = stored(sc.scale_dtype, std::max(-lo, hi) / static_cast<float>(mid - 1));
        z = mid;
      } else {
        s = stored(sc.scale_dtype, (hi - lo) / static_cast<float>(maxq));
        z = static_cast<uint32_t>(std::clamp(std::nearbyint(-lo / s), 0.0f, float(maxq)));
      }
      if (s == 0) s = 1;
      m.s[static_cast<size_t>(n * m.G + g)] = s;
      m.z[static_cast<size_t>(n * m.G + g)] = z;
    }
    for (int64_t k = 0; k < K; ++k) {
      const size_t i = static_cast<size_t>(n * K + k);
      const size_t gi = static_cast<size_t>(n * m.G + m.g_idx[static_cast<size_t>(k)]);
      const float q =
          std::clamp(std::nearbyint(row[k] / m.s[gi]) + float(m.z[gi]), 0.0f, float(maxq));
      m.q[i] = static_cast<uint32_t>(q);
      m.deq[i] = m.s[gi] *
                 static_cast<float>(static_cast<int32_t>(m.q[i]) - static_cast<int32_t>(m.z[gi]));
    }
  }
  return m;
}

struct Out {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<std::byte> bytes;
};

template <typename T>
Out tensor(const std::string& name, DType dtype, std::vector<int64_t> shape,
           const std::vector<T>& v) {
  Out o{name, dtype, std::move(shape), std::vector<std::byte>(v.size() * sizeof(T))};
  std::memcpy(o.bytes.data(), v.data(), o.bytes.size());
  return o;
}

Out scales(const std::string& name, DType dtype, std::vector<int64_t> shape,
           const std::vector<float>& v) {
  if (dtype == DType::kF32) return tensor(name, dtype, std::move(shape), v);
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    h[i] = dtype == DType::kF16 ? f32_to_f16(v[i]) : f32_to_bf16(v[i]);
  }
  return tensor(name, dtype, std::move(shape), h);
}

// GPTQ: qweight [K * b / 32, N], element j of a word at bits b * j along K; qzeros [G, N * b /
// 32] along N, storing zero - 1 in v1; scales [G, N]; g_idx [K].
std::vector<Out> pack_gptq(const std::string& m, const Quantized& x, const Scheme& sc) {
  const int b = sc.bits, per = 32 / b;
  const uint32_t mask = (1u << b) - 1, minus = sc.method == "gptq" ? 1 : 0;
  std::vector<int32_t> qweight(static_cast<size_t>(x.K / per * x.N)),
      qzeros(static_cast<size_t>(x.G * x.N / per));
  for (int64_t r = 0; r < x.K / per; ++r) {
    for (int64_t n = 0; n < x.N; ++n) {
      uint32_t word = 0;
      for (int j = 0; j < per; ++j)
        word |= x.q[static_cast<size_t>(n * x.K + r * per + j)] << (b * j);
      qweight[static_cast<size_t>(r * x.N + n)] = static_cast<int32_t>(word);
    }
  }
  std::vector<float> s(static_cast<size_t>(x.G * x.N));
  for (int64_t g = 0; g < x.G; ++g) {
    for (int64_t c = 0; c < x.N / per; ++c) {
      uint32_t word = 0;
      for (int j = 0; j < per; ++j) {
        word |= ((x.z[static_cast<size_t>((c * per + j) * x.G + g)] - minus) & mask) << (b * j);
      }
      qzeros[static_cast<size_t>(g * x.N / per + c)] = static_cast<int32_t>(word);
    }
    for (int64_t n = 0; n < x.N; ++n)
      s[static_cast<size_t>(g * x.N + n)] = x.s[static_cast<size_t>(n * x.G + g)];
  }
  return {tensor(m + ".qweight", DType::kI32, {x.K / per, x.N}, qweight),
          tensor(m + ".qzeros", DType::kI32, {x.G, x.N / per}, qzeros),
          scales(m + ".scales", DType::kF16, {x.G, x.N}, s),
          tensor(m + ".g_idx", DType::kI32, {x.K}, x.g_idx)};
}

// AutoAWQ GEMM: qweight [K, N / 8] with nibble j of word c holding column 8c + kOrder[j];
// qzeros [G, N / 8] the same way; scales [G, N].
std::vector<Out> pack_awq(const std::string& m, const Quantized& x) {
  static constexpr int kOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};
  std::vector<int32_t> qweight(static_cast<size_t>(x.K * x.N / 8)),
      qzeros(static_cast<size_t>(x.G * x.N / 8));
  std::vector<float> s(static_cast<size_t>(x.G * x.N));
  for (int64_t c = 0; c < x.N / 8; ++c) {
    for (int64_t k = 0; k < x.K; ++k) {
      uint32_t word = 0;
      for (int j = 0; j < 8; ++j)
        word |= x.q[static_cast<size_t>((8 * c + kOrder[j]) * x.K + k)] << (4 * j);
      qweight[static_cast<size_t>(k * x.N / 8 + c)] = static_cast<int32_t>(word);
    }
    for (int64_t g = 0; g < x.G; ++g) {
      uint32_t word = 0;
      for (int j = 0; j < 8; ++j)
        word |= x.z[static_cast<size_t>((8 * c + kOrder[j]) * x.G + g)] << (4 * j);
      qzeros[static_cast<size_t>(g * x.N / 8 + c)] = static_cast<int32_t>(word);
    }
  }
  for (int64_t g = 0; g < x.G; ++g) {
    for (int64_t n = 0; n < x.N; ++n)
      s[static_cast<size_t>(g * x.N + n)] = x.s[static_cast<size_t>(n * x.G + g)];
  }
  return {tensor(m + ".qweight", DType::kI32, {x.K, x.N / 8}, qweight),
          tensor(m + ".qzeros", DType::kI32, {x.G, x.N / 8}, qzeros),
          scales(m + ".scales", DType::kF16, {x.G, x.N}, s)};
}

// compressed-tensors pack-quantized, symmetric: weight_packed [N, K * b / 32] holding q +
// 2^(b-1) (our unsigned codes), element j of a word at bits b * j; weight_scale [N, G];
// weight_shape [N, K].
std::vector<Out> pack_ct(const std::string& m, const Quantized& x, const Scheme& sc) {
  const int b = sc.bits, per = 32 / b;
  std::vector<int32_t> packed(static_cast<size_t>(x.N * x.K / per));
  for (int64_t n = 0; n < x.N; ++n) {
    for (int64_t c = 0; c < x.K / per; ++c) {
      uint32_t word = 0;
      for (int j = 0; j < per; ++j)
        word |= x.q[static_cast<size_t>(n * x.K + c * per + j)] << (b * j);
      packed[static_cast<size_t>(n * x.K / per + c)] = static_cast<int32_t>(word);
    }
  }
  return {tensor(m + ".weight_packed", DType::kI32, {x.N, x.K / per}, packed),
          scales(m + ".weight_scale", sc.scale_dtype, {x.N, x.G}, x.s),
          tensor(m + ".weight_shape", DType::kI64, {2}, std::vector<int64_t>{x.N, x.K})};
}

// compressed-tensors int-quantized: `weight` int8 [N, K] holding the signed q (our code -
// 128), weight_scale [N, G], asymmetric: weight_zero_point int8 [N, G] holding the signed zp.
std::vector<Out> pack_ct_int8(const std::string& m, const Quantized& x, const Scheme& sc) {
  std::vector<int8_t> q(x.q.size()), zp(x.z.size());
  for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<int8_t>(static_cast<int>(x.q[i]) - 128);
  for (size_t i = 0; i < zp.size(); ++i) {
    zp[i] = static_cast<int8_t>(static_cast<int>(x.z[i]) - 128);
  }
  std::vector<Out> out = {tensor(m + ".weight", DType::kI8, {x.N, x.K}, q),
                          scales(m + ".weight_scale", sc.scale_dtype, {x.N, x.G}, x.s)};
  if (!sc.sym) out.push_back(tensor(m + ".weight_zero_point", DType::kI8, {x.N, x.G}, zp));
  return out;
}

json quantization_config(const Scheme& sc) {
  if (sc.method == "awq") {
    return {{"quant_method", "awq"},
            {"bits", sc.bits},
            {"group_size", sc.group},
            {"version", "gemm"},
            {"zero_point", true}};
  }
  if (sc.method == "ct" || sc.method == "ct-int") {
    json weights = {{"num_bits", sc.bits},
                    {"type", "int"},
                    {"symmetric", sc.sym},
                    {"strategy", sc.group ? "group" : "channel"},
                    {"dynamic", false}};
    if (sc.group) weights["group_size"] = sc.group;
    return {{"quant_method", "compressed-tensors"},
            {"format", sc.method == "ct" ? "pack-quantized" : "int-quantized"},
            {"config_groups",
             {{"group_0",
               {{"targets", {"Linear"}}, {"weights", weights}, {"input_activations", nullptr}}}}},
            {"ignore", {"lm_head"}}};
  }
  return {{"quant_method", "gptq"}, {"bits", sc.bits},          {"group_size", sc.group},
          {"sym", sc.sym},          {"desc_act", sc.act_order}, {"checkpoint_format", sc.method}};
}

// The modules a quantization tool would pack: decoder linears with whole 32-column blocks.
bool packs(const std::string& name, int64_t K) {
  if (name.find(".layers.") == std::string::npos || K % 32 != 0) return false;
  for (const char* m : {"_proj.weight", "per_layer_input_gate.weight"}) {
    if (name.size() > std::strlen(m) &&
        name.compare(name.size() - std::strlen(m), std::strlen(m), m) == 0)
      return true;
  }
  return false;
}

// Writes `dir` (packed) and `twin` (the writer's dequantized weights as f32) from `base`.
std::map<std::string, Quantized> write_packed(const fs::path& base, const fs::path& dir,
                                              const fs::path& twin, const Scheme& sc) {
  const SafetensorsFile st(base / "model.safetensors");
  SafetensorsWriter packed, exact;
  std::map<std::string, Quantized> modules;
  uint32_t seed = 1;
  for (const auto& [name, v] : st.tensors()) {
    if (v.shape.size() != 2 || !packs(name, v.shape[1])) {
      packed.add(name, v.dtype, v.shape, v.data, v.nbytes);
      exact.add(name, v.dtype, v.shape, v.data, v.nbytes);
      continue;
    }
    if (v.dtype != DType::kF32) throw std::runtime_error(name + ": the base model is f32");
    std::vector<float> w(static_cast<size_t>(v.numel()));
    std::memcpy(w.data(), v.data, v.nbytes);
    const std::string module = name.substr(0, name.size() - std::string(".weight").size());
    Quantized q = quantize(w, v.shape[0], v.shape[1], sc, seed++);
    const std::vector<Out> outs = sc.method == "awq"      ? pack_awq(module, q)
                                  : sc.method == "ct"     ? pack_ct(module, q, sc)
                                  : sc.method == "ct-int" ? pack_ct_int8(module, q, sc)
                                                          : pack_gptq(module, q, sc);
    for (const Out& o : outs) packed.add(o.name, o.dtype, o.shape, o.bytes.data(), o.bytes.size());
    exact.add(name, DType::kF32, v.shape, q.deq.data(), q.deq.size() * 4);
    modules.emplace(module, std::move(q));
  }
  json config = read_json_file(base / "config.json");
  fs::create_directories(dir);
  fs::create_directories(twin);
  std::ofstream(twin / "config.json") << config.dump(2);
  exact.write(twin / "model.safetensors");
  config["quantization_config"] = quantization_config(sc);
  std::ofstream(dir / "config.json") << config.dump(2);
  packed.write(dir / "model.safetensors");
  return modules;
}

// --- the checks ------------------------------------------------------------------------------

// A 256-wide dense model (the golden dense config, widened), in f32.
fs::path base_model(const fs::path& dir) {
  json config =
      read_json_file(testing::source_dir() / "tests/data/golden/models/dense/config.json");
  config["text_config"]["hidden_size"] = 256;
  config["text_config"]["intermediate_size"] = 512;
  write_test_model_of_config(dir, config, DType::kF32, 7);
  return dir;
}

std::vector<float> listed_f32(const TensorView& v) {
  std::vector<float> out(static_cast<size_t>(v.numel()));
  const int64_t cols = v.shape.back(), rows = v.numel() / cols;
  if (dtype_is_quantized(v.dtype)) {
    for (int64_t r = 0; r < rows; ++r) {
      cpu::dequantize_row(v.dtype, v.data + static_cast<size_t>(r) * dtype_row_bytes(v.dtype, cols),
                          out.data() + r * cols, cols);
    }
  } else {
    std::memcpy(out.data(), v.data, out.size() * 4);
  }
  return out;
}

double last_logits_dlogprob(const fs::path& a, const fs::path& b) {
  auto pool = std::make_shared<ThreadPool>(2);
  std::vector<std::vector<float>> logits;
  for (const fs::path& dir : {a, b}) {
    Gemma4Model model(load_model_weights(dir), pool);
    std::vector<int32_t> prompt = {2};
    for (int i = 1; i < 24; ++i) prompt.push_back((i * 37 + 11) % 512);
    KvCache cache(model.text_config(), {4, 4}, 16);
    const std::vector<int32_t> table = {0, 1, 2, 3};
    SequenceInput in;
    in.tokens = prompt;
    for (int t = 0; t < kNumAttentionTypes; ++t) in.block_tables[t] = table;
    in.logits = LogitsWanted::kLast;
    std::vector<SequenceInput> batch = {in};
    ForwardOutput out;
    model.forward(batch, cache, &out);
    logits.push_back(out.logits);
  }
  const auto lse = [](const std::vector<float>& x) {
    double m = *std::max_element(x.begin(), x.end()), s = 0;
    for (float v : x) s += std::exp(v - m);
    return m + std::log(s);
  };
  const double la = lse(logits[0]), lb = lse(logits[1]);
  double worst = 0;
  for (size_t i = 0; i < logits[0].size(); ++i) {
    worst = std::max(worst, std::fabs((logits[0][i] - la) - (logits[1][i] - lb)));
  }
  return worst;
}

struct Expect {
  DType dtype;
  bool exact;
};

void check_variant(const fs::path& base, const Scheme& sc,
                   const std::function<Expect(const Quantized&)>& expected) {
  TempDir tmp;
  const std::map<std::string, Quantized> modules =
      write_packed(base, tmp.path() / "packed", tmp.path() / "twin", sc);
  const auto ckpt = open_checkpoint(tmp.path() / "packed");
  const auto* p = dynamic_cast<const PackedCheckpoint*>(ckpt.get());
  ASSERT_TRUE(p);
  ASSERT_EQ(p->modules().size(), modules.size());
  for (const auto& m : p->modules()) {
    const Quantized& q = modules.at(m->module());
    std::vector<float> unpacked(q.deq.size());
    m->unpack_f32(unpacked.data());
    EXPECT_EQ(0, std::memcmp(unpacked.data(), q.deq.data(), q.deq.size() * 4)) << m->module();
  }
  for (const PackedModuleReport& r : p->summary().modules) {
    const Quantized& q = modules.at(r.tensor.substr(0, r.tensor.size() - 7));
    const Expect e = expected(q);
    EXPECT_EQ(r.dtype, e.dtype) << r.tensor << " K=" << q.K;
    EXPECT_EQ(r.exact, e.exact) << r.tensor << " K=" << q.K << ": " << r.reason;
    std::vector<float> got = listed_f32(*p->find(r.tensor));
    // An act-order module sorted by group lists its columns in that order: undo it to compare.
    const TensorView* perm = p->find(r.tensor.substr(0, r.tensor.size() - 6) + "input_perm");
    EXPECT_EQ(perm != nullptr, r.permuted) << r.tensor;
    if (perm) {
      std::vector<int32_t> order(static_cast<size_t>(q.K));
      std::memcpy(order.data(), perm->data, order.size() * sizeof(int32_t));
      const std::vector<float> listed = got;
      for (size_t n = 0; n < got.size() / static_cast<size_t>(q.K); ++n) {
        for (int64_t j = 0; j < q.K; ++j) {
          got[n * static_cast<size_t>(q.K) + static_cast<size_t>(order[static_cast<size_t>(j)])] =
              listed[n * static_cast<size_t>(q.K) + static_cast<size_t>(j)];
        }
      }
    }
    if (r.exact) {
      EXPECT_EQ(0, std::memcmp(got.data(), q.deq.data(), got.size() * 4)) << r.tensor;
    } else {
      float amax = 0, err = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        amax = std::max(amax, std::fabs(q.deq[i]));
        err = std::max(err, std::fabs(got[i] - q.deq[i]));
      }
      EXPECT_LE(err, 4.0e-3f * amax) << r.tensor;
      EXPECT_NEAR(r.max_rel_error, err / amax, 1e-6) << r.tensor;
    }
  }
  const double d = last_logits_dlogprob(tmp.path() / "packed", tmp.path() / "twin");
  std::printf("WRITER %s %d-bit group %d%s%s: %s; last-position max |dlogprob| vs f32 %.3f\n",
              sc.method.c_str(), sc.bits, sc.group, sc.sym ? " sym" : " asym",
              sc.act_order ? " act-order" : "", p->summary().text().c_str(), d);
  EXPECT_LT(d, 1.0);
}

class PackedWriter : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    base_model(dir_->path());
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static fs::path base() { return dir_->path(); }

 private:
  static inline TempDir* dir_ = nullptr;
};

const auto kQ4_0Exact = [](const Quantized&) { return Expect{DType::kQ4_0, true}; };
const auto kQ8_0Exact = [](const Quantized&) { return Expect{DType::kQ8_0, true}; };

TEST_F(PackedWriter, GptqSymmetric4BitGroup32IsQ4_0) {
  check_variant(base(), {"gptq", 4, 32, true, false, DType::kF16}, kQ4_0Exact);
}

TEST_F(PackedWriter, GptqV2Symmetric4BitGroup128IsQ4_0) {
  check_variant(base(), {"gptq_v2", 4, 128, true, false, DType::kF16}, kQ4_0Exact);
}

// Act-order scatters the two groups of 128 over 256-wide rows; sorted by group once at load
// they fill whole blocks again, so the codes are copied (asymmetric: q - z spans [-15, 15], Q8_0)
// with the column order listed beside them, and the logits still match the f32 twin.
TEST_F(PackedWriter, GptqAsymmetric4BitGroup128ActOrder) {
  check_variant(base(), {"gptq", 4, 128, false, true, DType::kF16}, kQ8_0Exact);
}

// Symmetric act-order 4-bit (AutoGPTQ's desc_act with sym): Q4_0 copies of sorted columns.
TEST_F(PackedWriter, GptqSymmetric4BitGroup32ActOrderIsQ4_0) {
  check_variant(base(), {"gptq", 4, 32, true, true, DType::kF16}, kQ4_0Exact);
}

// A row-parallel slice would take input columns in sorted order that the rank's own inputs do
// not hold: tensor parallelism refuses act-order modules by name instead of computing garbage.
TEST_F(PackedWriter, ActOrderModulesRefuseTensorParallelism) {
  TempDir tmp;
  write_packed(base(), tmp.path() / "packed", tmp.path() / "twin",
               {"gptq", 4, 32, true, true, DType::kF16});
  WeightLoadOptions o;
  o.tensor_parallel_rank = 1;
  o.tensor_parallel_size = 2;
  const std::string error =
      testing::input_error_of([&] { load_model_weights(tmp.path() / "packed", nullptr, o); });
  EXPECT_TRUE(error.ends_with(
      ": an act-order module (columns sorted by group) cannot be split along its input for "
      "tensor parallelism; run it without -tp"))
      << error;
  EXPECT_TRUE(error.starts_with("model.language_model.layers.")) << error;
}

TEST_F(PackedWriter, AwqGroup128IsQ8_0) {
  check_variant(base(), {"awq", 4, 128, false, false, DType::kF16}, kQ8_0Exact);
}

TEST_F(PackedWriter, CompressedTensorsW4A16Group32IsQ4_0) {
  check_variant(base(), {"ct", 4, 32, true, false, DType::kBF16}, kQ4_0Exact);
}

TEST_F(PackedWriter, CompressedTensorsW8A16ChannelIsQ8_0) {
  check_variant(base(), {"ct", 8, 0, true, false, DType::kBF16}, kQ8_0Exact);
}

TEST_F(PackedWriter, Gptq8BitOneGroupIsQ8_0) {
  check_variant(base(), {"gptq", 8, -1, true, false, DType::kF16}, kQ8_0Exact);
}

TEST_F(PackedWriter, CompressedTensorsInt8ChannelIsQ8_0) {
  check_variant(base(), {"ct-int", 8, 0, true, false, DType::kBF16}, kQ8_0Exact);
}

// Asymmetric 8-bit: q - z spans up to [-255, 255], so the rows are re-rounded.
TEST_F(PackedWriter, CompressedTensorsInt8AsymmetricGroup32IsReRounded) {
  check_variant(base(), {"ct-int", 8, 32, false, false, DType::kBF16}, [](const Quantized&) {
    return Expect{DType::kQ8_0, false};
  });
}

// f32 scales are not f16 values: the codes are still copied as Q4_0, each scale rounded to f16
// (its group's weights move by at most 2^-11 of themselves), not exact.
TEST_F(PackedWriter, CompressedTensorsF32ScalesAreRoundedToF16) {
  check_variant(base(), {"ct", 4, 32, true, false, DType::kF32}, [](const Quantized&) {
    return Expect{DType::kQ4_0, false};
  });
}

// Conversion speed of one 4096 x 4096 module per scheme (run by hand:
// --gtest_also_run_disabled_tests --gtest_filter='*Throughput*').
TEST(PackedWriterSpeed, DISABLED_ConversionThroughput) {
  const int64_t N = 4096, K = 4096;
  std::vector<float> w(static_cast<size_t>(N * K));
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  for (float& x : w) x = normal(rng);
  for (const Scheme& sc : {Scheme{"gptq", 4, 128, true, false, DType::kF16},
                           Scheme{"awq", 4, 128, false, false, DType::kF16},
                           Scheme{"ct", 4, 32, true, false, DType::kBF16},
                           Scheme{"ct", 8, 0, true, false, DType::kBF16},
                           Scheme{"gptq", 4, 128, false, true, DType::kF16}}) {
    TempDir tmp;
    const Quantized q = quantize(w, N, K, sc, 1);
    const std::vector<Out> outs = sc.method == "awq"  ? pack_awq("m", q)
                                  : sc.method == "ct" ? pack_ct("m", q, sc)
                                                      : pack_gptq("m", q, sc);
    SafetensorsWriter st;
    for (const Out& o : outs) st.add(o.name, o.dtype, o.shape, o.bytes.data(), o.bytes.size());
    st.write(tmp.path() / "model.safetensors");
    std::ofstream(tmp.path() / "config.json")
        << json{{"quantization_config", quantization_config(sc)}}.dump();
    const auto ckpt = open_checkpoint(tmp.path());
    const PackedSummary& s = dynamic_cast<const PackedCheckpoint&>(*ckpt).summary();
    std::printf("SPEED %s %d-bit group %d%s: %.0f M weights/s (%s)\n", sc.method.c_str(), sc.bits,
                sc.group, sc.act_order ? " act-order" : "", N * K / s.seconds / 1e6,
                s.text().c_str());
  }
}

}  // namespace
}  // namespace gemmaserve
