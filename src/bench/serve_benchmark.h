// Runs `bench serve`: sends sampled requests to an OpenAI-compatible server at Poisson (or gamma)
// arrival times under a concurrency cap, streams every reply, and reports like vLLM's
// `vllm bench serve` (printed table and result JSON).
#pragma once

#include <chrono>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/serve_dataset.h"
#include "bench/serve_metrics.h"
#include "bench/sse_client.h"

namespace gemmaserve::bench {

struct ServeBenchmarkConfig {
  std::string backend = "openai";  // openai | vllm (completions) | openai-chat
  ServerUrl server;
  std::string endpoint = "/v1/completions";
  std::string model;  // the name put in each request's "model"
  std::string api_key;
  HttpHeaders extra_headers;
  double request_rate = std::numeric_limits<double>::infinity();
  double burstiness = 1.0;
  int max_concurrency = 0;  // 0: unlimited
  bool ignore_eos = false;
  uint64_t seed = 0;
  nlohmann::json extra_body = nlohmann::json::object();  // sampling fields merged into each body
  std::vector<std::string> percentile_metrics = {"ttft", "tpot", "itl"};
  std::vector<double> metric_percentiles = {99.0};
  bool show_progress = true;
  std::chrono::seconds request_timeout{6 * 60 * 60};
};

// True for the chat-completions backend.
bool is_chat_backend(const std::string& backend);
// Throws InputError for an unknown backend or an endpoint that does not fit it.
void validate_backend(const std::string& backend, const std::string& endpoint);

// The JSON body vLLM's request functions send for `request`.
nlohmann::json build_request_body(const ServeBenchmarkConfig& config, const SampleRequest& request);

// Send times in seconds from the start: all 0 at an infinite rate, otherwise gamma-distributed
// gaps (shape = burstiness; 1 is Poisson) rescaled so the last lands at count / rate, as vLLM.
std::vector<double> arrival_offsets(int count, double rate, double burstiness, uint64_t seed);

struct ServeBenchmarkRun {
  std::vector<RequestOutput> outputs;  // in request order
  std::vector<double> queue_times;     // seconds each request waited for a concurrency slot
  std::vector<int> input_lens;         // usage.prompt_tokens, else the dataset's count
  std::vector<int> output_lens;        // 0 for failed requests
  std::string output_token_source;     // how output tokens were counted, for the report
  double duration = 0.0;
  BenchmarkMetrics metrics;
};

// Runs the requests and computes the metrics. Output tokens come from the server's usage when
// present, else from `output_counter` on the generated text, else one per streamed chunk.
ServeBenchmarkRun run_serve_benchmark(const ServeBenchmarkConfig& config,
                                      const std::vector<SampleRequest>& requests,
                                      const TokenCounter* output_counter);

// The "Serving Benchmark Result" table, with the failed requests' errors (at most 10) above it.
std::string format_report(const ServeBenchmarkConfig& config, const ServeBenchmarkRun& run);

// vLLM's result keys after `setup` (date, backend, model_id, ...). Per-request arrays (input_lens,
// output_lens, ttfts, itls, start_times, generated_texts, errors) only when `detailed`, as
// vLLM's --save-detailed.
nlohmann::ordered_json result_json(const ServeBenchmarkConfig& config, const ServeBenchmarkRun& run,
                                   nlohmann::ordered_json setup, bool detailed);

}  // namespace gemmaserve::bench
