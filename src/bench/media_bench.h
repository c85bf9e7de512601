// What bench audio and bench video share: the CPU line, progress lines, their common flags and
// the engine settings under which every run encodes, the preset model they write, a request
// run alone, and decode streams' inter-token gaps around a media request arriving beside them.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench/request_watch.h"
#include "cli/arg_parser.h"
#include "engine/engine.h"

namespace gemmaserve {

// /proc/cpuinfo's first "model name" and its family and model numbers (a VM's name may be just
// "AMD EPYC": the numbers tell the generation), e.g. "AMD EPYC (family 26, model 2)".
std::string cpu_kind();

// "CPU <cpu_kind>, N thread(s)" (the engine's --threads, else every core).
void print_cpu_line(const EngineArgs& engine);

// printf to stdout, flushed: progress, each line as its phase ends.
template <typename... Values>
void print_line(const char* format, Values... values) {
  std::printf(format, values...);
  std::fflush(stdout);
}

// The flags bench audio and bench video share: --model DIR | --preset NAME, --runs N,
// --streams N, --tokens-before N, --help and the engine's.
void add_media_bench_flags(ArgParser& p);

struct MediaBenchOptions {
  std::string model;   // empty: write `preset`
  std::string preset;  // e2b unless given
  int runs = 0;
  int streams = 1;
  int tokens_before = 16;
  EngineArgs engine;
};

// The shared flags of `bench` (for messages: "bench audio"), --runs defaulting to `runs`. A
// preset must have `tower_key` in its config ("audio_config"), else InputError "--preset NAME:
// no <what>". The engine runs in this process (InputError for tensor or data parallelism) with
// every run encoding: prefix caching and the encoder cache off; --max-model-len 4096 and a
// 1 GiB KV cache unless given.
MediaBenchOptions media_bench_options(const ArgParser& p, int runs, const std::string& tower_key,
                                      const std::string& what, const std::string& bench);

// The engine over --model, or over --preset written (make-test-model --dtype bf16 --seed 0) to
// a temporary folder `temp` then holds; logging at warnings from here on. `bench`: "bench audio".
std::unique_ptr<Engine> load_bench_engine(MediaBenchOptions& o, std::optional<TempModelDir>* temp,
                                          const std::string& bench);

// One request alone, run to its first token (it must ask for max_tokens 1).
struct AloneRun {
  double encoder_seconds = 0;  // the engine's count: preprocessing and the tower
  std::uint64_t encoder_steps = 0;
  double ttft = 0;
};
// std::runtime_error naming `bench` unless the engine encoded `media_items` items meanwhile.
AloneRun run_alone(Engine& engine, EngineRequest request, std::uint64_t media_items,
                   const std::string& bench);

// Decode streams' inter-token gaps around one request arriving beside them.
struct ArrivalGaps {
  std::vector<double> before;             // gaps that ended before the arrival
  std::vector<double> during;             // gaps overlapping the arrival .. its first token
  std::vector<double> stream0_during;     // stream 0's gaps during, in order
  int stream_tokens_during = 0;           // stream tokens between the arrival and its first token
  double ttft = 0;                        // the arrival to the request's first token
  EngineStats stats_before, stats_after;  // the engine's counters at the arrival and first token
};

// Starts `streams` greedy decode streams (8-token prompts) and, once each has `tokens_before`
// tokens, calls `submit` with the arriving request's callback: it adds one request that ends at
// its first token (max_tokens 1), after whatever loading it does (that time counts as waiting).
// The streams are aborted once each has one token past that first token.
ArrivalGaps measure_arrival_gaps(Engine& engine, int streams, int tokens_before,
                                 const std::function<void(OutputCallback)>& submit);

// "GAPS <when>: N gaps, median X s, longest Y s" (or "none").
void print_gaps(const std::string& when, const std::vector<double>& gaps);

// " 0.193 6.460 ..." for a progress line.
std::string seconds_list(const std::vector<double>& values);

}  // namespace gemmaserve
