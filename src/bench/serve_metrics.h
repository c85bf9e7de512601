// The statistics of `bench serve`, computed as vLLM's calculate_metrics does with numpy: mean,
// median, population standard deviation and linearly interpolated percentiles of TTFT, TPOT,
// ITL and E2EL, throughputs, and the peak output-token second.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "bench/sse_client.h"

namespace gemmaserve::bench {

// numpy.percentile's default (linear interpolation between closest ranks); `pct` in [0, 100].
// An empty sample gives 0, as vLLM's `np.percentile(values or 0, p)`.
double percentile(std::vector<double> values, double pct);
double mean(const std::vector<double>& values);
double median(std::vector<double> values);                    // numpy.median
double population_stddev(const std::vector<double>& values);  // numpy.std (ddof=0)

// Summary of one latency metric in milliseconds.
struct MetricSummary {
  double mean_ms = 0.0;
  double median_ms = 0.0;
  double std_ms = 0.0;
  std::vector<std::pair<double, double>> percentiles_ms;  // (percentile, value)
};
MetricSummary summarize_seconds(const std::vector<double>& seconds,
                                const std::vector<double>& percentiles);

// TPOT of one request: the time after the first token spread over the other tokens; not `valid`
// when the request produced one token or fewer (vLLM leaves those out of the TPOT statistics).
struct Tpot {
  bool valid = false;
  double seconds = 0.0;
};
Tpot time_per_output_token(double latency, double ttft, int output_tokens);

struct BenchmarkMetrics {
  int completed = 0;
  int failed = 0;
  long long total_input = 0;
  long long total_output = 0;
  double request_throughput = 0.0;
  double output_throughput = 0.0;
  double total_token_throughput = 0.0;
  MetricSummary ttft, tpot, itl, e2el;
  double max_output_tokens_per_s = 0.0;
  int max_concurrent_requests = 0;
};

// `input_lens[i]` / `output_lens[i]` are request i's prompt and output token counts (output 0 for
// failed requests); `duration` is the benchmark's wall time in seconds.
BenchmarkMetrics calculate_metrics(const std::vector<RequestOutput>& outputs,
                                   const std::vector<int>& input_lens,
                                   const std::vector<int>& output_lens, double duration,
                                   const std::vector<double>& percentiles);

// "99" for 99.0, "99.9" for 99.9: the name vLLM gives a percentile in labels and JSON keys.
std::string percentile_word(double pct);

}  // namespace gemmaserve::bench
