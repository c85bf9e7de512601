// `gemmaserve bench audio`: audio through the Engine, timed from outside as a client sees it:
// a clip's encode alone, run after run, then decode streams with an audio request arriving
// beside them (their inter-token gaps before and during it).
#include "bench/bench_audio.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <numbers>
#include <optional>
#include <random>
#include <stdexcept>
#include <thread>

#include "bench/bench_kernels.h"
#include "bench/request_watch.h"
#include "cli/arg_parser.h"
#include "cli/config_file.h"
#include "cli/engine_flags.h"
#include "cli/make_test_model_command.h"
#include "core/error.h"
#include "core/logging.h"
#include "engine/engine.h"
#include "model/test_model_presets.h"

namespace gemmaserve {
namespace {

const char* kAudioUsage =
    "usage: gemmaserve bench audio [--model DIR | --preset e2b|e4b (e2b)] [--seconds S (30)]\n"
    "                              [--runs N (5)] [--streams N (1)] [--tokens-before N (16)]\n"
    "                              [engine options]\n"
    "--model DIR: a Gemma 4 checkpoint with an audio tower; without it, random bf16 weights of\n"
    "--preset (make-test-model --seed 0), written to a temporary folder and removed after.\n"
    "The clip is S seconds of synthetic 16 kHz audio (tones and seeded noise; the model hears\n"
    "30 s at most). Prints the CPU, then:\n"
    "  ENCODE: --runs requests of the clip alone (max_tokens 1), each run's encoder seconds and\n"
    "    time to first token, and their medians;\n"
    "  GAPS: --streams greedy decode streams; once each has --tokens-before tokens an audio\n"
    "    request arrives; the streams' inter-token gaps before it and while it is served (its\n"
    "    arrival to its first token): count, median and longest.\n"
    "Prefix caching and the encoder cache are off (every run encodes); --max-model-len defaults\n"
    "to 4096 and the KV cache to 1 GiB.\n";

struct Options {
  std::string model;   // empty: write --preset
  std::string preset;  // e2b
  double seconds = 30;
  int runs = 5;
  int streams = 1;
  int tokens_before = 16;
  EngineArgs engine;
};

// The benchmark's options from the parsed flags.
Options options_from_flags(const ArgParser& p) {
  Options o;
  o.model = p.get("--model").value_or("");
  o.preset = p.get("--preset").value_or("e2b");
  if (!o.model.empty() && p.has("--preset")) {
    throw InputError("--model and --preset: give one (--preset writes a model)");
  }
  if (o.model.empty() && test_model_config(o.preset)["audio_config"].is_null()) {
    throw InputError("--preset " + o.preset + ": no audio tower (e2b and e4b have one)");
  }
  o.seconds = p.get_double("--seconds", o.seconds);
  if (!(o.seconds > 0 && o.seconds <= 30)) {
    throw InputError("--seconds must be in (0, 30] (the model hears 30 s at most), got " +
                     p.get("--seconds").value_or(""));
  }
  o.runs = p.get_positive_int("--runs", o.runs);
  o.streams = p.get_positive_int("--streams", o.streams);
  o.tokens_before = p.get_positive_int("--tokens-before", o.tokens_before);
  o.engine = engine_args_from_flags(p, o.model);
  if (o.engine.tensor_parallel_size != 1 || o.engine.data_parallel_size != 1) {
    throw InputError(
        "bench audio runs one engine in this process (no --tensor-parallel-size "
        "or --data-parallel-size)");
  }
  // Every run must encode: no prefix-cache hit over the clip, no cached rows.
  o.engine.enable_prefix_caching = false;
  o.engine.mm_processor_cache_gb = 0;
  if (!p.has("--max-model-len")) o.engine.max_model_len = 4096;
  if (!p.has("--kv-cache-memory-bytes") && !p.has("--gpu-memory-utilization")) {
    o.engine.kv_cache_memory_bytes = int64_t{1} << 30;
  }
  return o;
}

Options parse_options(const std::vector<std::string>& args, bool* help) {
  ArgParser p;
  add_engine_flags(p);
  p.value("--model").value("--preset").value("--seconds").value("--runs").value("--streams");
  p.value("--tokens-before").flag("--help", {"-h"});
  const ConfigFileFlags config = parse_with_config_file(p, args, 0);
  *help = p.get_flag("--help");
  if (*help) return {};
  return config.explaining([&] { return options_from_flags(p); });
}

// /proc/cpuinfo's first "model name" and its family and model numbers (a VM's name may be just
// "AMD EPYC": the numbers tell the generation), e.g. "AMD EPYC (family 26, model 2)".
std::string cpu_kind() {
  std::ifstream in("/proc/cpuinfo");
  std::map<std::string, std::string> fields;
  for (std::string line; std::getline(in, line) && !line.empty();) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const size_t end = line.find_last_not_of(" \t", colon == 0 ? 0 : colon - 1);
    const size_t start = line.find_first_not_of(" \t", colon + 1);
    fields[line.substr(0, end == std::string::npos ? 0 : end + 1)] =
        start == std::string::npos ? "" : line.substr(start);
  }
  std::string kind = fields.count("model name") ? fields["model name"] : "unknown CPU";
  if (fields.count("cpu family") && fields.count("model")) {
    kind += " (family " + fields["cpu family"] + ", model " + fields["model"] + ")";
  }
  return kind;
}

EngineRequest audio_request(const Engine& engine, const std::string& id,
                            const std::vector<float>& clip) {
  EngineRequest r = greedy_request(id, {2, engine.model_config().audio_token_id.value()}, 1);
  r.audios.push_back(PromptAudio{clip});
  return r;
}

void print_line(const char* format, auto... values) {
  std::printf(format, values...);
  std::fflush(stdout);  // progress: each line as its phase ends
}

// The clip alone, `runs` times: each run's encoder seconds (the engine's count) and TTFT.
void bench_encode(Engine& engine, const std::vector<float>& clip, int runs) {
  std::vector<double> encode, ttft;
  for (int i = 0; i < runs; ++i) {
    const EngineStats before = engine.stats();
    RequestWatch watch;
    const BenchClock::time_point t0 = BenchClock::now();
    engine.add_request(audio_request(engine, "encode-" + std::to_string(i), clip),
                       watch.callback());
    const BenchClock::time_point done = watch.wait_done();
    const EngineStats after = engine.stats();
    if (after.images_encoded != before.images_encoded + 1) {
      throw std::runtime_error("bench audio: run " + std::to_string(i + 1) +
                               " did not encode its clip");
    }
    encode.push_back(after.encoder_seconds - before.encoder_seconds);
    ttft.push_back(seconds_of(done - t0));
    print_line("ENCODE run %d/%d: encoder %.3f s, TTFT %.3f s\n", i + 1, runs, encode.back(),
               ttft.back());
  }
  print_line("ENCODE median of %d runs: encoder %.3f s, TTFT %.3f s\n", runs, median(encode),
             median(ttft));
}

struct GapSummary {
  std::vector<double> gaps;
  void print(const char* when) const {
    if (gaps.empty()) {
      print_line("GAPS %s: none\n", when);
      return;
    }
    print_line("GAPS %s: %zu gaps, median %.3f s, longest %.3f s\n", when, gaps.size(),
               median(gaps), *std::max_element(gaps.begin(), gaps.end()));
  }
};

// Decode streams; once each has `tokens_before` tokens the audio request arrives. A gap between
// two of a stream's tokens counts "before" when it ends before the arrival, "during" when it
// overlaps the span from the arrival to the audio request's first token.
void bench_gaps(Engine& engine, const std::vector<float>& clip, const Options& o) {
  const int max_tokens = o.engine.max_model_len - 16;
  std::vector<std::unique_ptr<RequestWatch>> streams;
  print_line("GAPS starting %d decode stream(s), %d tokens each before the audio request\n",
             o.streams, o.tokens_before);
  for (int k = 0; k < o.streams; ++k) {
    streams.push_back(std::make_unique<RequestWatch>());
    const std::vector<int32_t> prompt = {2, 100 + k, 101, 102, 103, 104, 105, 107};
    engine.add_request(greedy_request("stream-" + std::to_string(k), prompt, max_tokens),
                       streams.back()->callback());
  }
  for (auto& s : streams) s->wait_tokens(static_cast<size_t>(o.tokens_before));
  const EngineStats before = engine.stats();
  RequestWatch audio;
  const BenchClock::time_point arrival = BenchClock::now();
  engine.add_request(audio_request(engine, "audio", clip), audio.callback());
  print_line("%s", "GAPS audio request submitted beside the streams\n");
  const BenchClock::time_point first = audio.wait_done();
  const EngineStats after = engine.stats();
  // One more token per stream closes the gap the audio's last step sits in.
  std::vector<size_t> seen;
  for (auto& s : streams) seen.push_back(s->times().size());
  for (size_t k = 0; k < streams.size(); ++k) streams[k]->wait_tokens(seen[k] + 1);
  for (int k = 0; k < o.streams; ++k) engine.abort("stream-" + std::to_string(k));
  GapSummary pre, during;
  std::string first_stream;  // stream 0's gaps during the request, in order
  int tokens_during = 0;
  for (size_t k = 0; k < streams.size(); ++k) {
    streams[k]->wait_done();
    const std::vector<BenchClock::time_point> t = streams[k]->times();
    for (size_t i = 1; i < t.size(); ++i) {
      const double gap = seconds_of(t[i] - t[i - 1]);
      if (t[i] <= arrival) {
        pre.gaps.push_back(gap);
      } else if (t[i - 1] < first) {
        during.gaps.push_back(gap);
        if (t[i] <= first) ++tokens_during;
        if (k == 0) {
          char text[32];
          std::snprintf(text, sizeof text, " %.3f", gap);
          first_stream += text;
        }
      }
    }
  }
  pre.print("before the audio request");
  during.print("during the audio request");
  print_line("GAPS during, stream 0 in order (s):%s\n", first_stream.c_str());
  print_line(
      "GAPS audio request: TTFT %.3f s; encoder %.3f s in %llu step(s); %d stream token(s) "
      "meanwhile\n",
      seconds_of(first - arrival), after.encoder_seconds - before.encoder_seconds,
      static_cast<unsigned long long>(after.encoder_steps - before.encoder_steps), tokens_during);
}

}  // namespace

