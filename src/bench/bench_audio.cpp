// `gemmaserve bench audio`: audio through the Engine, timed from outside as a client sees it:
// a clip's encode alone, run after run, then decode streams with an audio request arriving
// beside them (their inter-token gaps before and during it).
#include "bench/bench_audio.h"

#include <algorithm>
#include <cmath>
#include <iostream>
#include <numbers>
#include <optional>
#include <random>

#include "bench/bench_kernels.h"
#include "bench/media_bench.h"
#include "cli/arg_parser.h"
#include "cli/config_file.h"
#include "cli/engine_flags.h"
#include "core/error.h"
#include "engine/engine.h"

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
  MediaBenchOptions common;
  double seconds = 30;
};

// The benchmark's options from the parsed flags.
Options options_from_flags(const ArgParser& p) {
  Options o;
  o.common = media_bench_options(p, 5, "audio_config", "audio tower (e2b and e4b have one)",
                                 "bench audio");
  o.seconds = p.get_double("--seconds", o.seconds);
  if (!(o.seconds > 0 && o.seconds <= 30)) {
    throw InputError("--seconds must be in (0, 30] (the model hears 30 s at most), got " +
                     p.get("--seconds").value_or(""));
  }
  return o;
}

Options parse_options(const std::vector<std::string>& args, bool* help) {
  ArgParser p;
  add_media_bench_flags(p);
  p.value("--seconds");
  const ConfigFileFlags config = parse_with_config_file(p, args, 0);
  *help = p.get_flag("--help");
  if (*help) return {};
  return config.explaining([&] { return options_from_flags(p); });
}

EngineRequest audio_request(const Engine& engine, const std::string& id,
                            const std::vector<float>& clip) {
  EngineRequest r = greedy_request(id, {2, engine.model_config().audio_token_id.value()}, 1);
  r.audios.push_back(PromptAudio{clip});
  return r;
}

// The clip alone, `runs` times: each run's encoder seconds (the engine's count) and TTFT.
void bench_encode(Engine& engine, const std::vector<float>& clip, int runs) {
  std::vector<double> encode, ttft;
  for (int i = 0; i < runs; ++i) {
    const AloneRun run = run_alone(
        engine, audio_request(engine, "encode-" + std::to_string(i), clip), 1, "bench audio");
    encode.push_back(run.encoder_seconds);
    ttft.push_back(run.ttft);
    print_line("ENCODE run %d/%d: encoder %.3f s, TTFT %.3f s\n", i + 1, runs, encode.back(),
               ttft.back());
  }
  print_line("ENCODE median of %d runs: encoder %.3f s, TTFT %.3f s\n", runs, median(encode),
             median(ttft));
}

// Decode streams; once each has `tokens_before` tokens the audio request arrives. A gap between
// two of a stream's tokens counts "before" when it ends before the arrival, "during" when it
// overlaps the span from the arrival to the audio request's first token.
void bench_gaps(Engine& engine, const std::vector<float>& clip, const MediaBenchOptions& o) {
  print_line("GAPS starting %d decode stream(s), %d tokens each before the audio request\n",
             o.streams, o.tokens_before);
  const ArrivalGaps g =
      measure_arrival_gaps(engine, o.streams, o.tokens_before, [&](OutputCallback callback) {
        engine.add_request(audio_request(engine, "audio", clip), std::move(callback));
        print_line("%s", "GAPS audio request submitted beside the streams\n");
      });
  print_gaps("before the audio request", g.before);
  print_gaps("during the audio request", g.during);
  print_line("GAPS during, stream 0 in order (s):%s\n", seconds_list(g.stream0_during).c_str());
  print_line(
      "GAPS audio request: TTFT %.3f s; encoder %.3f s in %llu step(s); %d stream token(s) "
      "meanwhile\n",
      g.ttft, g.stats_after.encoder_seconds - g.stats_before.encoder_seconds,
      static_cast<unsigned long long>(g.stats_after.encoder_steps - g.stats_before.encoder_steps),
      g.stream_tokens_during);
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
  MediaBenchOptions& c = o.common;
  print_cpu_line(c.engine);
  std::optional<TempModelDir> temp;
  const std::unique_ptr<Engine> loaded = load_bench_engine(c, &temp, "bench audio");
  Engine& engine = *loaded;
  if (!engine.has_audio()) throw InputError(c.model + " has no audio tower (audio_config)");
  const std::vector<float> clip = bench_audio_clip(o.seconds);
  print_line("AUDIO %.1f s synthetic (tones + noise, 16 kHz): %d soft tokens\n", o.seconds,
             engine.audio_soft_tokens(clip.size()));
  bench_encode(engine, clip, c.runs);
  bench_gaps(engine, clip, c);
  return 0;
}

}  // namespace gemmaserve
