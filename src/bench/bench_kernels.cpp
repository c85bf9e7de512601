#include "bench/bench_kernels.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <span>
#include <thread>

#include "cli/arg_parser.h"
#include "core/error.h"
#include "core/huge_pages.h"
#include "core/thread_pool.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/peak_rate.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace gemmaserve {

namespace {

// One 64-byte line per step, every line requested `prefetch_words` ahead as kHow says.
// Explicit 256-bit adds: GCC's 64-byte vector extension spilled its sums to the stack every
// step and read 22 GB/s where a plain loop reads 28-29 (Zen 3, 2 threads).
#if defined(__x86_64__)
template <cpu::LinePrefetch kHow>
__attribute__((target("avx2"))) uint64_t sum_lines_avx2(const uint64_t* p, size_t n,
                                                        size_t prefetch_words, size_t* done) {
  __m256i a = _mm256_setzero_si256(), b = _mm256_setzero_si256();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    cpu::prefetch_line<kHow>(p + i + prefetch_words);
    a = _mm256_add_epi64(a, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
    b = _mm256_add_epi64(b, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 4)));
  }
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), _mm256_add_epi64(a, b));
  *done = i;
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}
#endif

template <cpu::LinePrefetch kHow>
uint64_t sum_lines(const uint64_t* p, size_t n, size_t prefetch_words, size_t* done) {
#if defined(__x86_64__)
  if (cpu::cpu_supports(cpu::CpuIsa::kAvx2))
    return sum_lines_avx2<kHow>(p, n, prefetch_words, done);
#endif
  uint64_t s[4] = {};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    cpu::prefetch_line<kHow>(p + i + prefetch_words);
    for (int j = 0; j < 8; ++j) s[j % 4] += p[i + j];
  }
  *done = i;
  return s[0] + s[1] + s[2] + s[3];
}

}  // namespace

uint64_t sum_words(const uint64_t* p, size_t n, size_t prefetch_words, cpu::LinePrefetch how) {
  size_t i = 0;
  uint64_t s = 0;
  switch (how) {
    case cpu::LinePrefetch::kNone:
      s = sum_lines<cpu::LinePrefetch::kNone>(p, n, prefetch_words, &i);
      break;
    case cpu::LinePrefetch::kL1:
      s = sum_lines<cpu::LinePrefetch::kL1>(p, n, prefetch_words, &i);
      break;
    case cpu::LinePrefetch::kL2:
      s = sum_lines<cpu::LinePrefetch::kL2>(p, n, prefetch_words, &i);
      break;
    case cpu::LinePrefetch::kNonTemporal:
      s = sum_lines<cpu::LinePrefetch::kNonTemporal>(p, n, prefetch_words, &i);
      break;
  }
  for (; i < n; ++i) s += p[i];
  return s;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

uint64_t matrix_bytes(const WeightMatrix& m) {
  return m ? static_cast<uint64_t>(m.rows) * dtype_row_bytes(m.dtype, m.cols) : 0;
}

uint64_t one_row_bytes(const WeightMatrix& m) { return m ? dtype_row_bytes(m.dtype, m.cols) : 0; }

const char* kMembwUsage =
    "usage: gemmaserve bench membw [--threads N (all cores)] [--size-mib M (1024)] [--json]\n"
    "Read-only sum over a buffer of M MiB, best of 5 passes (each reads it four ways: no\n"
    "requests, lines requested 4 KiB ahead into L1, 1 KiB ahead into L2, 8 KiB ahead\n"
    "non-temporally).\n";

const char* kPeakUsage =
    "usage: gemmaserve bench peak [--threads N (all cores)] [--json]\n"
    "Arithmetic peak measured on every thread at once: 16-lane f32 FMA, vdpbf16ps (bf16 dot)\n"
    "and the int8 dot of the quantized kernels at this level (vpdpbusd, 512- or 256-bit, or\n"
    "AVX2's vpmaddubsw + vpaddw), twelve independent chains each, best of 3 (0 = not on this\n"
    "CPU).\n"
    "Two vCPUs that are SMT siblings of one core share one core's units: compare with\n"
    "--threads 1.\n";

const char* kMatmulUsage =
    "usage: gemmaserve bench matmul [--t T (1)] [--k K (1536)] [--n N (6144)] [--dtype "
    "bf16|f16|f32]\n"
    "                              [--threads N] [--isa portable|avx2|avx512] [--iters N (20)]\n"
    "                              [--stream-mib M (512)] [--precision f32|bf16] [--json]\n"
    "Y[T,N] = X[T,K] W[N,K]^T; cycles through enough copies of W (>= M MiB) that every\n"
    "call streams W from memory, as decode does.\n";

}  // namespace

