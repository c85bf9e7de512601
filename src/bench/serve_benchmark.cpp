#include "bench/serve_benchmark.h"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <initializer_list>
#include <mutex>
#include <random>
#include <string_view>
#include <thread>

#include "core/error.h"
#include "core/progress_bar.h"

namespace gemmaserve::bench {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;
using nlohmann::ordered_json;

constexpr size_t kMaxErrorsShown = 10;
constexpr int kReportWidth = 50;

// Concatenation by append: GCC 12 reports a false -Werror=restrict for "literal" + std::string.
std::string cat(std::initializer_list<std::string_view> parts) {
  std::string out;
  for (std::string_view part : parts) out.append(part);
  return out;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Python's "{s:{c}^{n}}": the extra fill character goes to the right.
std::string centered(const std::string& title, char fill) {
  const int pad = std::max(0, kReportWidth - static_cast<int>(title.size()));
  return std::string(static_cast<size_t>(pad / 2), fill) + title +
         std::string(static_cast<size_t>(pad - pad / 2), fill);
}

// "{:<40} {:<10}" for an integer and "{:<40} {:<10.2f}" for a float.
std::string row(const std::string& label, long long value) {
  char buf[128];
  std::snprintf(buf, sizeof(buf), "%-40s %-10lld\n", label.c_str(), value);
  return buf;
}
std::string row(const std::string& label, double value) {
  char buf[128];
  std::snprintf(buf, sizeof(buf), "%-40s %-10.2f\n", label.c_str(), value);
  return buf;
}

struct MetricSpec {
  const char* key;     // "ttft"
  const char* name;    // "TTFT"
  const char* header;  // "Time to First Token"
};
constexpr MetricSpec kMetricSpecs[] = {
    {"ttft", "TTFT", "Time to First Token"},
    {"tpot", "TPOT", "Time per Output Token (excl. 1st token)"},
    {"itl", "ITL", "Inter-token Latency"},
    {"e2el", "E2EL", "End-to-end Latency"},
    {"client_queue_time", "Client Queue Time", "Client-side Queueing"},
    {"e2el_including_client_queue", "E2EL incl. Client Queue",
     "Queue-inclusive End-to-end Latency"},
};

bool selected(const ServeBenchmarkConfig& c, const std::string& key) {
  return std::find(c.percentile_metrics.begin(), c.percentile_metrics.end(), key) !=
         c.percentile_metrics.end();
}

// The summary of one named metric; the queue metrics only exist under a concurrency cap (and
// the queue-inclusive latency only at a finite rate), as in vLLM.
bool summary_of(const ServeBenchmarkConfig& c, const ServeBenchmarkRun& run, const std::string& key,
                MetricSummary& out) {
  const BenchmarkMetrics& m = run.metrics;
  if (key == "ttft") out = m.ttft;
  if (key == "tpot") out = m.tpot;
  if (key == "itl") out = m.itl;
  if (key == "e2el") out = m.e2el;
  if (key == "ttft" || key == "tpot" || key == "itl" || key == "e2el") return true;
  if (c.max_concurrency <= 0) return false;
  std::vector<double> values;
  for (size_t i = 0; i < run.outputs.size(); ++i) {
    if (!run.outputs[i].success) continue;
    if (key == "client_queue_time") {
      values.push_back(run.queue_times[i]);
    } else if (key == "e2el_including_client_queue" && std::isfinite(c.request_rate)) {
      values.push_back(run.outputs[i].latency + run.queue_times[i]);
    } else {
      return false;
    }
  }
  out = summarize_seconds(values, c.metric_percentiles);
  return true;
}

}  // namespace

bool is_chat_backend(const std::string& backend) { return backend == "openai-chat"; }

void validate_backend(const std::string& backend, const std::string& endpoint) {
  if (backend != "openai" && backend != "vllm" && backend != "openai-chat") {
    throw InputError("--backend: unknown backend '" + backend +
                     "' (expected openai, vllm or openai-chat)");
  }
  if (is_chat_backend(backend) && !ends_with(endpoint, "chat/completions")) {
    throw InputError(
        "--endpoint: the openai-chat backend needs a .../chat/completions endpoint, got '" +
        endpoint + "'");
  }
  if (!is_chat_backend(backend) && !ends_with(endpoint, "completions")) {
    throw InputError("--endpoint: the " + backend +
                     " backend needs a .../completions endpoint, got '" + endpoint + "'");
  }
}

json build_request_body(const ServeBenchmarkConfig& config, const SampleRequest& request) {
  json body;
  body["model"] = config.model;
  if (is_chat_backend(config.backend)) {
    body["messages"] =
        json::array({{{"role", "user"},
                      {"content", json::array({{{"type", "text"}, {"text", request.prompt}}})}}});
    body["max_completion_tokens"] = request.expected_output_len;
  } else {
    body["prompt"] = request.prompt;
    body["repetition_penalty"] = 1.0;
    body["max_tokens"] = request.expected_output_len;
    body["logprobs"] = nullptr;
  }
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  if (config.ignore_eos) body["ignore_eos"] = true;
  for (const auto& [key, value] : config.extra_body.items()) body[key] = value;
  return body;
}

std::vector<double> arrival_offsets(int count, double rate, double burstiness, uint64_t seed) {
  if (!(rate > 0)) throw InputError("--request-rate must be positive");
  if (!(burstiness > 0)) throw InputError("--burstiness must be positive");
  std::vector<double> offsets(static_cast<size_t>(std::max(count, 0)), 0.0);
  if (std::isinf(rate) || offsets.empty()) return offsets;
  std::mt19937_64 rng(seed);
  std::gamma_distribution<double> gap(burstiness, 1.0 / (rate * burstiness));
  double t = 0.0;
  for (double& o : offsets) {
    t += std::isinf(burstiness) ? 1.0 / rate : gap(rng);
    o = t;
  }
  // Rescale so the total matches count / rate: raw gamma sums are off by a few percent.
  const double scale = (static_cast<double>(count) / rate) / offsets.back();
  for (double& o : offsets) o *= scale;
  return offsets;
}

ServeBenchmarkRun run_serve_benchmark(const ServeBenchmarkConfig& config,
                                      const std::vector<SampleRequest>& requests,
                                      const TokenCounter* output_counter) {
  const size_t n = requests.size();
  const std::vector<double> offsets =
      arrival_offsets(static_cast<int>(n), config.request_rate, config.burstiness, config.seed);
  std::vector<json> bodies;
  for (const SampleRequest& r : requests) bodies.push_back(build_request_body(config, r));

  ServeBenchmarkRun run;
  run.outputs.resize(n);
  run.queue_times.resize(n, 0.0);
  std::vector<double> arrived(n, 0.0);
  std::mutex mutex;
  std::condition_variable ready;
  std::deque<size_t> queue;
  bool all_queued = false;
  size_t finished = 0;
  ProgressBar bar("bench serve", n, config.show_progress, ProgressBar::Unit::kItems);
  const bool chat = is_chat_backend(config.backend);
  const size_t workers =
      config.max_concurrency > 0 ? std::min(n, static_cast<size_t>(config.max_concurrency)) : n;

  const Clock::time_point start = Clock::now();
  auto worker = [&]() {
    for (;;) {
      size_t i;
      {
        std::unique_lock lock(mutex);
        ready.wait(lock, [&] { return !queue.empty() || all_queued; });
        if (queue.empty()) return;
        i = queue.front();
        queue.pop_front();
      }
      HttpHeaders headers = auth_headers(config.api_key);
      for (const auto& h : config.extra_headers) headers.insert(h);
      if (!requests[i].request_id.empty()) headers.emplace("x-request-id", requests[i].request_id);
      RequestOutput out = stream_request(config.server, config.endpoint, bodies[i], headers, chat,
                                         start, config.request_timeout);
      std::lock_guard lock(mutex);
      run.queue_times[i] = std::max(0.0, out.start_time - arrived[i]);
      run.outputs[i] = std::move(out);
      // The last one is drawn by finish(), which would otherwise repeat the full bar.
      if (++finished < n) bar.update(finished);
    }
  };
  {
    std::vector<std::jthread> threads;
    for (size_t w = 0; w < workers; ++w) threads.emplace_back(worker);
    for (size_t i = 0; i < n; ++i) {
      std::this_thread::sleep_until(start + std::chrono::duration_cast<Clock::duration>(
                                                std::chrono::duration<double>(offsets[i])));
      std::lock_guard lock(mutex);
      arrived[i] = std::chrono::duration<double>(Clock::now() - start).count();
      queue.push_back(i);
      ready.notify_one();
    }
    std::lock_guard lock(mutex);
    all_queued = true;
    ready.notify_all();
  }  // the threads join here
  run.duration = std::chrono::duration<double>(Clock::now() - start).count();
  bar.finish();

  bool used_usage = false, used_counter = false, used_chunks = false;
  for (size_t i = 0; i < n; ++i) {
    const RequestOutput& o = run.outputs[i];
    run.input_lens.push_back(o.prompt_tokens.value_or(requests[i].prompt_len));
    int output_len = 0;
    if (o.success) {
      if (o.output_tokens) {
        output_len = *o.output_tokens;
        used_usage = true;
      } else if (output_counter) {
        output_len = (*output_counter)(o.generated_text, false);
        used_counter = true;
      } else {
        output_len = o.content_chunks;
        used_chunks = true;
      }
    }
    run.output_lens.push_back(output_len);
  }
  std::vector<std::string> sources;
  if (used_usage) sources.push_back("server usage (completion_tokens)");
  if (used_counter) sources.push_back("tokenizing the generated text");
  if (used_chunks) sources.push_back("one per streamed chunk (no usage, no tokenizer)");
  for (size_t k = 0; k < sources.size(); ++k) {
    if (k) run.output_token_source.append(" + ");
    run.output_token_source.append(sources[k]);
  }
  run.metrics = calculate_metrics(run.outputs, run.input_lens, run.output_lens, run.duration,
                                  config.metric_percentiles);
  return run;
}

std::string format_report(const ServeBenchmarkConfig& config, const ServeBenchmarkRun& run) {
  std::string s;
  std::vector<const RequestOutput*> failed;
  for (const RequestOutput& o : run.outputs) {
    if (!o.success) failed.push_back(&o);
  }
  if (!failed.empty()) {
    s.append("Failed requests during benchmark run detected (capping to 10):\n");
    for (size_t i = 0; i < failed.size() && i < kMaxErrorsShown; ++i) {
      s.append("Error ").append(std::to_string(i)).append(": ").append(failed[i]->error);
      s.push_back('\n');
    }
  }
  if (!run.outputs.empty() && failed.size() == run.outputs.size()) {
    s.append(
        "WARNING: All requests failed. This is likely due to a misconfiguration on the "
        "benchmark arguments.\n");
  }
  if (!run.output_token_source.empty() && run.output_token_source.rfind("server usage", 0) != 0) {
    s.append("Output tokens counted by: ").append(run.output_token_source).append("\n");
  }
  const BenchmarkMetrics& m = run.metrics;
  s.append(centered(" Serving Benchmark Result ", '=')).append("\n");
  s.append(row("Successful requests:", static_cast<long long>(m.completed)));
  s.append(row("Failed requests:", static_cast<long long>(m.failed)));
  if (config.max_concurrency > 0) {
    s.append(row("Maximum request concurrency:", static_cast<long long>(config.max_concurrency)));
  }
  if (std::isfinite(config.request_rate)) {
    s.append(row("Request rate configured (RPS):", config.request_rate));
  }
  s.append(row("Benchmark duration (s):", run.duration));
  s.append(row("Total input tokens:", m.total_input));
  s.append(row("Total generated tokens:", m.total_output));
  s.append(row("Request throughput (req/s):", m.request_throughput));
  s.append(row("Output token throughput (tok/s):", m.output_throughput));
  s.append(row("Peak output token throughput (tok/s):", m.max_output_tokens_per_s));
  s.append(row("Peak concurrent requests:", static_cast<double>(m.max_concurrent_requests)));
  s.append(row("Total token throughput (tok/s):", m.total_token_throughput));
  for (const MetricSpec& spec : kMetricSpecs) {
    MetricSummary summary;
    if (!selected(config, spec.key) || !summary_of(config, run, spec.key, summary)) continue;
    const std::string name = spec.name;
    s.append(centered(spec.header, '-')).append("\n");
    s.append(row(cat({"Mean ", name, " (ms):"}), summary.mean_ms));
    s.append(row(cat({"Median ", name, " (ms):"}), summary.median_ms));
    for (const auto& [p, value] : summary.percentiles_ms) {
      s.append(row(cat({"P", percentile_word(p), " ", name, " (ms):"}), value));
    }
  }
  s.append(std::string(kReportWidth, '=')).append("\n");
  return s;
}

ordered_json result_json(const ServeBenchmarkConfig& config, const ServeBenchmarkRun& run,
                         ordered_json setup, bool detailed) {
  ordered_json r = std::move(setup);
  const BenchmarkMetrics& m = run.metrics;
  r["duration"] = run.duration;
  r["completed"] = m.completed;
  r["failed"] = m.failed;
  r["total_input_tokens"] = m.total_input;
  r["total_output_tokens"] = m.total_output;
  r["request_throughput"] = m.request_throughput;
  r["request_goodput"] = nullptr;
  r["output_throughput"] = m.output_throughput;
  r["total_token_throughput"] = m.total_token_throughput;
  ordered_json ttfts = ordered_json::array(), itls = ordered_json::array(),
               latencies = ordered_json::array(), start_times = ordered_json::array(),
               queue_times = ordered_json::array(), texts = ordered_json::array(),
               errors = ordered_json::array();
  for (size_t i = 0; i < run.outputs.size(); ++i) {
    const RequestOutput& o = run.outputs[i];
    ttfts.push_back(o.ttft);
    itls.push_back(o.itl);
    latencies.push_back(o.latency);
    start_times.push_back(o.start_time);
    queue_times.push_back(run.queue_times[i]);
    texts.push_back(o.generated_text);
    errors.push_back(o.error);
  }
  if (detailed) {
    r["input_lens"] = run.input_lens;
    r["output_lens"] = run.output_lens;
    r["ttfts"] = std::move(ttfts);
    r["itls"] = std::move(itls);
  }
  r["latencies"] = std::move(latencies);
  if (detailed) r["start_times"] = std::move(start_times);
  r["queue_times"] = std::move(queue_times);
  if (detailed) {
    r["generated_texts"] = std::move(texts);
    r["errors"] = std::move(errors);
  }
  r["max_output_tokens_per_s"] = m.max_output_tokens_per_s;
  r["max_concurrent_requests"] = m.max_concurrent_requests;
  r["rtfx"] = 0.0;
  for (const MetricSpec& spec : kMetricSpecs) {
    MetricSummary summary;
    if (!selected(config, spec.key) || !summary_of(config, run, spec.key, summary)) continue;
    const std::string key = spec.key;
    r[cat({"mean_", key, "_ms"})] = summary.mean_ms;
    r[cat({"median_", key, "_ms"})] = summary.median_ms;
    r[cat({"std_", key, "_ms"})] = summary.std_ms;
    for (const auto& [p, value] : summary.percentiles_ms) {
      r[cat({"p", percentile_word(p), "_", key, "_ms"})] = value;
    }
  }
  return r;
}

}  // namespace gemmaserve::bench
