#include "bench/bench_command.h"

#include <iostream>

#include "bench/bench_audio.h"
#include "bench/bench_image.h"
#include "bench/bench_kernels.h"
#include "bench/bench_latency.h"
#include "bench/bench_quality.h"
#include "bench/bench_serve.h"
#include "bench/bench_structured.h"
#include "bench/bench_tokenizer_load.h"
#include "bench/bench_video.h"
#include "core/error.h"

namespace gemmaserve {

// Each benchmark is src/bench/bench_<mode>.cpp, except: throughput shares bench_latency.cpp, membw,
// peak and matmul are bench_kernels.cpp, quant-kernel shares bench_quality.cpp.
int run_bench_command(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::cout << bench_usage();
    return args.empty() ? 2 : 0;
  }
  const std::string mode = args[0];
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (mode == "serve") return run_bench_serve_command(rest);
  if (mode == "quality") return run_quality_command(rest);
  if (mode == "quant-kernel") return run_quant_kernel_bench_command(rest);
  if (mode == "membw") return run_bench_membw(rest);
  if (mode == "matmul") return run_bench_matmul(rest);
  if (mode == "peak") return run_bench_peak(rest);
  if (mode == "attention") return run_bench_attention(rest);
  if (mode == "tokenizer-load") return run_bench_tokenizer_load(rest);
  if (mode == "structured") return run_bench_structured(rest);
  if (mode == "image") return run_bench_image(rest);
  if (mode == "audio") return run_bench_audio(rest);
  if (mode == "video") return run_bench_video(rest);
  if (mode != "throughput" && mode != "latency") {
    throw InputError("bench: unknown benchmark '" + mode +
                     "' (expected throughput, latency, serve, membw, peak, matmul, attention, "
                     "tokenizer-load, structured, image, audio, video, quality or quant-kernel)");
  }
  return run_bench_throughput_latency(mode, rest);
}

}  // namespace gemmaserve