ReadBandwidthProbe::ReadBandwidthProbe(size_t bytes, int threads)
    : words_(std::max<size_t>(bytes / sizeof(uint64_t), 1)),
      buffer_(allocate_huge_page_buffer(words_ * sizeof(uint64_t))),
      pool_(static_cast<size_t>(threads), true),
      sums_(pool_.size()) {
  auto* w = reinterpret_cast<uint64_t*>(buffer_.get());
  for (size_t i = 0; i < words_; ++i) w[i] = i;
}

double ReadBandwidthProbe::measure(int passes) {
  const size_t words = words_;
  const auto* data = reinterpret_cast<const uint64_t*>(buffer_.get());
  // Each pass reads the buffer four ways: no requests (the hardware prefetchers alone), lines
  // requested 4 KiB ahead into L1, 1 KiB ahead into L2 (an Intel Xeon read 39 GB/s this way
  // against 36.5 the second) and 8 KiB ahead non-temporally (as the AMD decode kernels request
  // theirs); the best read counts.
  struct Way {
    size_t prefetch_words;
    cpu::LinePrefetch how;
  };
  constexpr Way kWays[] = {{0, cpu::LinePrefetch::kNone},
                           {512, cpu::LinePrefetch::kL1},
                           {128, cpu::LinePrefetch::kL2},
                           {1024, cpu::LinePrefetch::kNonTemporal}};
  double best = 0.0;
  for (int pass = 0; pass < passes; ++pass) {
    for (const Way& way : kWays) {
      const Clock::time_point start = Clock::now();
      pool_.parallel_for_grain(words, 4096, [&](size_t b, size_t e) {
        sums_[b * pool_.size() / words] += sum_words(data + b, e - b, way.prefetch_words, way.how);
      });
      const double s = seconds_since(start);
      best = std::max(best, static_cast<double>(words * sizeof(uint64_t)) / s);
    }
  }
  uint64_t total = 0;
  for (uint64_t v : sums_) total += v;
  if (total == 1) std::fputs("", stderr);  // keeps the sums observable
  return best;
}

double measure_read_bandwidth(size_t bytes, int threads, int passes) {
  return ReadBandwidthProbe(bytes, threads).measure(passes);
}

uint64_t weight_bytes_per_token(const ModelWeights& w) {
  const TextConfig& c = w.config.text;
  uint64_t bytes = matrix_bytes(w.lm_head) + one_row_bytes(w.embed_tokens);
  bytes += one_row_bytes(w.embed_tokens_per_layer) + matrix_bytes(w.per_layer_model_projection);
  for (const LayerWeights& l : w.layers) {
    for (const WeightMatrix* m :
         {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.gate_proj, &l.up_proj, &l.down_proj,
          &l.per_layer_input_gate, &l.per_layer_projection, &l.router_proj}) {
      bytes += matrix_bytes(*m);
    }
    if (c.num_experts > 0) {
      const uint64_t experts = matrix_bytes(l.experts_gate_up) + matrix_bytes(l.experts_down);
      bytes +=
          experts / static_cast<uint64_t>(c.num_experts) * static_cast<uint64_t>(c.top_k_experts);
    }
  }
  return bytes;
}

