// --cpu-matmul-precision f32|bf16: parsed under one name by every model-running command, a bad
// value rejected with an exact message before the weights load (library and real binary), the
// precision in effect logged at startup, and `bench quality --cpu-matmul-precision bf16`.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/arg_parser.h"
#include "cli/engine_flags.h"
#include "core/error.h"
#include "engine/engine.h"
#include "kernels/cpu/cpu_features.h"
#include "model/gemma4_model.h"
#include "test_support.h"

namespace gemmaserve {
namespace {

using testing::cli_binary;
using testing::run_command;

constexpr const char* kBadValueError =
    "--cpu-matmul-precision: unknown precision 'fp16' (expected f32 or bf16)";

std::string golden_model(const std::string& name) {
  return (testing::source_dir() / "tests/data/golden/models" / name).string();
}

EngineArgs args_from(const std::vector<std::string>& flags) {
  ArgParser p;
  add_engine_flags(p);
  p.parse(flags, 0);
  return engine_args_from_flags(p, "m");
}

template <typename Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(MatmulPrecisionFlag, ParsesF32AndBf16DefaultF32) {
  EXPECT_EQ(args_from({}).cpu_matmul_precision, "f32");
  EXPECT_EQ(args_from({"--cpu-matmul-precision", "bf16"}).cpu_matmul_precision, "bf16");
  EXPECT_EQ(args_from({"--cpu-matmul-precision=f32"}).cpu_matmul_precision, "f32");
  EXPECT_EQ(parse_matmul_precision("bf16", "--x"), cpu::MatmulPrecision::kBF16);
  EXPECT_EQ(parse_matmul_precision("f32", "--x"), cpu::MatmulPrecision::kF32);
  EXPECT_STREQ(matmul_precision_name(cpu::MatmulPrecision::kBF16), "bf16");
  EXPECT_NE(std::string(engine_flags_usage()).find("--cpu-matmul-precision f32|bf16"),
            std::string::npos);
}

TEST(MatmulPrecisionFlag, BadValueIsAnExactInputError) {
  EXPECT_EQ(error_of([] { args_from({"--cpu-matmul-precision", "fp16"}); }), kBadValueError);
  EXPECT_EQ(error_of([] {
              args_from({"--cpu-matmul-precision", "BF16"});
            }),
            "--cpu-matmul-precision: unknown precision 'BF16' (expected f32 or bf16)");
  // The engine checks it before anything loads: the model folder does not even exist.
  EngineArgs a;
  a.model = "/nonexistent/model";
  a.cpu_matmul_precision = "fp16";
  EXPECT_EQ(error_of([&] { Engine engine(a); }), kBadValueError);
}

// The last line of a command's combined output (earlier lines are log output).
std::string last_line(std::string out) {
  while (!out.empty() && out.back() == '\n') out.pop_back();
  const size_t nl = out.rfind('\n');
  return nl == std::string::npos ? out : out.substr(nl + 1);
}

TEST(MatmulPrecisionFlag, EveryCommandRejectsABadValueBeforeLoading) {
  const std::string bin = cli_binary().string();
  for (const char* command : {"generate /nonexistent --prompt-ids 2", "bench latency /nonexistent",
                              "bench throughput /nonexistent", "serve /nonexistent"}) {
    const auto r = run_command(bin + " " + command + " --cpu-matmul-precision fp16 2>&1");
    EXPECT_EQ(r.exit_code, 2) << command << ": " << r.out;
    EXPECT_NE(r.out.find(kBadValueError), std::string::npos) << command << ": " << r.out;
    EXPECT_EQ(r.out.find("nonexistent"), std::string::npos) << command << ": " << r.out;
  }
}

std::string generate_log(const std::string& flags, const std::string& env = "") {
  const auto r = run_command(
      env + " " + cli_binary().string() + " generate " + golden_model("dense") +
      " --prompt-ids 2,45,67 --max-tokens 2 --kv-cache-memory 16M --max-model-len 512 " + flags +
      " 2>&1");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  return r.out;
}

TEST(MatmulPrecisionFlag, StartupLogsThePrecisionInEffect) {
  EXPECT_NE(generate_log("").find("CPU matmul precision: f32 activations"), std::string::npos);
  const std::string bf16 = generate_log("--cpu-matmul-precision bf16");
  if (cpu::cpu_features().avx512_bf16 && cpu::cpu_isa() == cpu::CpuIsa::kAvx512) {
    EXPECT_NE(bf16.find("CPU matmul precision: bf16 activations (AVX512_BF16) for all"),
              std::string::npos)
        << bf16;
  } else {
    EXPECT_NE(bf16.find("--cpu-matmul-precision bf16 cannot apply"), std::string::npos) << bf16;
  }
  // A lowered kernel level cannot use the bf16 dot products: a warning, f32 in effect.
  const std::string avx2 = generate_log("--cpu-matmul-precision bf16", "GEMMASERVE_CPU_ISA=avx2");
  EXPECT_NE(avx2.find("--cpu-matmul-precision bf16 cannot apply: "), std::string::npos) << avx2;
  EXPECT_NE(avx2.find("CPU matmul precision: f32 activations"), std::string::npos) << avx2;
  // Quantized matrices keep their int8 path; the fixture's 8-wide per-layer projections are
  // no whole q8_0 blocks and stay bf16, so bf16 activations cover only those.
  const std::string q8 = generate_log("--quantization q8_0 --cpu-matmul-precision bf16");
  if (cpu::cpu_features().avx512_bf16 && cpu::cpu_isa() == cpu::CpuIsa::kAvx512) {
    EXPECT_NE(q8.find("CPU matmul precision: bf16 activations for 10 of 84 weight matrices (the "
                      "others are not bf16 and keep their path)"),
              std::string::npos)
        << q8;
  }
}

TEST(MatmulPrecisionFlag, BenchQualityComparesBf16Activations) {
  const std::string bin = cli_binary().string();
  const auto r = run_command(bin + " bench quality " + golden_model("dense") +
                             " --cpu-matmul-precision bf16 --num-prompts 2 --prompt-len 24 "
                             "--threads 2 --json 2>/dev/null");
  if (!cpu::cpu_features().avx512_bf16 || cpu::cpu_isa() != cpu::CpuIsa::kAvx512) {
    EXPECT_EQ(r.exit_code, 2) << r.out;  // "cannot apply": nothing would differ
    GTEST_SKIP() << "bf16 activations cannot apply on this CPU / kernel level";
  }
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(last_line(r.out));
  EXPECT_EQ(j["cpu_matmul_precision"], "bf16");
  EXPECT_TRUE(j["quantization"].is_null());
  EXPECT_EQ(j["positions"], 48);
  EXPECT_GE(j["confident_top1_agreement"].get<double>(), 0.9);
  EXPECT_GT(j["mean_kl"].get<double>(), 0.0);  // the activations really were rounded
  EXPECT_LT(j["mean_kl"].get<double>(), 1e-2);

  const auto nothing = run_command(bin + " bench quality " + golden_model("dense") + " 2>&1");
  EXPECT_EQ(nothing.exit_code, 2);
  EXPECT_NE(nothing.out.find("nothing to compare: give --quantization q8_0|q4_0|q4_k and/or "
                             "--cpu-matmul-precision bf16"),
            std::string::npos)
      << nothing.out;
  const auto bad = run_command(bin + " bench quality " + golden_model("dense") +
                               " --cpu-matmul-precision fp16 2>&1");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.out.find(kBadValueError), std::string::npos) << bad.out;
}

}  // namespace
}  // namespace gemmaserve
