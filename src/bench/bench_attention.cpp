// `gemmaserve bench attention`: decode attention over a paged K/V store shaped like a model's,
// timed against a plain read of the same rows (the memory limit of the same pass).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <vector>

#include "bench/bench_kernels.h"
#include "cli/arg_parser.h"
#include "core/error.h"
#include "core/huge_pages.h"
#include "core/thread_pool.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/kv_format.h"

namespace gemmaserve {
namespace {

using Clock = std::chrono::steady_clock;

const char* kAttentionUsage =
    "usage: gemmaserve bench attention [--head-dim D (256)] [--heads H (8)] [--kv-heads K (1)]\n"
    "                                  [--context N (576)] [--window W (512; 0 = none)]\n"
    "                                  [--seqs S (8)] [--layers L (35)] [--block-size B (16)]\n"
    "                                  [--kv-cache-dtype bf16|f16|f32|fp8|q8_0 (bf16)] [--threads "
    "N]\n"
    "                                  [--iters I (10)] [--json]\n"
    "One decode step's attention: S sequences, each with one query at position N - 1 over its\n"
    "last min(N, W) keys, in L layers of their own K/V (blocks of B slots scattered over a pool\n"
    "on huge pages, as the engine's cache), so a pass streams the rows from memory as decode does\n"
    "once L x S x N rows outgrow the caches. Prints the median pass, the GB/s of K and V it\n"
    "reads and, as the limit, the GB/s of a plain read of the same rows in the same order.\n";

}  // namespace

int run_bench_attention(const std::vector<std::string>& args) {
  ArgParser p;
  p.value("--head-dim").value("--heads").value("--kv-heads").value("--context").value("--window");
  p.value("--seqs")
      .value("--layers")
      .value("--block-size")
      .value("--kv-cache-dtype")
      .value("--threads");
  p.value("--iters").flag("--json").flag("--help", {"-h"});
  p.parse(args, 0);
  if (p.get_flag("--help")) {
    std::cout << kAttentionUsage;
    return 0;
  }
  const int head_dim = p.get_positive_int("--head-dim", 256);
  const int heads = p.get_positive_int("--heads", 8);
  const int kv_heads = p.get_positive_int("--kv-heads", 1);
  if (heads % kv_heads != 0) {
    throw InputError("--heads (" + std::to_string(heads) + ") must be a multiple of --kv-heads (" +
                     std::to_string(kv_heads) + ")");
  }
  const int context = p.get_positive_int("--context", 576);
  const int window = p.get_non_negative_int("--window", 512);
  const int seqs = p.get_positive_int("--seqs", 8);
  const int layers = p.get_positive_int("--layers", 35);
  const int block_size = p.get_positive_int("--block-size", 16);
  const int iters = p.get_positive_int("--iters", 10);
  const int threads = p.get_non_negative_int("--threads", 0);
  const cpu::KvDtype dtype =
      cpu::parse_kv_dtype(p.get("--kv-cache-dtype").value_or("bf16"), DType::kBF16);

  const size_t slot_bytes = static_cast<size_t>(kv_heads) * cpu::kv_row_bytes(dtype, head_dim);
  const int blocks_per_seq = (context + block_size - 1) / block_size;
  const int64_t pool_blocks = int64_t{blocks_per_seq} * seqs;
  const size_t store_bytes = static_cast<size_t>(pool_blocks) * block_size * slot_bytes;
  // Per layer: K store, then V store; every slot holds finite values of the chosen dtype.
  std::shared_ptr<std::byte> arena = allocate_huge_page_buffer(2 * store_bytes * layers);
  auto* base = reinterpret_cast<uint8_t*>(arena.get());
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> values(static_cast<size_t>(head_dim) * 64);
  for (float& v : values) v = uniform(rng);
  const size_t rows = 2 * static_cast<size_t>(layers) * pool_blocks * block_size * kv_heads;
  const size_t row_bytes = cpu::kv_row_bytes(dtype, head_dim);
  for (size_t r = 0; r < rows; ++r) {
    cpu::encode_kv_row(dtype, values.data() + (r % 64) * head_dim, head_dim, base + r * row_bytes);
  }
  // Each sequence's blocks scattered over the pool, as a long-running server's free queue
  // hands them out.
  std::vector<int32_t> order(static_cast<size_t>(pool_blocks));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<std::vector<int32_t>> tables(static_cast<size_t>(seqs));
  std::vector<cpu::AttentionSeq> batch(static_cast<size_t>(seqs));
  for (int s = 0; s < seqs; ++s) {
    tables[s].assign(order.begin() + int64_t{s} * blocks_per_seq,
                     order.begin() + int64_t{s + 1} * blocks_per_seq);
    batch[s].q_row = s;
    batch[s].num_queries = 1;
    batch[s].first_pos = context - 1;
    batch[s].block_table = tables[s];
  }
  std::vector<float> q(static_cast<size_t>(seqs) * heads * head_dim);
  for (float& v : q) v = uniform(rng);
  std::vector<float> out(q.size());
  cpu::AttentionShape shape{heads, kv_heads, head_dim, window, 1.0f};
  auto layer_kv = [&](int l) {
    cpu::PagedKv kv;
    kv.k = base + 2 * store_bytes * l;
    kv.v = base + 2 * store_bytes * l + store_bytes;
    kv.block_size = block_size;
    kv.slot_bytes = static_cast<int64_t>(slot_bytes);
    kv.num_blocks = pool_blocks;
    kv.dtype = dtype;
    return kv;
  };
  if (!cpu::attention_blocks_valid(layer_kv(0), shape, batch)) {
    throw InputError("bench attention: block tables out of range");
  }
  ThreadPool pool(static_cast<size_t>(threads), true);
  cpu::AttentionWorkspace workspace;
  const int keys = window > 0 ? std::min(context, window) : context;
  const int first_block = (context - keys) / block_size;
  std::atomic<uint64_t> checksum{0};  // keeps the plain read from being optimised away
  // Whole blocks, no requests ahead (past a block's end lie bytes attention never needs).
  const size_t block_words = block_size * slot_bytes / sizeof(uint64_t);
  std::vector<double> attention_times, read_times;
  for (int i = 0; i < iters + 1; ++i) {
    Clock::time_point start = Clock::now();
    for (int l = 0; l < layers; ++l) {
      paged_attention(q.data(), static_cast<size_t>(heads) * head_dim, layer_kv(l), shape, batch,
                      out.data(), static_cast<size_t>(heads) * head_dim, &pool, &workspace);
    }
    const double attention = std::chrono::duration<double>(Clock::now() - start).count();
    start = Clock::now();
    for (int l = 0; l < layers; ++l) {
      const cpu::PagedKv kv = layer_kv(l);
      pool.parallel_for(static_cast<size_t>(seqs), [&](size_t b, size_t e) {
        uint64_t sum = 0;
        for (size_t s = b; s < e; ++s) {
          for (int blk = first_block; blk < blocks_per_seq; ++blk) {
            const size_t at = static_cast<size_t>(tables[s][blk]) * block_size * slot_bytes;
            sum +=
                sum_words(reinterpret_cast<const uint64_t*>(static_cast<const uint8_t*>(kv.k) + at),
                          block_words, 0, cpu::LinePrefetch::kNone);
            sum +=
                sum_words(reinterpret_cast<const uint64_t*>(static_cast<const uint8_t*>(kv.v) + at),
                          block_words, 0, cpu::LinePrefetch::kNone);
          }
        }
        checksum.fetch_add(sum, std::memory_order_relaxed);
      });
    }
    const double read = std::chrono::duration<double>(Clock::now() - start).count();
    if (i == 0) continue;  // warm-up: first touches, workspace growth
    attention_times.push_back(attention);
    read_times.push_back(read);
  }
  // Bytes attention needs: the rows of the keys each query sees (whole blocks for the read).
  const double bytes = 2.0 * layers * seqs * keys * static_cast<double>(slot_bytes);
  const double read_bytes =
      2.0 * layers * seqs * (blocks_per_seq - first_block) * block_size * double(slot_bytes);
  const double t_att = median(attention_times), t_read = median(read_times);
  const double att_gbs = bytes / t_att / 1e9, read_gbs = read_bytes / t_read / 1e9;
  const double gflops = 4.0 * layers * seqs * keys * heads * head_dim / t_att / 1e9;
  if (p.get_flag("--json")) {
    std::cout << nlohmann::json{{"head_dim", head_dim},   {"heads", heads},
                                {"kv_heads", kv_heads},   {"context", context},
                                {"window", window},       {"seqs", seqs},
                                {"layers", layers},       {"kv_dtype", cpu::kv_dtype_name(dtype)},
                                {"threads", pool.size()}, {"median_s", t_att},
                                {"kv_gb_per_s", att_gbs}, {"read_gb_per_s", read_gbs},
                                {"gflop_per_s", gflops},  {"fraction_of_read", att_gbs / read_gbs}}
                     .dump(2)
              << "\n";
  } else {
    std::printf(
        "attention hd %d, %d heads / %d KV, %d keys of %d, %d seqs x %d layers, %s, %zu threads: "
        "%.3f ms per pass, %.1f GB/s of K+V (%.1f GFLOP/s); plain read of the rows %.1f GB/s: "
        "%.1f%%\n",
        head_dim, heads, kv_heads, keys, context, seqs, layers, cpu::kv_dtype_name(dtype),
        pool.size(), t_att * 1e3, att_gbs, gflops, read_gbs, 100.0 * att_gbs / read_gbs);
  }
  return 0;
}

}  // namespace gemmaserve
