#include "bench/bench_latency.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <random>
#include <thread>

#include "bench/bench_kernels.h"
#include "cli/arg_parser.h"
#include "cli/config_file.h"
#include "cli/engine_flags.h"
#include "cli/tensor_parallel_launch.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/engine.h"
#include "gemmaserve/llm.h"
#include "kernels/cpu/peak_rate.h"
#include "model/weights.h"

namespace gemmaserve {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kUsage =
    "usage: gemmaserve bench throughput MODEL [--input-len N (1024)] [--output-len N (128)]\n"
    "                                  [--num-prompts N (1000)] [--n N] [--json]\n"
    "                                  [--output-json PATH] [engine options]\n"
    "       gemmaserve bench latency MODEL [--input-len N (32)] [--output-len N (128)]\n"
    "                               [--batch-size N (8)] [--num-iters|--repeat N (30)]\n"
    "                               [--num-iters-warmup N (10)] [--membw-size-mib M (1024)]\n"
    "                               [--temperature T (1)] [--prompt-file PATH]\n"
    "                               [--json] [--output-json PATH] [engine options]\n"
    "       gemmaserve bench membw [--threads N] [--size-mib M (1024)] [--json]\n"
    "       gemmaserve bench peak [--threads N] [--json]\n"
    "       gemmaserve bench matmul [--t T] [--k K] [--n N] [--dtype D] [--threads N] [--isa I]\n"
    "       gemmaserve bench attention [--head-dim D] [--context N] [--seqs S] [--layers L] ...\n"
    "       gemmaserve bench tokenizer-load TOKENIZER_JSON [--runs N (5)] [--json]\n"
    "       gemmaserve bench structured TOKENIZER [--schema FILE] [--tokens N] [--batch-size N]\n"
    "       gemmaserve bench image [MODEL_DIR] [--tower e2b] [--image-size N] [--budgets LIST]\n"
    "       gemmaserve bench audio [--model DIR | --preset e2b] [--seconds S] [--runs N]\n"
    "       gemmaserve bench video [--model DIR | --preset e2b] --tokenizer PATH [--seconds S]\n"
    "Random token prompts (seeded by --seed), ignore_eos, temperature 1, as vLLM's benchmarks.\n"
    "throughput submits every prompt at once (the batch is --max-num-seqs); latency times\n"
    "--num-iters generate calls of --batch-size prompts each, plus as many prefill-only calls\n"
    "(max_tokens 1): pp tokens/s = prompt tokens / prefill time, tg tokens/s = generated tokens\n"
    "after the first / (full time - prefill time), medians; the roofline is the measured read\n"
    "bandwidth / weight bytes per step (weights are read once per step for the whole batch).\n"
    "latency --prompt-file: every prompt is that text (e.g. code to edit, for ngram speculation;\n"
    "add --no-enable-prefix-caching); with --speculative-config the draft acceptance of the\n"
    "timed runs is reported too.\n";

std::vector<Prompt> random_prompts(std::mt19937_64& rng, int count, int len, int vocab) {
  std::uniform_int_distribution<int32_t> token(0, vocab - 1);
  std::vector<Prompt> prompts;
  for (int i = 0; i < count; ++i) {
    std::vector<int32_t> ids(static_cast<size_t>(len));
    for (int32_t& id : ids) id = token(rng);
    prompts.push_back(Prompt::from_ids(std::move(ids)));
  }
  return prompts;
}

SamplingParams bench_params(int output_len, int n) {
  SamplingParams sp;
  sp.n = n;
  sp.temperature = 1.0;
  sp.top_p = 1.0;
  sp.ignore_eos = true;
  sp.max_tokens = output_len;
  return sp;
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Linear interpolation between closest ranks, as numpy.percentile's default.
double percentile(std::vector<double> sorted, double pct) {
  std::sort(sorted.begin(), sorted.end());
  const double rank = pct / 100.0 * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(rank);
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (rank - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
}

void emit_json(const ArgParser& p, const nlohmann::json& result) {
  if (p.get_flag("--json")) std::cout << result.dump(2) << "\n";
  if (auto path = p.get("--output-json")) {
    std::ofstream out(*path);
    if (!out) throw InputError("--output-json: cannot write " + *path);
    out << result.dump(4) << "\n";
  }
}

int run_throughput(const ArgParser& p, const EngineArgs& ea) {
  const int input_len = p.get_positive_int("--input-len", 1024);
  const int output_len = p.get_positive_int("--output-len", 128);
  const int num_prompts = p.get_positive_int("--num-prompts", 1000);
  const int n = p.get_positive_int("--n", 1);
  LLM llm(ea);
  std::mt19937_64 rng(ea.seed);
  const std::vector<Prompt> prompts = random_prompts(rng, num_prompts, input_len, llm.vocab_size());
  const SamplingParams sp = bench_params(output_len, n);
  const uint64_t steps_before = llm.num_steps();
  const Clock::time_point start = Clock::now();
  const std::vector<RequestOutput> outputs = llm.generate(prompts, sp);
  const double elapsed = seconds_since(start);
  int64_t prompt_tokens = 0, output_tokens = 0;
  for (const RequestOutput& r : outputs) {
    prompt_tokens += static_cast<int64_t>(r.prompt_token_ids.size());
    for (const CompletionOutput& o : r.outputs) output_tokens += o.token_ids.size();
  }
  const int64_t total = prompt_tokens + output_tokens;
  const uint64_t steps = llm.num_steps() - steps_before;
  std::printf("Throughput: %.2f requests/s, %.2f total tokens/s, %.2f output tokens/s\n",
              num_prompts / elapsed, static_cast<double>(total) / elapsed,
              static_cast<double>(output_tokens) / elapsed);
  std::printf("Total num prompt tokens:  %lld\n", static_cast<long long>(prompt_tokens));
  std::printf("Total num output tokens:  %lld\n", static_cast<long long>(output_tokens));
  std::printf("Engine steps: %llu in %.3f s (max-num-seqs %d)\n",
              static_cast<unsigned long long>(steps), elapsed, ea.max_num_seqs);
  std::fflush(stdout);
  emit_json(p, {{"elapsed_time", elapsed},
                {"num_requests", num_prompts},
                {"total_num_tokens", total},
                {"requests_per_second", num_prompts / elapsed},
                {"tokens_per_second", static_cast<double>(total) / elapsed},
                {"output_tokens_per_second", static_cast<double>(output_tokens) / elapsed},
                {"engine_steps", steps}});
  return 0;
}

// Rank 0's tensor-parallel traffic over decode steps, summed over the timed runs.
struct TensorParallelTraffic {
  double bytes = 0, calls = 0, seconds = 0;
  int64_t steps = 0;
  // s0 -> s1: a prefill-only run; s1 -> s2: the same-size run with `decode_steps` more steps.
  void add(const EngineStats& s0, const EngineStats& s1, const EngineStats& s2, int decode_steps) {
    const auto twice_minus = [](double a, double b, double c) { return (c - b) - (b - a); };
    bytes +=
        twice_minus(static_cast<double>(s0.tp_bytes_sent), static_cast<double>(s1.tp_bytes_sent),
                    static_cast<double>(s2.tp_bytes_sent));
    calls +=
        twice_minus(static_cast<double>(s0.tp_collectives), static_cast<double>(s1.tp_collectives),
                    static_cast<double>(s2.tp_collectives));
    seconds += twice_minus(s0.tp_seconds, s1.tp_seconds, s2.tp_seconds);
    steps += decode_steps;
  }
  double per_step(double x) const { return steps > 0 ? x / static_cast<double>(steps) : 0.0; }
  double bytes_per_step() const { return per_step(bytes); }
  double calls_per_step() const { return per_step(calls); }
  double seconds_per_step() const { return per_step(seconds); }
};

// Draft acceptance over the timed full runs (vLLM's acceptance rate and mean acceptance length,
// the latter counting the target's own token after the accepted drafts).
struct SpeculativeCounts {
  uint64_t drafts = 0, tokens = 0, accepted = 0;
  void add(const EngineStats& before, const EngineStats& after) {
    drafts += after.spec_decode_num_drafts - before.spec_decode_num_drafts;
    tokens += after.spec_decode_num_draft_tokens - before.spec_decode_num_draft_tokens;
    accepted += after.spec_decode_num_accepted_tokens - before.spec_decode_num_accepted_tokens;
  }
  double acceptance_rate() const {
    return tokens > 0 ? static_cast<double>(accepted) / static_cast<double>(tokens) : 0.0;
  }
  double mean_acceptance_length() const {
    return drafts > 0 ? 1.0 + static_cast<double>(accepted) / static_cast<double>(drafts) : 1.0;
  }
};

int run_latency(const ArgParser& p, const EngineArgs& ea) {
  int input_len = p.get_positive_int("--input-len", 32);  // a --prompt-file's length
  const int output_len = p.get_positive_int("--output-len", 128);
  const int batch_size = p.get_positive_int("--batch-size", 8);
  const int num_iters = p.get_positive_int("--num-iters", 30);
  const int warmup = p.get_non_negative_int("--num-iters-warmup", 10);
  const int n = p.get_positive_int("--n", 1);
  const int membw_mib = p.get_positive_int("--membw-size-mib", 1024);
  if (ea.data_parallel_size > 1) {
    throw InputError(
        "bench latency times one engine's batch against its memory bandwidth; "
        "--data-parallel-size applies to bench throughput, bench serve (against serve "
        "--data-parallel-size N) and the offline API");
  }
  const double temperature = p.get_double("--temperature", 1.0);
  if (!(temperature >= 0)) throw InputError("--temperature must be >= 0");
  const int threads = ea.threads > 0
                          ? ea.threads
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // The machine's read bandwidth moves with its neighbours' load from one second to the next,
  // so it is measured between every two timed runs: each decode is judged against the higher
  // of the measurements just before and just after it (never an easier limit).
  ReadBandwidthProbe probe(static_cast<size_t>(membw_mib) << 20, threads);
  LLM llm(ea);
  std::mt19937_64 rng(ea.seed);
  SamplingParams sp = bench_params(output_len, n);
  SamplingParams prefill_only = bench_params(1, n);
  sp.temperature = prefill_only.temperature = temperature;
  std::optional<std::vector<int32_t>> file_prompt;
  if (auto path = p.get("--prompt-file")) {
    std::ifstream in(*path);
    if (!in) throw InputError("--prompt-file: cannot read " + *path);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    file_prompt = llm.engine().encode_prompt(text);
    std::printf("Prompt: %zu tokens from %s\n", file_prompt->size(), path->c_str());
    input_len = static_cast<int>(file_prompt->size());
  }
  // Weight bytes and prefill FLOPs (of the prompts run) from a second mapping of the checkpoint
  // (shares the page cache).
  double pp_flops = 0;
  uint64_t bytes_per_step = 0;
  {
    const ModelWeights counted = load_model_weights(ea.model);
    bytes_per_step = weight_bytes_per_token(counted);
    pp_flops = prefill_flops(counted, input_len, batch_size);
  }
  // Fresh prompts every iteration, so prefix caching cannot shorten later iterations.
  const auto batch = [&] {
    if (!file_prompt) return random_prompts(rng, batch_size, input_len, llm.vocab_size());
    return std::vector<Prompt>(static_cast<size_t>(batch_size), Prompt::from_ids(*file_prompt));
  };
  for (int i = 0; i < warmup; ++i) llm.generate(batch(), sp);
  SpeculativeCounts speculation;
  std::vector<double> latencies, prefill_times, decode_times;
  std::vector<double> bandwidths{probe.measure(3)};
  // Tensor parallelism: what rank 0's collectives sent over the decode steps (a full run's
  // minus its prefill-only twin's).
  TensorParallelTraffic decode_traffic;
  for (int i = 0; i < num_iters; ++i) {
    const std::vector<Prompt> first = batch();
    const EngineStats s0 = llm.engine().stats();
    Clock::time_point start = Clock::now();
    llm.generate(first, prefill_only);
    const double prefill = seconds_since(start);
    const std::vector<Prompt> prompts = batch();
    const EngineStats s1 = llm.engine().stats();
    start = Clock::now();
    llm.generate(prompts, sp);
    const EngineStats s2 = llm.engine().stats();
    decode_traffic.add(s0, s1, s2, output_len - 1);
    speculation.add(s1, s2);
    latencies.push_back(seconds_since(start));
    prefill_times.push_back(prefill);
    decode_times.push_back(std::max(latencies.back() - prefill, 1e-9));
    bandwidths.push_back(probe.measure(3));
  }
  const double avg = std::accumulate(latencies.begin(), latencies.end(), 0.0) /
                     static_cast<double>(latencies.size());
  std::printf("Avg latency: %.6f seconds\n", avg);
  nlohmann::json pct = nlohmann::json::object();
  for (int q : {10, 25, 50, 75, 90, 99}) {
    const double v = percentile(latencies, q);
    std::printf("%d%% percentile latency: %.6f seconds\n", q, v);
    pct[std::to_string(q)] = v;
  }
  const double output_tps = static_cast<double>(batch_size) * n * output_len / avg;
  std::printf("Throughput: %.2f output tokens/s (batch %d x %d tokens / avg latency)\n", output_tps,
              batch_size, output_len);
  const double pp_tps = static_cast<double>(batch_size) * input_len / median(prefill_times);
  const double tg_tps =
      output_len > 1 ? static_cast<double>(batch_size) * n * (output_len - 1) / median(decode_times)
                     : 0.0;
  // Per iteration: its tg rate over the roofline of the bandwidth bracketing it.
  std::vector<double> fractions, limits;
  for (size_t i = 0; i < decode_times.size(); ++i) {
    const double bw = std::max(bandwidths[i], bandwidths[i + 1]);
    limits.push_back(bw);
    const double tg_i =
        static_cast<double>(batch_size) * n * std::max(output_len - 1, 0) / decode_times[i];
    fractions.push_back(tg_i * static_cast<double>(bytes_per_step) /
                        (static_cast<double>(batch_size) * n * bw));
  }
  const double membw = median(limits);
  const double roofline = static_cast<double>(batch_size) * n * membw /
                          static_cast<double>(std::max<uint64_t>(bytes_per_step, 1));
  const double fraction = output_len > 1 ? median(fractions) : 0.0;
  cpu::PeakRates peak;
  {
    ThreadPool peak_pool(static_cast<size_t>(threads), true);
    peak = cpu::measure_peak_rates(peak_pool);
  }
  std::printf("pp%d: %.2f tokens/s   tg%d: %.2f tokens/s   (batch %d, %d threads, medians)\n",
              input_len, pp_tps, output_len, tg_tps, batch_size, threads);
  std::printf(
      "Roofline: %.3f GB of weights per step, %.2f GB/s read (median; %.2f-%.2f between runs) -> "
      "%.2f tokens/s; tg at %.1f%% (median over runs, each against its own bracketing bandwidth)\n",
      static_cast<double>(bytes_per_step) / 1e9, membw / 1e9,
      *std::min_element(bandwidths.begin(), bandwidths.end()) / 1e9,
      *std::max_element(bandwidths.begin(), bandwidths.end()) / 1e9, roofline, 100.0 * fraction);
  const double pp_flops_per_s = pp_flops / median(prefill_times);
  const auto share = [&](double rate) { return rate > 0 ? 100.0 * pp_flops_per_s / rate : 0.0; };
  std::printf(
      "Prefill: %.1f GFLOP per call, %.1f GFLOP/s = %.1f%% of the f32 FMA peak (%.1f), %.1f%% of "
      "the bf16 dot peak (%.1f), %.1f%% of the int8 dot peak (%.1f GOPS), measured in this run\n",
      pp_flops / 1e9, pp_flops_per_s / 1e9, share(peak.f32_fma_flops), peak.f32_fma_flops / 1e9,
      share(peak.bf16_dot_flops), peak.bf16_dot_flops / 1e9, share(peak.int8_dot_ops),
      peak.int8_dot_ops / 1e9);
  if (ea.tensor_parallel_size > 1) {
    std::printf(
        "Tensor parallel: %d ranks; rank 0 sent %.1f KiB in %.1f collectives per decode step "
        "and spent %.3f ms in them (waiting for the other ranks included)\n",
        ea.tensor_parallel_size, decode_traffic.bytes_per_step() / 1024.0,
        decode_traffic.calls_per_step(), decode_traffic.seconds_per_step() * 1e3);
  }
  if (!ea.speculative_config.empty()) {
    std::printf(
        "Speculative decoding: %.1f%% of %llu drafted tokens accepted, mean acceptance length "
        "%.2f (%llu drafts)\n",
        100.0 * speculation.acceptance_rate(), static_cast<unsigned long long>(speculation.tokens),
        speculation.mean_acceptance_length(), static_cast<unsigned long long>(speculation.drafts));
  }
  std::fflush(stdout);
  emit_json(p, {{"tensor_parallel_size", ea.tensor_parallel_size},
                {"spec_decode_acceptance_rate", speculation.acceptance_rate()},
                {"spec_decode_mean_acceptance_length", speculation.mean_acceptance_length()},
                {"spec_decode_num_draft_tokens", speculation.tokens},
                {"tp_bytes_per_decode_step", decode_traffic.bytes_per_step()},
                {"tp_collectives_per_decode_step", decode_traffic.calls_per_step()},
                {"tp_seconds_per_decode_step", decode_traffic.seconds_per_step()},
                {"avg_latency", avg},
                {"latencies", latencies},
                {"percentiles", pct},
                {"output_tokens_per_second", output_tps},
                {"input_len", input_len},
                {"output_len", output_len},
                {"batch_size", batch_size},
                {"threads", threads},
                {"pp_tokens_per_s", pp_tps},
                {"tg_tokens_per_s", tg_tps},
                {"weight_bytes_per_token", bytes_per_step},
                {"membw_bytes_per_s", membw},
                {"membw_between_runs_bytes_per_s", bandwidths},
                {"roofline_tokens_per_s", roofline},
                {"roofline_fraction", fraction},
                {"prefill_flops", pp_flops},
                {"prefill_flops_per_s", pp_flops_per_s},
                {"peak_f32_fma_flops", peak.f32_fma_flops},
                {"peak_bf16_dot_flops", peak.bf16_dot_flops},
                {"peak_int8_dot_ops", peak.int8_dot_ops}});
  return 0;
}

}  // namespace

std::string bench_usage() { return std::string(kUsage) + engine_flags_usage(); }

int run_bench_throughput_latency(const std::string& mode, const std::vector<std::string>& rest) {
  ArgParser p;
  add_engine_flags(p);
  p.value("--model").value("--input-len").value("--output-len").value("--num-prompts");
  p.value("--batch-size").value("--num-iters", {"--repeat"}).value("--num-iters-warmup");
  p.value("--n").value("--membw-size-mib").value("--temperature").value("--prompt-file");
  p.value("--output-json").flag("--json").flag("--help", {"-h"});
  const ConfigFileFlags config = parse_with_config_file(p, rest, 1);
  if (p.get_flag("--help")) {
    std::cout << bench_usage();
    return 0;
  }
  return config.explaining([&] {
    std::string model = p.get("--model").value_or("");
    if (!p.positionals().empty()) model = p.positionals()[0];
    if (model.empty()) throw InputError("bench " + mode + " needs MODEL\n" + std::string(kUsage));
    EngineArgs ea = engine_args_from_flags(p, model);
    if (run_as_tensor_parallel_follower(ea)) return 0;
    ea.show_progress = false;
    return mode == "throughput" ? run_throughput(p, ea) : run_latency(p, ea);
  });
}

}  // namespace gemmaserve