double prefill_flops(const ModelWeights& w, int64_t prompt_len, int64_t batch) {
  const TextConfig& c = w.config.text;
  const auto macs = [](const WeightMatrix& m) {
    return m ? static_cast<double>(m.rows) * static_cast<double>(m.cols) : 0.0;
  };
  const double all = static_cast<double>(prompt_len);
  double flops = 2 * macs(w.per_layer_model_projection) * all + 2 * macs(w.lm_head);
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const LayerWeights& lw = w.layers[l];
    const LayerSpec& spec = c.layers[l];
    const double rows = spec.kv_shared() ? 1.0 : all;
    double layer = 0;
    for (const WeightMatrix* m :
         {&lw.q_proj, &lw.k_proj, &lw.v_proj, &lw.o_proj, &lw.gate_proj, &lw.up_proj, &lw.down_proj,
          &lw.per_layer_input_gate, &lw.per_layer_projection, &lw.router_proj}) {
      layer += macs(*m);
    }
    if (c.num_experts > 0) {
      layer += (macs(lw.experts_gate_up) + macs(lw.experts_down)) / c.num_experts * c.top_k_experts;
    }
    flops += 2 * layer * rows;
    // QK and PV: 2 MACs per (query, key, head, dim).
    const bool sliding = spec.type == AttentionType::kSliding && c.sliding_window > 0;
    const int64_t first = spec.kv_shared() ? prompt_len - 1 : 0;
    double keys = 0;
    for (int64_t p = first; p < prompt_len; ++p) {
      keys += static_cast<double>(sliding ? std::min<int64_t>(p + 1, c.sliding_window) : p + 1);
    }
    flops += 4.0 * keys * c.num_attention_heads * spec.head_dim;
  }
  return flops * static_cast<double>(batch);
}

int run_bench_peak(const std::vector<std::string>& args) {
  ArgParser p;
  p.value("--threads").flag("--json").flag("--help", {"-h"});
  p.parse(args, 0);
  if (p.get_flag("--help")) {
    std::cout << kPeakUsage;
    return 0;
  }
  const int threads = p.get_non_negative_int("--threads", 0);
  ThreadPool pool(static_cast<size_t>(threads), true);
  const cpu::PeakRates r = cpu::measure_peak_rates(pool);
  if (p.get_flag("--json")) {
    std::cout << nlohmann::json{{"threads", pool.size()},
                                {"f32_fma_flops", r.f32_fma_flops},
                                {"bf16_dot_flops", r.bf16_dot_flops},
                                {"int8_dot_ops", r.int8_dot_ops}}
                     .dump(2)
              << "\n";
  } else {
    std::printf(
        "Peak (%zu threads, measured): f32 FMA %.1f GFLOP/s, bf16 dot %.1f GFLOP/s, int8 dot "
        "%.1f GOPS\n",
        pool.size(), r.f32_fma_flops / 1e9, r.bf16_dot_flops / 1e9, r.int8_dot_ops / 1e9);
  }
  return 0;
}

int run_bench_membw(const std::vector<std::string>& args) {
  ArgParser p;
  p.value("--threads").value("--size-mib").flag("--json").flag("--help", {"-h"});
  p.parse(args, 0);
  if (p.get_flag("--help")) {
    std::cout << kMembwUsage;
    return 0;
  }
  const int threads = p.get_non_negative_int("--threads", 0);
  const int mib = p.get_positive_int("--size-mib", 1024);
  const size_t resolved = threads == 0 ? std::max(1u, std::thread::hardware_concurrency())
                                       : static_cast<size_t>(threads);
  const double bw =
      measure_read_bandwidth(static_cast<size_t>(mib) << 20, static_cast<int>(resolved));
  if (p.get_flag("--json")) {
    std::cout << nlohmann::json{{"threads", resolved},
                                {"size_mib", mib},
                                {"membw_bytes_per_s", bw},
                                {"membw_gb_per_s", bw / 1e9}}
                     .dump(2)
              << "\n";
  } else {
    std::printf("Read bandwidth: %.2f GB/s (%zu threads, %d MiB, best of 5)\n", bw / 1e9, resolved,
                mib);
  }
  return 0;
}

