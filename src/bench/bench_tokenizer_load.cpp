// `gemmaserve bench tokenizer-load`: the time to load a tokenizer.json, the way serve loads it
// against a whole-file nlohmann parse (the path every load took before the table scanner).
#include "bench/bench_tokenizer_load.h"

#include <time.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>

#include "bench/bench_kernels.h"
#include "cli/arg_parser.h"
#include "core/error.h"
#include "io/json_file.h"
#include "tokenizer/tokenizer.h"

namespace gemmaserve {
namespace {

const char* kTokenizerLoadUsage =
    "usage: gemmaserve bench tokenizer-load TOKENIZER_JSON [--runs N (5)] [--json]\n"
    "Loads TOKENIZER_JSON N times each way, alternating: as serve does (Tokenizer::from_path)\n"
    "and through a whole-file nlohmann parse (the earlier path). Prints the medians of the wall\n"
    "and the process CPU seconds per load and the ratio of the two ways (the file is read from\n"
    "the page cache after the first load).\n";

double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

struct Timing {
  std::vector<double> wall;
  std::vector<double> cpu;
};

// Times one load; the tokenizer is destroyed inside the timing, as a process exit would not.
void time_load(const std::function<Tokenizer()>& load, Timing& into, size_t& vocab) {
  const auto wall_start = std::chrono::steady_clock::now();
  const double cpu_start = cpu_seconds();
  vocab = load().vocab_size();
  into.cpu.push_back(cpu_seconds() - cpu_start);
  into.wall.push_back(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count());
}

}  // namespace

int run_bench_tokenizer_load(const std::vector<std::string>& args) {
  ArgParser p;
  p.value("--runs").flag("--json").flag("--help", {"-h"});
  p.parse(args, 1);
  if (p.get_flag("--help")) {
    std::cout << kTokenizerLoadUsage;
    return 0;
  }
  if (p.positionals().empty()) {
    throw InputError("bench tokenizer-load needs TOKENIZER_JSON\n" +
                     std::string(kTokenizerLoadUsage));
  }
  const std::filesystem::path path = p.positionals()[0];
  const int runs = p.get_positive_int("--runs", 5);
  Timing scan;
  Timing dom;
  size_t vocab = 0;
  for (int i = 0; i < runs; ++i) {
    time_load([&] { return Tokenizer::from_path(path); }, scan, vocab);
    time_load([&] { return Tokenizer::from_json(read_json_file(path), nullptr, path.string()); },
              dom, vocab);
  }
  const double scan_cpu = median(scan.cpu), dom_cpu = median(dom.cpu);
  const double scan_wall = median(scan.wall), dom_wall = median(dom.wall);
  if (p.get_flag("--json")) {
    std::cout << nlohmann::json{{"tokenizer", path.string()},
                                {"vocab_size", vocab},
                                {"runs", runs},
                                {"load_cpu_s", scan_cpu},
                                {"load_wall_s", scan_wall},
                                {"nlohmann_cpu_s", dom_cpu},
                                {"nlohmann_wall_s", dom_wall},
                                {"cpu_ratio", dom_cpu / scan_cpu}}
                     .dump(2)
              << "\n";
  } else {
    std::printf("%s: %zu tokens, median of %d loads each\n", path.string().c_str(), vocab, runs);
    std::printf("  load (as serve):       %7.1f ms CPU  %7.1f ms wall\n", scan_cpu * 1e3,
                scan_wall * 1e3);
    std::printf("  whole-file nlohmann:   %7.1f ms CPU  %7.1f ms wall\n", dom_cpu * 1e3,
                dom_wall * 1e3);
    std::printf("  ratio (CPU):           %7.2fx\n", dom_cpu / scan_cpu);
  }
  return 0;
}

}  // namespace gemmaserve
