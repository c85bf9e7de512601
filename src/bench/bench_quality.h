// `gemmaserve bench quality MODEL --quantization TYPE | --cpu-matmul-precision bf16`:
// teacher-forced comparison of the quantized model and/or bf16 activations against the float
// model with f32 activations (top-1 agreement, KL divergence); and
// `gemmaserve bench quant-kernel`, the quantized matmul's speed on one shape.
#pragma once

#include <string>
#include <vector>

namespace gemmaserve {

// args exclude "bench quality". Exit codes: 0 done, 1 failure, 2 bad input.
int run_quality_command(const std::vector<std::string>& args);

// `gemmaserve bench quant-kernel`: times quant_matmul on random weights of one shape
// (GB/s of weights streamed, int8 GOPS). args exclude "bench quant-kernel".
int run_quant_kernel_bench_command(const std::vector<std::string>& args);

}  // namespace gemmaserve