int run_bench_matmul(const std::vector<std::string>& args) {
  ArgParser p;
  p.value("--t").value("--k").value("--n").value("--dtype").value("--threads").value("--isa");
  p.value("--iters")
      .value("--stream-mib")
      .value("--precision")
      .flag("--json")
      .flag("--help", {"-h"});
  p.parse(args, 0);
  if (p.get_flag("--help")) {
    std::cout << kMatmulUsage;
    return 0;
  }
  const int64_t t = p.get_positive_int("--t", 1), k = p.get_positive_int("--k", 1536),
                n = p.get_positive_int("--n", 6144);
  const int iters = p.get_positive_int("--iters", 20);
  const int threads = p.get_non_negative_int("--threads", 0);
  DType dtype = DType::kBF16;
  const std::string dtype_text = p.get("--dtype").value_or("bf16");
  if (dtype_text == "f32") {
    dtype = DType::kF32;
  } else if (dtype_text == "f16") {
    dtype = DType::kF16;
  } else if (dtype_text != "bf16") {
    throw InputError("--dtype must be bf16, f16 or f32, got " + dtype_text);
  }
  const cpu::CpuIsa isa =
      p.get("--isa") ? cpu::parse_cpu_isa(p.get("--isa")->c_str()) : cpu::cpu_isa();
  const size_t w_bytes = dtype_row_bytes(dtype, k) * static_cast<size_t>(n);
  const size_t stream_bytes = static_cast<size_t>(p.get_positive_int("--stream-mib", 512)) << 20;
  const size_t copies = std::max<size_t>(1, (stream_bytes + w_bytes - 1) / w_bytes);
  // On huge pages, as a model's weights (4 KiB pages cost the Intel Xeon 15-25 % of a stream).
  const size_t halves = (w_bytes * copies + 1) / 2;
  const std::shared_ptr<std::byte> w_buffer = allocate_huge_page_buffer(halves * 2);
  const std::span<uint16_t> w(reinterpret_cast<uint16_t*>(w_buffer.get()), halves);
  std::mt19937 rng(1);
  for (uint16_t& v : w) v = static_cast<uint16_t>(0x3c00 | (rng() & 0x3ff));  // finite in all
  std::vector<float> x(static_cast<size_t>(t * k)), y(static_cast<size_t>(t * n));
  for (float& v : x) v = static_cast<float>(rng() % 1000) / 1000.0f;
  ThreadPool pool(static_cast<size_t>(threads));
  cpu::MatmulArgs a{
      x.data(), static_cast<size_t>(k), w.data(), dtype, y.data(), static_cast<size_t>(n), t, k, n};
  const std::string precision = p.get("--precision").value_or("f32");
  if (precision != "f32" && precision != "bf16") {
    throw InputError("--precision must be f32 or bf16, got " + precision);
  }
  if (precision == "bf16") a.precision = cpu::MatmulPrecision::kBF16;
  std::vector<double> times, cpu_times;
  for (int i = 0; i < iters + 2; ++i) {
    a.w =
        reinterpret_cast<const std::byte*>(w.data()) + (static_cast<size_t>(i) % copies) * w_bytes;
    const Clock::time_point start = Clock::now();
    const std::clock_t cpu_start = std::clock();
    cpu::matmul_with_isa(a, &pool, isa);
    if (i < 2) continue;  // two warm-up calls
    times.push_back(seconds_since(start));
    cpu_times.push_back(static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC);
  }
  std::sort(times.begin(), times.end());
  std::sort(cpu_times.begin(), cpu_times.end());
  const double median = times[times.size() / 2];
  // CPU time per thread: what the product costs when other processes share the cores.
  const double cpu_median = cpu_times[cpu_times.size() / 2] / static_cast<double>(pool.size());
  const double cpu_gflops = 2.0 * static_cast<double>(t * n * k) / cpu_median / 1e9;
  const double gflops = 2.0 * static_cast<double>(t * n * k) / median / 1e9;
  const double gbps = static_cast<double>(w_bytes) / median / 1e9;
  if (p.get_flag("--json")) {
    std::cout << nlohmann::json{{"t", t},
                                {"k", k},
                                {"n", n},
                                {"dtype", dtype_name(dtype)},
                                {"isa", cpu::cpu_isa_name(isa)},
                                {"threads", pool.size()},
                                {"median_s", median},
                                {"gflop_per_s", gflops},
                                {"weight_gb_per_s", gbps},
                                {"precision", precision},
                                {"cpu_time_gflop_per_s", cpu_gflops}}
                     .dump(2)
              << "\n";
  } else {
    std::printf(
        "matmul T=%lld K=%lld N=%lld %s %s %zu threads: %.1f us, %.1f GFLOP/s, %.1f GB/s of W "
        "(%.1f GFLOP/s by CPU time)\n",
        static_cast<long long>(t), static_cast<long long>(k), static_cast<long long>(n),
        dtype_name(dtype), cpu::cpu_isa_name(isa), pool.size(), median * 1e6, gflops, gbps,
        cpu_gflops);
  }
  return 0;
}

}  // namespace gemmaserve