std::vector<float> bench_audio_clip(double seconds) {
  const size_t n = static_cast<size_t>(std::llround(seconds * 16000));
  std::vector<float> clip(n);
  std::mt19937 noise(20261207);  // mt19937's output is fixed by the standard
  constexpr double kTwoPi = 2 * std::numbers::pi;
  for (size_t i = 0; i < n; ++i) {
    const double t = static_cast<double>(i) / 16000;
    const double sweep = 300 + 200 * std::sin(kTwoPi * 0.25 * t);  // 100-500 Hz, slowly
    const double tones = 0.25 * std::sin(kTwoPi * 220 * t) + 0.2 * std::sin(kTwoPi * 1250 * t) +
                         0.15 * std::sin(kTwoPi * sweep * t);
    const double white = static_cast<double>(noise() >> 8) / double{1 << 24} * 2 - 1;
    clip[i] = static_cast<float>(tones + 0.1 * white);
  }
  return clip;
}

int run_bench_audio(const std::vector<std::string>& args) {
  bool help = false;
  Options o = parse_options(args, &help);
  if (help) {
    std::cout << kAudioUsage << engine_flags_usage();
    return 0;
  }
  const unsigned threads = o.engine.threads > 0 ? static_cast<unsigned>(o.engine.threads)
                                                : std::max(1u, std::thread::hardware_concurrency());
  print_line("CPU %s, %u thread(s)\n", cpu_kind().c_str(), threads);
  std::optional<TempModelDir> temp;
  if (o.model.empty()) {
    temp.emplace("gemmaserve-bench-audio");
    const std::string dir = (temp->path() / o.preset).string();
    print_line("MODEL writing the %s preset (random bf16 weights) to %s\n", o.preset.c_str(),
               dir.c_str());
    if (run_make_test_model_command(
            {"--preset", o.preset, "--dtype", "bf16", "--seed", "0", "--out", dir}) != 0) {
      throw InputError("bench audio: make-test-model --preset " + o.preset + " failed");
    }
    o.model = dir;
  }
  o.engine.model = o.model;
  log::set_level(log::Level::kWarning);
  print_line("MODEL loading %s\n", o.model.c_str());
  Engine engine(o.engine);
  if (!engine.has_audio()) throw InputError(o.model + " has no audio tower (audio_config)");
  const std::vector<float> clip = bench_audio_clip(o.seconds);
  print_line("AUDIO %.1f s synthetic (tones + noise, 16 kHz): %d soft tokens\n", o.seconds,
             engine.audio_soft_tokens(clip.size()));
  bench_encode(engine, clip, o.runs);
  bench_gaps(engine, clip, o);
  return 0;
}

}  // namespace gemmaserve
