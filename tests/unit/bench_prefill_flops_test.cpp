// The FLOP count bench latency divides prefill time into, spelled out by hand for the tiny
// preset (KV sharing, double-wide MLP, K=V full layers, sliding window, MoE, per-layer inputs),
// and the measured arithmetic peak that count is compared with.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "bench/bench_kernels.h"
#include "core/thread_pool.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/peak_rate.h"
#include "kernels/cpu/quant_matmul.h"
#include "model/weights.h"
#include "server_test_support.h"

namespace gemmaserve {
namespace {

TEST(PrefillFlops, TinyPresetByHand) {
  testing::TempDir tmp;
  const auto made = testing::run_command(testing::cli_binary().string() +
                                         " make-test-model --preset tiny --out " +
                                         (tmp.path() / "m").string() + " 2>&1");
  ASSERT_EQ(made.exit_code, 0) << made.out;
  const ModelWeights w = load_model_weights((tmp.path() / "m").string());
  // Tiny: hidden 64, 4 heads of 32 (sliding, 2 KV heads) or 64 (full, 1 KV head, K = V), MLP
  // 128 (256 on the 3 KV-shared layers 3-5), 4 experts of 32 (top 2), per-layer inputs 16.
  const double moe = 64 * 4 + 2 * (2 * 32 * 64 + 64 * 32);  // router + two experts
  const double ple = 64 * 16 * 2;
  const double sliding = 64 * 128 + 2 * 64 * 64 + 128 * 64 + 3 * 64 * 128 + ple + moe;
  const double full = 64 * 256 + 64 * 64 + 256 * 64 + 3 * 64 * 128 + ple + moe;
  const double sliding_shared = 64 * 128 + 128 * 64 + 3 * 64 * 256 + ple + moe;
  const double full_shared = 64 * 256 + 256 * 64 + 3 * 64 * 256 + ple + moe;
  const int64_t n = 10;
  const double macs = n * (2 * sliding + full) + (2 * sliding_shared + full_shared) +
                      n * (64 * 6 * 16) + 262144.0 * 64;
  // Keys seen by queries 0..9: window 8 on sliding layers; shared layers run the last query only.
  const double attention = 4 * 4 * (2 * 52 * 32 + 55 * 64 + 2 * 8 * 32 + 10 * 64);
  EXPECT_DOUBLE_EQ(prefill_flops(w, n, 1), 2 * macs + attention);
  EXPECT_DOUBLE_EQ(prefill_flops(w, n, 3), 3 * (2 * macs + attention));
}

// The prefill share of peak divides the FLOPs of the prompts that ran: a --prompt-file's tokens,
// not --input-len (which only sizes random prompts).
TEST(PrefillFlops, LatencyPromptFileCountsTheFilesTokensNotInputLen) {
  GS_REQUIRE_SHARED(shared);
  testing::TempDir tmp;
  const std::string model = (tmp.path() / "m").string();
  // The tiny preset with the real vocabulary: the prompt file needs a tokenizer.
  const std::string made = testing::make_tiny_chat_model(shared, model);
  ASSERT_EQ(made, "");
  const auto prompt_file = tmp.path() / "prompt.txt";
  std::ofstream(prompt_file) << "def add(a, b):\n    return a + b\n\nprint(add(2, 3))\n";
  const auto json_path = tmp.path() / "latency.json";
  const auto run = testing::run_command(
      testing::cli_binary().string() + " bench latency " + model + " --prompt-file " +
      prompt_file.string() + " --input-len 4 --output-len 2 --batch-size 2 --num-iters 1" +
      " --num-iters-warmup 0 --membw-size-mib 4 --threads 1 --max-model-len 256" +
      " --kv-cache-memory-bytes 16M --output-json " + json_path.string() + " 2>&1");
  ASSERT_EQ(run.exit_code, 0) << run.out;
  const auto result = nlohmann::json::parse(testing::read_text_file(json_path));
  const int64_t file_tokens = result.at("input_len").get<int64_t>();
  ASSERT_GT(file_tokens, 4) << run.out;
  const ModelWeights w = load_model_weights(model);
  EXPECT_DOUBLE_EQ(result.at("prefill_flops").get<double>(), prefill_flops(w, file_tokens, 2));
}

TEST(PeakRates, KindsThisCpuHasAreMeasured) {
  ThreadPool pool(1);
  const cpu::PeakRates r = cpu::measure_peak_rates(pool, 0.01, 1);
  const cpu::CpuFeatures& f = cpu::cpu_features();
  const bool avx512 = cpu::cpu_supports(cpu::CpuIsa::kAvx512);
  EXPECT_EQ(r.f32_fma_flops > 0, cpu::cpu_supports(cpu::CpuIsa::kAvx2));
  EXPECT_EQ(r.bf16_dot_flops > 0, avx512 && f.avx512_bf16);
  // The int8 dot of the quantized kernels at this level: AVX2, AVX-VNNI or AVX-512 VNNI.
  EXPECT_EQ(r.int8_dot_ops > 0, cpu::quant_best_isa() != cpu::QuantIsa::kPortable);
}

}  // namespace
}  // namespace gemmaserve
