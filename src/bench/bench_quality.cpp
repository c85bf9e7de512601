#include "bench/bench_quality.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_kernels.h"
#include "cli/arg_parser.h"
#include "core/error.h"
#include "core/huge_pages.h"
#include "core/thread_pool.h"
#include "kernels/cpu/interleave.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/quant_matmul.h"
#include "model/gemma4_model.h"
#include "model/quantize_quality.h"
#include "model/weights.h"

namespace gemmaserve {
namespace {

constexpr const char* kUsage =
    "usage: gemmaserve bench quality MODEL_DIR [--quantization q8_0|q4_0|q4_k]\n"
    "                                [--cpu-matmul-precision f32|bf16]\n"
    "                                [--prompt-len N] [--num-prompts M] [--seed S]\n"
    "                                [--threads N] [--margin F] [--json]\n"
    "Teacher-forced comparison of MODEL_DIR as loaded (float weights, f32 activations) against\n"
    "the same checkpoint quantized at load and/or with bf16 activations (at least one of the\n"
    "two), on M random prompts of N tokens (default 4 x 128): top-1 agreement at every position\n"
    "and at positions whose reference top-1 logit beats the runner-up by more than F (default\n"
    "0.1), and the mean KL divergence KL(reference || candidate) in nats.\n";

struct QualityOptions {
  std::string model;
  std::optional<DType> quantization;
  cpu::MatmulPrecision precision = cpu::MatmulPrecision::kF32;
  int prompt_len = 128, num_prompts = 4, threads = 0;
  uint64_t seed = 0;
  double margin = 0.1;
  bool json = false;
};

QualityOptions parse_quality_options(const std::vector<std::string>& args, bool* help) {
  ArgParser p;
  p.value("--quantization", {"-q"}).value("--cpu-matmul-precision").value("--prompt-len");
  p.value("--num-prompts").value("--seed").value("--threads").value("--margin");
  p.flag("--json").flag("--help", {"-h"});
  p.parse(args, 1);
  QualityOptions o;
  *help = p.get_flag("--help");
  if (*help) return o;
  if (p.positionals().size() != 1) throw InputError("expected MODEL_DIR");
  o.model = p.positionals()[0];
  if (auto q = p.get("--quantization")) {
    o.quantization = cpu::parse_quantization_type(*q, "--quantization");
  }
  if (auto v = p.get("--cpu-matmul-precision")) {
    o.precision = parse_matmul_precision(*v, "--cpu-matmul-precision");
  }
  if (!o.quantization && o.precision == cpu::MatmulPrecision::kF32) {
    throw InputError(
        "nothing to compare: give --quantization q8_0|q4_0|q4_k and/or "
        "--cpu-matmul-precision bf16");
  }
  o.prompt_len = p.get_int("--prompt-len", o.prompt_len);
  o.num_prompts = p.get_int("--num-prompts", o.num_prompts);
  o.threads = p.get_non_negative_int("--threads", 0);
  o.seed = static_cast<uint64_t>(p.get_int("--seed", 0));
  o.margin = p.get_double("--margin", o.margin);
  o.json = p.get_flag("--json");
  if (o.prompt_len <= 0 || o.num_prompts <= 0) {
    throw InputError("--prompt-len and --num-prompts must be positive");
  }
  return o;
}

void print_report(const QualityOptions& o, const QuantQualityReport& r) {
  const char* quant = o.quantization ? cpu::quantization_type_name(*o.quantization) : nullptr;
  if (o.json) {
    nlohmann::ordered_json j;
    j["model"] = o.model;
    j["quantization"] = quant ? nlohmann::ordered_json(quant) : nlohmann::ordered_json();
    j["cpu_matmul_precision"] = matmul_precision_name(o.precision);
    j["num_prompts"] = o.num_prompts;
    j["prompt_len"] = o.prompt_len;
    j["seed"] = o.seed;
    j["positions"] = r.positions;
    j["top1_agreement"] = r.agreement();
    j["margin"] = o.margin;
    j["confident_positions"] = r.confident_positions;
    j["confident_top1_agreement"] = r.confident_agreement();
    j["mean_kl"] = r.mean_kl();
    j["max_kl"] = r.kl_max;
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::printf("model: %s\nquantization: %s\ncpu_matmul_precision: %s\n", o.model.c_str(),
              quant ? quant : "none", matmul_precision_name(o.precision));
  std::printf("prompts: %d x %d tokens (seed %llu)\n", o.num_prompts, o.prompt_len,
              static_cast<unsigned long long>(o.seed));
  std::printf("positions: %lld\n", static_cast<long long>(r.positions));
  std::printf("top1_agreement: %.4f\n", r.agreement());
  std::printf("confident_positions (margin > %.3g): %lld\n", o.margin,
              static_cast<long long>(r.confident_positions));
  std::printf("confident_top1_agreement: %.4f\n", r.confident_agreement());
  std::printf("mean_kl: %.6g\nmax_kl: %.6g\n", r.mean_kl(), r.kl_max);
}

}  // namespace

int run_quality_command(const std::vector<std::string>& args) {
  QualityOptions o;
  try {
    bool help = false;
    o = parse_quality_options(args, &help);
    if (help) {
      std::fputs(kUsage, stdout);
      return 0;
    }
  } catch (const InputError& e) {
    std::fprintf(stderr, "bench quality: %s\n%s", e.what(), kUsage);
    return 2;
  }
  try {
    auto pool = std::make_shared<ThreadPool>(static_cast<size_t>(o.threads));
    ModelWeights weights = load_model_weights(o.model);
    if (weights.config.raw.contains("quantization_config")) {
      throw InputError(o.model + ": already quantized; compare an unquantized checkpoint");
    }
    Gemma4ModelOptions candidate_options;
    candidate_options.matmul_precision = o.precision;
    if (o.precision == cpu::MatmulPrecision::kBF16 && !o.quantization) {
      const Bf16ActivationCoverage c = bf16_activation_coverage(weights);
      if (!c.unavailable_reason.empty()) {
        throw InputError("--cpu-matmul-precision bf16 cannot apply: " + c.unavailable_reason);
      }
    }
    std::unique_ptr<Gemma4Model> candidate;
    if (o.quantization) {
      WeightLoadOptions opts;
      opts.quantization = *o.quantization;
      opts.pool = pool.get();
      candidate = std::make_unique<Gemma4Model>(load_model_weights(o.model, nullptr, opts), pool,
                                                candidate_options);
    } else {
      // The same mapped weights: only the activations differ.
      candidate = std::make_unique<Gemma4Model>(weights, pool, candidate_options);
    }
    Gemma4Model reference(std::move(weights), pool);
    const auto prompts =
        random_prompts(reference.vocab_size(), o.num_prompts, o.prompt_len, o.seed);
    print_report(o,
                 compare_quantized(reference, *candidate, prompts, static_cast<float>(o.margin)));
    return 0;
  } catch (const InputError& e) {
    std::fprintf(stderr, "bench quality: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench quality: %s\n", e.what());
    return 1;
  }
}

namespace {

constexpr const char* kKernelUsage =
    "usage: gemmaserve bench quant-kernel [--type q8_0|q4_0|q4_k] [--k K] [--n N] [--t T]\n"
    "                                     [--iters I] [--threads N]\n"
    "                                     [--isa portable|avx2|avxvnni|avx512-vnni]\n"
    "                                     [--layout rows|interleaved] [--copies C]\n"
    "                                     [--ahead cpu|BYTES,...]\n"
    "Times Y[T, N] = X[T, K] W[N, K]^T on random quantized weights (default q4_0, K 2560,\n"
    "N 10240, T 1, best ISA, the layout a model load would choose: interleaved for q8_0,\n"
    "q4_0 and q4_k on every SIMD path): prints ms per call, GB/s of weights\n"
    "and int8 GOPS (2TNK). --copies C cycles through C copies of W, so matrices smaller\n"
    "than the caches stream from memory as they do in a model's decode. --ahead times each\n"
    "listed distance at which one-row interleaved products request their weight lines (cpu:\n"
    "this CPU's choice; 0: the whole next 16-row group; else bytes), one sweep of the copies\n"
    "each in turn, and prints the median of each: alternating in one process, so a shared\n"
    "machine's drift between runs does not decide the comparison. Other kernels ignore the\n"
    "distance.\n";

// "cpu" -> -1, else a byte count >= 0 (parse_int_list's integers).
std::vector<int64_t> parse_ahead_list(const std::string& text) {
  std::vector<int64_t> out;
  for (size_t start = 0; start <= text.size();) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    const int v = item == "cpu" ? -1 : parse_int_list(item, "--ahead").front();
    if (v < 0 && item != "cpu") throw InputError("--ahead: " + item + " bytes is negative");
    out.push_back(v);
    start = comma + 1;
  }
  return out;
}

}  // namespace

int run_quant_kernel_bench_command(const std::vector<std::string>& args) {
  ArgParser p;
  p.value("--type").value("--k").value("--n").value("--t").value("--iters").value("--threads");
  p.value("--isa").value("--layout").value("--copies").value("--ahead").flag("--help", {"-h"});
  DType type = DType::kQ4_0;
  int k = 2560, n = 10240, t = 1, iters = 0, threads = 0, copies = 1;
  cpu::QuantIsa isa = cpu::quant_best_isa();
  std::optional<WeightLayout> layout;
  std::vector<int64_t> aheads;
  try {
    p.parse(args, 0);
    if (p.get_flag("--help")) {
      std::fputs(kKernelUsage, stdout);
      return 0;
    }
    if (auto v = p.get("--type")) type = cpu::parse_quantization_type(*v, "--type");
    k = p.get_int("--k", k);
    n = p.get_int("--n", n);
    t = p.get_int("--t", t);
    iters = p.get_int("--iters", 0);
    threads = p.get_non_negative_int("--threads", 0);
    copies = p.get_int("--copies", 1);
    if (copies <= 0) throw InputError("--copies must be positive");
    if (auto v = p.get("--ahead")) aheads = parse_ahead_list(*v);
    if (k <= 0 || n <= 0 || t <= 0 || k % dtype_block_elems(type) != 0) {
      throw InputError("--k, --n, --t must be positive and K a multiple of the block size");
    }
    if (auto v = p.get("--isa")) {
      bool known = false;
      for (auto i : {cpu::QuantIsa::kPortable, cpu::QuantIsa::kAvx2, cpu::QuantIsa::kAvxVnni,
                     cpu::QuantIsa::kAvx512Vnni}) {
        if (*v == cpu::quant_isa_name(i)) {
          isa = i;
          known = true;
        }
      }
      if (!known) throw InputError("--isa: unknown path '" + *v + "'");
      if (!cpu::quant_isa_supported(isa)) throw InputError("--isa: not supported by this CPU");
    }
    if (auto v = p.get("--layout")) {
      if (*v != "rows" && *v != "interleaved") {
        throw InputError("--layout: unknown layout '" + *v + "' (expected rows or interleaved)");
      }
      layout = *v == "rows" ? WeightLayout::kRows : WeightLayout::kInterleaved16;
      if (layout == WeightLayout::kInterleaved16 && !cpu::interleave_supported(type, n, k)) {
        throw InputError(
            "--layout interleaved: needs N a multiple of 16 and K a multiple of 32 (256 for "
            "q4_k)");
      }
    }
  } catch (const InputError& e) {
    std::fprintf(stderr, "bench quant-kernel: %s\n%s", e.what(), kKernelUsage);
    return 2;
  }
  ThreadPool pool(static_cast<size_t>(threads), /*pin=*/true);
  const size_t row_bytes = dtype_row_bytes(type, k);
  std::vector<std::byte> w(row_bytes * static_cast<size_t>(n));
  {
    std::mt19937 rng(1);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> row(static_cast<size_t>(k));
    for (int r = 0; r < n; ++r) {
      for (float& v : row) v = dist(rng);
      cpu::quantize_row(type, row.data(), w.data() + r * row_bytes, k);
    }
  }
  if (!layout) {
    const bool interleave =
        cpu::interleave_supported(type, n, k) && isa != cpu::QuantIsa::kPortable;
    layout = interleave ? WeightLayout::kInterleaved16 : WeightLayout::kRows;
  }
  if (*layout == WeightLayout::kInterleaved16) {
    std::vector<std::byte> rows = std::move(w);
    w.assign(rows.size(), std::byte{0});
    cpu::interleave_rows(type, rows.data(), w.data(), n, k, &pool);
  }
  // The copies live on huge pages, as a loaded model's regrouped weights do.
  const size_t matrix_bytes = w.size();
  std::shared_ptr<std::byte> copies_buf =
      allocate_huge_page_buffer(matrix_bytes * static_cast<size_t>(copies));
  for (int c = 0; c < copies; ++c) {
    std::copy(w.begin(), w.end(), copies_buf.get() + static_cast<size_t>(c) * matrix_bytes);
  }
  std::vector<float> x(static_cast<size_t>(t) * k, 0.5f), y(static_cast<size_t>(t) * n);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 17) - 8.0f;
  cpu::MatmulArgs a;
  a.x = x.data();
  a.ldx = static_cast<size_t>(k);
  a.w = copies_buf.get();
  a.w_dtype = type;
  a.w_layout = *layout;
  a.y = y.data();
  a.ldy = static_cast<size_t>(n);
  a.t = t;
  a.k = k;
  a.n = n;
  const auto call = [&](int i) {
    a.w = copies_buf.get() + static_cast<size_t>(i % copies) * matrix_bytes;
    cpu::quant_matmul_isa(a, &pool, isa);
  };
  for (int c = 0; c < copies; ++c) call(c);  // warm-up
  // About a second of work unless --iters says otherwise.
  if (iters <= 0) {
    const auto s = std::chrono::steady_clock::now();
    for (int c = 0; c < copies; ++c) call(c);
    const double once = std::chrono::duration<double>(std::chrono::steady_clock::now() - s).count();
    iters = std::max(3, static_cast<int>(copies / std::max(once, 1e-6)));
  }
  const char* layout_name = *layout == WeightLayout::kRows ? "rows" : "interleaved";
  if (!aheads.empty()) {
    // Rounds of one sweep per distance, at least 5, about iters calls per distance in all.
    const int rounds = std::max(5, iters / copies);
    std::vector<std::vector<double>> per_call(aheads.size());
    for (int r = 0; r < rounds; ++r) {
      for (size_t d = 0; d < aheads.size(); ++d) {
        a.prefetch_ahead = aheads[d];
        const auto s = std::chrono::steady_clock::now();
        for (int c = 0; c < copies; ++c) call(c);
        per_call[d].push_back(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - s).count() / copies);
      }
    }
    for (size_t d = 0; d < aheads.size(); ++d) {
      const double secs = median(per_call[d]);
      const std::string name = aheads[d] < 0 ? "cpu" : std::to_string(aheads[d]);
      std::printf(
          "type %s isa %s layout %s threads %zu T %d N %d K %d ahead %s: %.3f ms/call, %.1f GB/s "
          "weights (median of %d sweeps, alternating)\n",
          cpu::quantization_type_name(type), cpu::quant_isa_name(isa), layout_name, pool.size(), t,
          n, k, name.c_str(), secs * 1e3, static_cast<double>(matrix_bytes) / secs / 1e9, rounds);
    }
    return 0;
  }
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) call(i);
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iters;
  std::printf(
      "type %s isa %s layout %s threads %zu T %d N %d K %d: %.3f ms/call, %.1f GB/s weights, "
      "%.1f GOPS\n",
      cpu::quantization_type_name(type), cpu::quant_isa_name(isa), layout_name, pool.size(), t, n,
      k, secs * 1e3, static_cast<double>(matrix_bytes) / secs / 1e9,
      2.0 * t * n * static_cast<double>(k) / secs / 1e9);
  return 0;
}

}  // namespace gemmaserve
