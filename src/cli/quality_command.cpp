#include "cli/quality_command.h"

#include <chrono>
#include <cstdio>
#include <memory>
#include <random>

#include "cli/arg_parser.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/cpu/quant.h"
#include "kernels/cpu/quant_matmul.h"
#include "model/gemma4_model.h"
#include "model/quantize_quality.h"
#include "model/weights.h"

namespace gemmaserve {
namespace {

constexpr const char* kUsage =
    "usage: gemmaserve bench quality MODEL_DIR --quantization q8_0|q4_0|q4_k\n"
    "                                [--prompt-len N] [--num-prompts M] [--seed S]\n"
    "                                [--threads N] [--margin F]\n"
    "Teacher-forced comparison of MODEL_DIR quantized at load against its float weights on M\n"
    "random prompts of N tokens (default 4 x 128): top-1 agreement at every position and at\n"
    "positions whose float top-1 logit beats the runner-up by more than F (default 0.1), and\n"
    "the mean KL divergence KL(float || quantized) in nats.\n";

}  // namespace

int run_quality_command(const std::vector<std::string>& args) {
  ArgParser p;
  p.value("--quantization", {"-q"}).value("--prompt-len").value("--num-prompts").value("--seed");
  p.value("--threads").value("--margin").flag("--help", {"-h"});
  std::string model;
  DType type = DType::kQ8_0;
  int prompt_len = 128, num_prompts = 4, threads = 0;
  uint64_t seed = 0;
  double margin = 0.1;
  try {
    p.parse(args, 1);
    if (p.get_flag("--help")) {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (p.positionals().size() != 1) throw InputError("expected MODEL_DIR");
    model = p.positionals()[0];
    const auto q = p.get("--quantization");
    if (!q) throw InputError("--quantization is required (q8_0, q4_0 or q4_k)");
    type = cpu::parse_quantization_type(*q, "--quantization");
    prompt_len = p.get_int("--prompt-len", prompt_len);
    num_prompts = p.get_int("--num-prompts", num_prompts);
    threads = p.get_int("--threads", 0);
    seed = static_cast<uint64_t>(p.get_int("--seed", 0));
    margin = p.get_double("--margin", margin);
    if (prompt_len <= 0 || num_prompts <= 0) {
      throw InputError("--prompt-len and --num-prompts must be positive");
    }
  } catch (const InputError& e) {
    std::fprintf(stderr, "bench quality: %s\n%s", e.what(), kUsage);
    return 2;
  }
  try {
    auto pool = std::make_shared<ThreadPool>(static_cast<size_t>(threads));
    Gemma4Model reference(load_model_weights(model), pool);
    if (reference.config().raw.contains("quantization_config")) {
      throw InputError(model + ": already quantized; compare an unquantized checkpoint");
    }
    WeightLoadOptions opts;
    opts.quantization = type;
    opts.pool = pool.get();
    Gemma4Model quantized(load_model_weights(model, nullptr, opts), pool);
    const auto prompts = random_prompts(reference.vocab_size(), num_prompts, prompt_len, seed);
    const QuantQualityReport r =
        compare_quantized(reference, quantized, prompts, static_cast<float>(margin));
    std::printf("model: %s\nquantization: %s\nprompts: %d x %d tokens (seed %llu)\n", model.c_str(),
                cpu::quantization_type_name(type), num_prompts, prompt_len,
                static_cast<unsigned long long>(seed));
    std::printf("positions: %lld\n", static_cast<long long>(r.positions));
    std::printf("top1_agreement: %.4f\n", r.agreement());
    std::printf("confident_positions (margin > %.3g): %lld\n", margin,
                static_cast<long long>(r.confident_positions));
    std::printf("confident_top1_agreement: %.4f\n", r.confident_agreement());
    std::printf("mean_kl: %.6g\nmax_kl: %.6g\n", r.mean_kl(), r.kl_max);
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
    "                                     [--isa portable|avx2|avx512-vnni]\n"
    "Times Y[T, N] = X[T, K] W[N, K]^T on random quantized weights (default q4_0, K 2560,\n"
    "N 10240, T 1, best ISA): prints ms per call, GB/s of weights and int8 GOPS (2TNK).\n";

}  // namespace

int run_quant_kernel_bench_command(const std::vector<std::string>& args) {
  ArgParser p;
  p.value("--type").value("--k").value("--n").value("--t").value("--iters").value("--threads");
  p.value("--isa").flag("--help", {"-h"});
  DType type = DType::kQ4_0;
  int k = 2560, n = 10240, t = 1, iters = 0, threads = 0;
  cpu::QuantIsa isa = cpu::quant_best_isa();
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
    threads = p.get_int("--threads", 0);
    if (k <= 0 || n <= 0 || t <= 0 || k % dtype_block_elems(type) != 0) {
      throw InputError("--k, --n, --t must be positive and K a multiple of the block size");
    }
    if (auto v = p.get("--isa")) {
      bool known = false;
      for (auto i : {cpu::QuantIsa::kPortable, cpu::QuantIsa::kAvx2, cpu::QuantIsa::kAvx512Vnni}) {
        if (*v == cpu::quant_isa_name(i)) {
          isa = i;
          known = true;
        }
      }
      if (!known) throw InputError("--isa: unknown path '" + *v + "'");
      if (!cpu::quant_isa_supported(isa)) throw InputError("--isa: not supported by this CPU");
    }
  } catch (const InputError& e) {
    std::fprintf(stderr, "bench quant-kernel: %s\n%s", e.what(), kKernelUsage);
    return 2;
  }
  ThreadPool pool(static_cast<size_t>(threads));
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
  std::vector<float> x(static_cast<size_t>(t) * k, 0.5f), y(static_cast<size_t>(t) * n);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 17) - 8.0f;
  cpu::MatmulArgs a;
  a.x = x.data();
  a.ldx = static_cast<size_t>(k);
  a.w = w.data();
  a.w_dtype = type;
  a.y = y.data();
  a.ldy = static_cast<size_t>(n);
  a.t = t;
  a.k = k;
  a.n = n;
  cpu::quant_matmul_isa(a, &pool, isa);  // warm-up
  // About a second of work unless --iters says otherwise.
  if (iters <= 0) {
    const auto s = std::chrono::steady_clock::now();
    cpu::quant_matmul_isa(a, &pool, isa);
    const double once = std::chrono::duration<double>(std::chrono::steady_clock::now() - s).count();
    iters = std::max(3, static_cast<int>(1.0 / std::max(once, 1e-6)));
  }
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) cpu::quant_matmul_isa(a, &pool, isa);
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iters;
  std::printf(
      "type %s isa %s threads %zu T %d N %d K %d: %.3f ms/call, %.1f GB/s weights, "
      "%.1f GOPS\n",
      cpu::quantization_type_name(type), cpu::quant_isa_name(isa), pool.size(), t, n, k, secs * 1e3,
      static_cast<double>(w.size()) / secs / 1e9,
      2.0 * t * n * static_cast<double>(k) / secs / 1e9);
  return 0;
}

}  // namespace gemmaserve
