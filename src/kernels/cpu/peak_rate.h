// The CPU's arithmetic peak, measured: independent chains of one instruction kind per thread,
// so prefill rates can be stated as a fraction of what the cores (or SMT siblings) deliver.
#pragma once

#include "core/thread_pool.h"

namespace gemmaserve::cpu {

struct PeakRates {
  double f32_fma_flops = 0;   // 16-lane f32 FMA (2 flops per lane); AVX2 rate on AVX2-only CPUs
  double bf16_dot_flops = 0;  // vdpbf16ps (32 products + 32 sums); 0 without AVX512_BF16
  // The quantized kernels' instruction at this process's level (quant_best_isa): 512-bit
  // vpdpbusd (64 products + 64 sums), 256-bit vpdpbusd (AVX-VNNI) or vpmaddubsw + vpaddw (AVX2;
  // 32 + 32 each); 0 at the portable level.
  double int8_dot_ops = 0;
};

// Runs each kind for about `seconds` on every thread of `pool` at once; best of `passes`.
PeakRates measure_peak_rates(ThreadPool& pool, double seconds = 0.05, int passes = 3);

}  // namespace gemmaserve::cpu
