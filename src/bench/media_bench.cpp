#include "bench/media_bench.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <memory>
#include <stdexcept>
#include <thread>

#include "bench/bench_kernels.h"
#include "cli/engine_flags.h"
#include "cli/make_test_model_command.h"
#include "core/error.h"
#include "core/logging.h"
#include "model/test_model_presets.h"

namespace gemmaserve {

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

void print_cpu_line(const EngineArgs& engine) {
  const unsigned threads = engine.threads > 0 ? static_cast<unsigned>(engine.threads)
                                              : std::max(1u, std::thread::hardware_concurrency());
  print_line("CPU %s, %u thread(s)\n", cpu_kind().c_str(), threads);
}

void add_media_bench_flags(ArgParser& p) {
  add_engine_flags(p);
  p.value("--model").value("--preset").value("--runs").value("--streams").value("--tokens-before");
  p.flag("--help", {"-h"});
}

MediaBenchOptions media_bench_options(const ArgParser& p, int runs, const std::string& tower_key,
                                      const std::string& what, const std::string& bench) {
  MediaBenchOptions o;
  o.model = p.get("--model").value_or("");
  o.preset = p.get("--preset").value_or("e2b");
  if (!o.model.empty() && p.has("--preset")) {
    throw InputError("--model and --preset: give one (--preset writes a model)");
  }
  if (o.model.empty() && test_model_config(o.preset)[tower_key].is_null()) {
    throw InputError("--preset " + o.preset + ": no " + what);
  }
  o.runs = p.get_positive_int("--runs", runs);
  o.streams = p.get_positive_int("--streams", o.streams);
  o.tokens_before = p.get_positive_int("--tokens-before", o.tokens_before);
  o.engine = engine_args_from_flags(p, o.model);
  if (o.engine.tensor_parallel_size != 1 || o.engine.data_parallel_size != 1) {
    throw InputError(bench +
                     " runs one engine in this process (no --tensor-parallel-size or "
                     "--data-parallel-size)");
  }
  // Every run must encode: no prefix-cache hit over the media, no cached rows.
  o.engine.enable_prefix_caching = false;
  o.engine.mm_processor_cache_gb = 0;
  if (!p.has("--max-model-len")) o.engine.max_model_len = 4096;
  if (!p.has("--kv-cache-memory-bytes") && !p.has("--gpu-memory-utilization")) {
    o.engine.kv_cache_memory_bytes = int64_t{1} << 30;
  }
  return o;
}

std::unique_ptr<Engine> load_bench_engine(MediaBenchOptions& o, std::optional<TempModelDir>* temp,
                                          const std::string& bench) {
  if (o.model.empty()) {
    std::string prefix = "gemmaserve-" + bench;  // gemmaserve-bench-audio
    std::replace(prefix.begin(), prefix.end(), ' ', '-');
    temp->emplace(prefix);
    o.model = ((*temp)->path() / o.preset).string();
    print_line("MODEL writing the %s preset (random bf16 weights) to %s\n", o.preset.c_str(),
               o.model.c_str());
    if (run_make_test_model_command(
            {"--preset", o.preset, "--dtype", "bf16", "--seed", "0", "--out", o.model}) != 0) {
      throw InputError(bench + ": make-test-model --preset " + o.preset + " failed");
    }
  }
  o.engine.model = o.model;
  log::set_level(log::Level::kWarning);
  print_line("MODEL loading %s\n", o.model.c_str());
  return std::make_unique<Engine>(o.engine);
}

AloneRun run_alone(Engine& engine, EngineRequest request, std::uint64_t media_items,
                   const std::string& bench) {
  const EngineStats before = engine.stats();
  RequestWatch watch;
  const BenchClock::time_point t0 = BenchClock::now();
  const std::string id = request.request_id;
  engine.add_request(std::move(request), watch.callback());
  const BenchClock::time_point done = watch.wait_done();
  const EngineStats after = engine.stats();
  if (after.images_encoded != before.images_encoded + media_items) {
    throw std::runtime_error(bench + ": request " + id + " encoded " +
                             std::to_string(after.images_encoded - before.images_encoded) +
                             " media item(s), not " + std::to_string(media_items));
  }
  return {after.encoder_seconds - before.encoder_seconds,
          after.encoder_steps - before.encoder_steps, seconds_of(done - t0)};
}

ArrivalGaps measure_arrival_gaps(Engine& engine, int streams, int tokens_before,
                                 const std::function<void(OutputCallback)>& submit) {
  const int max_tokens = engine.max_model_len() - 16;
  std::vector<std::unique_ptr<RequestWatch>> watches;
  for (int k = 0; k < streams; ++k) {
    watches.push_back(std::make_unique<RequestWatch>());
    const std::vector<int32_t> prompt = {2, 100 + k, 101, 102, 103, 104, 105, 107};
    engine.add_request(greedy_request("stream-" + std::to_string(k), prompt, max_tokens),
                       watches.back()->callback());
  }
  for (auto& w : watches) w->wait_tokens(static_cast<size_t>(tokens_before));
  ArrivalGaps out;
  out.stats_before = engine.stats();
  RequestWatch arriving;
  const BenchClock::time_point arrival = BenchClock::now();
  submit(arriving.callback());
  const BenchClock::time_point first = arriving.wait_done();
  out.stats_after = engine.stats();
  out.ttft = seconds_of(first - arrival);
  // One more token per stream closes the gap the request's last step sits in.
  std::vector<size_t> seen;
  for (auto& w : watches) seen.push_back(w->times().size());
  for (size_t k = 0; k < watches.size(); ++k) watches[k]->wait_tokens(seen[k] + 1);
  for (int k = 0; k < streams; ++k) engine.abort("stream-" + std::to_string(k));
  for (size_t k = 0; k < watches.size(); ++k) {
    watches[k]->wait_done();
    const std::vector<BenchClock::time_point> t = watches[k]->times();
    for (size_t i = 1; i < t.size(); ++i) {
      const double gap = seconds_of(t[i] - t[i - 1]);
      if (t[i] <= arrival) {
        out.before.push_back(gap);
      } else if (t[i - 1] < first) {
        out.during.push_back(gap);
        if (t[i] <= first) ++out.stream_tokens_during;
        if (k == 0) out.stream0_during.push_back(gap);
      }
    }
  }
  return out;
}

void print_gaps(const std::string& when, const std::vector<double>& gaps) {
  if (gaps.empty()) {
    print_line("GAPS %s: none\n", when.c_str());
    return;
  }
  print_line("GAPS %s: %zu gaps, median %.3f s, longest %.3f s\n", when.c_str(), gaps.size(),
             median(gaps), *std::max_element(gaps.begin(), gaps.end()));
}

std::string seconds_list(const std::vector<double>& values) {
  std::string text;
  for (double v : values) {
    char item[32];
    std::snprintf(item, sizeof item, " %.3f", v);
    text += item;
  }
  return text;
}

}  // namespace gemmaserve
