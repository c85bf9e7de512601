// Engine start-up: generation-config defaults and overrides, the stop-token union, the KV cache
// budget, and the shared engine flags.
#include "engine/engine_setup.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "cli/engine_flags.h"
#include "core/error.h"
#include "engine_test_support.h"

namespace gemmaserve::enginetest {
namespace {

namespace fs = std::filesystem;
using ::gemmaserve::testing::TempDir;
using nlohmann::json;

// A copy of the dense fixture with our own generation_config.json.
void copy_model(const fs::path& to, const json& generation_config) {
  for (const auto& e : fs::directory_iterator(golden_model("dense"))) {
    fs::copy(e.path(), to / e.path().filename());
  }
  std::ofstream(to / "generation_config.json", std::ios::trunc) << generation_config.dump();
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

TEST(GenerationDefaults, AutoVllmFolderAndOverride) {
  TempDir model, other;
  copy_model(model.path(), {{"eos_token_id", {1, 106}},
                            {"temperature", 0.7},
                            {"top_k", 40},
                            {"top_p", 0.9},
                            {"max_new_tokens", 33},
                            {"do_sample", true}});
  std::ofstream(other.path() / "generation_config.json") << json{{"min_p", 0.05}}.dump();

  GenerationDefaults d = resolve_generation_defaults(model.path(), "auto", "");
  EXPECT_EQ(d.temperature, 0.7);
  EXPECT_EQ(d.top_k, 40);
  EXPECT_EQ(d.top_p, 0.9);
  EXPECT_EQ(d.max_tokens, 33);
  EXPECT_FALSE(d.min_p.has_value());
  SamplingParams p = apply_generation_defaults(d);
  EXPECT_EQ(p.temperature, 0.7);
  EXPECT_EQ(p.top_k, 40);
  EXPECT_EQ(p.max_tokens, 33);

  d = resolve_generation_defaults(model.path(), "vllm", "");
  EXPECT_FALSE(d.temperature || d.top_k || d.top_p || d.max_tokens);
  EXPECT_EQ(apply_generation_defaults(d).temperature, SamplingParams().temperature);

  d = resolve_generation_defaults(model.path(), other.path().string(), "");
  EXPECT_EQ(d.min_p, 0.05);
  EXPECT_FALSE(d.temperature.has_value());

  // The override's keys win over the file's; the others stay.
  d = resolve_generation_defaults(model.path(), "auto",
                                  R"({"temperature": 0.2, "repetition_penalty": 1.1})");
  EXPECT_EQ(d.temperature, 0.2);
  EXPECT_EQ(d.repetition_penalty, 1.1);
  EXPECT_EQ(d.top_k, 40);
  // ... also with "vllm" (no file at all).
  d = resolve_generation_defaults(model.path(), "vllm", R"({"top_p": 0.5})");
  EXPECT_EQ(d.top_p, 0.5);

  EXPECT_EQ(error_of([&] { resolve_generation_defaults(model.path(), "/nonexistent", ""); }),
            "--generation-config: '/nonexistent' is not 'auto', 'vllm' or a folder");
  EXPECT_EQ(error_of([&] { resolve_generation_defaults(model.path(), "auto", "[1]"); }),
            "--override-generation-config: must be a JSON object");
  EXPECT_NE(error_of([&] {
              resolve_generation_defaults(model.path(), "auto", "{bad");
            }).find("--override-generation-config: invalid JSON"),
            std::string::npos);
}

// The stop set is a union: an override of the generation config adds ids, never drops any;
// only a request's ignore_eos does.
TEST(GenerationDefaults, EosIdsAreTheUnionOfEverySource) {
  TempDir model;
  copy_model(model.path(), {{"eos_token_id", {1, 106}}, {"temperature", 0.7}});
  EngineArgs args = tiny_args("dense");
  args.model = model.path().string();
  args.generation_config = "vllm";
  args.override_generation_config = R"({"eos_token_id": 50, "temperature": 0.3})";
  auto engine = make_engine(args);
  // config.json says 1, generation_config.json 1 and 106, the override 50.
  EXPECT_EQ(engine->eos_token_ids(), (std::vector<int32_t>{1, 50, 106}));
  const SamplingParams d = engine->default_sampling_params();
  EXPECT_EQ(d.temperature, 0.3);

  // Greedy continuation of a prompt, then the same with its 2nd token made an eos id.
  EngineRequest r;
  r.request_id = "free";
  r.prompt_token_ids = {2, 175, 50, 120, 195, 326, 254};
  r.params.temperature = 0;
  r.params.max_tokens = 6;
  r.params.ignore_eos = true;
  const RunResult free_run = run_together(*engine, {r});
  const std::vector<int32_t>& tokens = free_run.outputs[0].outputs[0].token_ids;
  ASSERT_EQ(tokens.size(), 6u);
  TempDir stopping;
  copy_model(stopping.path(), {{"eos_token_id", tokens[1]}});
  args.model = stopping.path().string();
  args.generation_config = "auto";
  args.override_generation_config = R"({"eos_token_id": 7})";
  engine = make_engine(args);
  r.request_id = "stops";
  r.params.ignore_eos = false;
  const RunResult stopped = run_together(*engine, {r});
  const CompletionOutput& o = stopped.outputs[0].outputs[0];
  EXPECT_EQ(o.token_ids, (std::vector<int32_t>{tokens[0], tokens[1]}));
  EXPECT_EQ(o.finish_reason, "stop");
  EXPECT_EQ(o.stop_reason_token, tokens[1]);
}

TEST(KvCacheBudget, ExplicitUtilizationDefaultAndCap) {
  const TextConfig config = load_model_config(golden_model("dense")).text;
  EngineArgs args;
  args.max_num_seqs = 256;
  const int64_t avail = int64_t{10} << 30;
  args.kv_cache_memory_bytes = 123456789;
  EXPECT_EQ(choose_kv_cache_budget(args, config, 131072, avail, cpu::KvDtype::kF32).bytes,
            123456789);
  args.kv_cache_memory_bytes.reset();
  // Default: min(4 GiB, half of what is available).
  EXPECT_EQ(choose_kv_cache_budget(args, config, 131072, avail, cpu::KvDtype::kF32).bytes,
            int64_t{4} << 30);
  EXPECT_EQ(
      choose_kv_cache_budget(args, config, 131072, int64_t{6} << 30, cpu::KvDtype::kF32).bytes,
      int64_t{3} << 30);
  EXPECT_EQ(choose_kv_cache_budget(args, config, 131072, std::nullopt, cpu::KvDtype::kF32).bytes,
            int64_t{4} << 30);
  args.gpu_memory_utilization = 0.75;
  EXPECT_EQ(choose_kv_cache_budget(args, config, 131072, avail, cpu::KvDtype::kF32).bytes,
            static_cast<int64_t>(0.75 * static_cast<double>(avail)));
  // Never more than twice what max_num_seqs sequences of max_model_len can hold.
  args.max_num_seqs = 2;
  const int64_t capped = choose_kv_cache_budget(args, config, 64, avail, cpu::KvDtype::kF32).bytes;
  const int64_t full_block =
      group_bytes_per_block(config, AttentionType::kFull, 16, cpu::KvDtype::kF32);
  const int64_t sliding_block =
      group_bytes_per_block(config, AttentionType::kSliding, 16, cpu::KvDtype::kF32);
  // 64 tokens: 4 full blocks, 2 sliding blocks per sequence; one 2048-token chunk (128 blocks).
  EXPECT_EQ(capped, 2 * (full_block * (2 * 4 + 128) + sliding_block * (2 * 2 + 128)));
  args.gpu_memory_utilization = 1.5;
  EXPECT_EQ(error_of([&] { choose_kv_cache_budget(args, config, 64, avail, cpu::KvDtype::kF32); }),
            "--gpu-memory-utilization must be in (0, 1], got 1.500000");
}

TEST(EngineStartup, TooSmallACacheNamesTheLengthThatFits) {
  EngineArgs args = tiny_args("dense");
  args.kv_cache_memory_bytes = 64 << 10;
  args.max_model_len = 4096;
  const std::string e = error_of([&] { make_engine(args); });
  EXPECT_NE(e.find("--kv-cache-memory-bytes 65536 is too small"), std::string::npos) << e;
  EXPECT_NE(e.find("estimated maximum model length is"), std::string::npos) << e;
}

TEST(EngineStartup, MaxModelLenBeyondTheConfigIsRefused) {
  EngineArgs args = tiny_args("dense");
  args.max_model_len = 200000;
  EXPECT_EQ(error_of([&] { make_engine(args); }),
            "User-specified max_model_len (200000) is greater than the derived max_model_len "
            "(max_position_embeddings=131072 in model's config.json).");
}

TEST(EngineStartup, CpuBindEnvironmentIsAutoOrNone) {
  EngineArgs args = tiny_args("dense");
  setenv("GEMMASERVE_CPU_BIND", "off", 1);
  const std::string bad = error_of([&] { make_engine(args); });
  setenv("GEMMASERVE_CPU_BIND", "none", 1);
  const std::string none = error_of([&] { make_engine(args); });
  unsetenv("GEMMASERVE_CPU_BIND");
  EXPECT_EQ(bad, "GEMMASERVE_CPU_BIND must be auto or none, got 'off'");
  EXPECT_EQ(none, "no error");
}

TEST(EngineStartup, LinePrefetchEnvironmentIsNtaOrL2) {
  EngineArgs args = tiny_args("dense");
  setenv("GEMMASERVE_LINE_PREFETCH", "t0", 1);
  const std::string bad = error_of([&] { make_engine(args); });
  unsetenv("GEMMASERVE_LINE_PREFETCH");
  EXPECT_EQ(bad, "GEMMASERVE_LINE_PREFETCH must be nta or l2, got 't0'");
  EXPECT_EQ(error_of([&] { make_engine(args); }), "no error");
}

TEST(EngineStartup, PrefetchAheadEnvironmentIsAByteCount) {
  EngineArgs args = tiny_args("dense");
  std::vector<std::string> errors;
  for (const char* v : {"8k", "-1", "1048577", "8192"}) {
    setenv("GEMMASERVE_PREFETCH_AHEAD", v, 1);
    errors.push_back(error_of([&] { make_engine(args); }));
  }
  unsetenv("GEMMASERVE_PREFETCH_AHEAD");
  const std::string want =
      "GEMMASERVE_PREFETCH_AHEAD must be a byte count from 0 (the next group) to 1048576, got '";
  EXPECT_EQ(errors[0], want + "8k'");
  EXPECT_EQ(errors[1], want + "-1'");
  EXPECT_EQ(errors[2], want + "1048577'");
  EXPECT_EQ(errors[3], "no error");
}

TEST(EngineFlags, HumanReadableIntegers) {
  EXPECT_EQ(parse_human_readable_int("4096", "--x"), 4096);
  EXPECT_EQ(parse_human_readable_int("4k", "--x"), 4000);
  EXPECT_EQ(parse_human_readable_int("4K", "--x"), 4096);
  EXPECT_EQ(parse_human_readable_int("1.5g", "--x"), 1500000000);
  EXPECT_EQ(parse_human_readable_int("2G", "--x"), int64_t{2} << 30);
  EXPECT_EQ(parse_human_readable_int("16M", "--x"), int64_t{16} << 20);
  EXPECT_EQ(error_of([] { parse_human_readable_int("1.5G", "--kv-cache-memory-bytes"); }),
            "--kv-cache-memory-bytes: '1.5G' has a fraction; only the decimal suffixes k/m/g/t "
            "allow one");
  EXPECT_NE(error_of([] { parse_human_readable_int("lots", "--x"); }).find("'lots' is not an"),
            std::string::npos);
}

TEST(EngineFlags, EveryEngineFlagUnderVllmsName) {
  ArgParser p;
  add_engine_flags(p);
  p.parse({"--kv-cache-memory",
           "2G",
           "--block-size",
           "32",
           "--max-num-seqs",
           "8",
           "--max-num-batched-tokens",
           "4k",
           "--max-model-len",
           "32K",
           "--long-prefill-token-threshold",
           "64",
           "--no-enable-prefix-caching",
           "--generation-config",
           "vllm",
           "--override-generation-config",
           "{\"top_k\": 5}",
           "--seed",
           "9",
           "--threads",
           "3",
           "--gpu-memory-utilization",
           "0.5",
           "--tokenizer",
           "tok.json"},
          0);
  const EngineArgs a = engine_args_from_flags(p, "model-dir");
  EXPECT_EQ(a.model, "model-dir");
  EXPECT_EQ(a.kv_cache_memory_bytes, int64_t{2} << 30);
  EXPECT_EQ(a.block_size, 32);
  EXPECT_EQ(a.max_num_seqs, 8);
  EXPECT_EQ(a.max_num_batched_tokens, 4000);
  EXPECT_EQ(a.max_model_len, 32768);
  EXPECT_EQ(a.long_prefill_token_threshold, 64);
  EXPECT_FALSE(a.enable_prefix_caching);
  EXPECT_EQ(a.generation_config, "vllm");
  EXPECT_EQ(a.override_generation_config, "{\"top_k\": 5}");
  EXPECT_EQ(a.seed, 9u);
  EXPECT_EQ(a.threads, 3);
  EXPECT_EQ(a.gpu_memory_utilization, 0.5);
  EXPECT_EQ(a.tokenizer, "tok.json");

  ArgParser q;
  add_engine_flags(q);
  q.parse({"--kv-cache-memory-bytes=1000", "--enable-prefix-caching", "--kv-cache-dtype", "fp8"},
          0);
  const EngineArgs b = engine_args_from_flags(q, "m");
  EXPECT_EQ(b.kv_cache_memory_bytes, 1000);
  EXPECT_TRUE(b.enable_prefix_caching);
  EXPECT_EQ(b.kv_cache_dtype, "fp8");
  EXPECT_EQ(a.kv_cache_dtype, "auto");
  EXPECT_EQ(b.max_num_seqs, 256);  // vLLM's default
  EXPECT_FALSE(b.gpu_memory_utilization.has_value());
}

// The caches' byte budgets: GiB as numbers, 0 disables; anything else is refused by name.
TEST(EngineFlags, CacheBudgetsInGibAndBadValuesRefusedExactly) {
  auto parse = [](std::vector<std::string> args) {
    ArgParser p;
    add_engine_flags(p);
    p.parse(args, 0);
    return engine_args_from_flags(p, "m");
  };
  EXPECT_EQ(parse({}).structured_outputs_cache_gb, 1.0);
  EXPECT_EQ(parse({}).mm_processor_cache_gb, 4.0);
  EXPECT_EQ(parse({"--structured-outputs-cache-gb", "0.25"}).structured_outputs_cache_gb, 0.25);
  EXPECT_EQ(parse({"--structured-outputs-cache-gb=0"}).structured_outputs_cache_gb, 0.0);
  const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
      {{"--structured-outputs-cache-gb", "-1"},
       "--structured-outputs-cache-gb must be a number of GiB in [0, 1e9], got -1"},
      {{"--structured-outputs-cache-gb", "2e9"},
       "--structured-outputs-cache-gb must be a number of GiB in [0, 1e9], got 2e9"},
      {{"--structured-outputs-cache-gb", "lots"},
       "flag --structured-outputs-cache-gb expects a number, got 'lots'"},
      {{"--structured-outputs-cache-gb", "nan"},
       "flag --structured-outputs-cache-gb expects a number, got 'nan'"},
      {{"--mm-processor-cache-gb", "-0.5"},
       "--mm-processor-cache-gb must be a number of GiB in [0, 1e9], got -0.5"},
  };
  for (const auto& [args, message] : bad) {
    try {
      parse(args);
      ADD_FAILURE() << args[1] << " was accepted";
    } catch (const InputError& e) {
      EXPECT_EQ(std::string(e.what()), message);
    }
  }
  // The offline API's EngineArgs go through the same check when the engine starts.
  EngineArgs a;
  a.structured_outputs_cache_gb = -2;
  try {
    Engine engine(a);
    ADD_FAILURE() << "a negative budget was accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "--structured-outputs-cache-gb must be a number of GiB in [0, 1e9], got -2.0");
  }
}

// The offline API sets max_video_seconds without the flag's check; the engine refuses it before
// any weight loads.
TEST(EngineStartup, MaxVideoSecondsMustBePositiveAndFinite) {
  const std::vector<std::pair<double, std::string>> bad = {
      {0.0, "0.0"}, {-3.0, "-3.0"}, {std::numeric_limits<double>::infinity(), "inf"}};
  for (const auto& [seconds, shown] : bad) {
    EngineArgs a;
    a.max_video_seconds = seconds;
    EXPECT_EQ(error_of([&] { Engine engine(a); }),
              "--max-video-seconds must be a positive number of seconds, got " + shown);
  }
}

}  // namespace
}  // namespace gemmaserve::enginetest
