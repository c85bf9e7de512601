#include "bench/serve_metrics.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/python_text.h"

namespace gemmaserve::bench {

double percentile(std::vector<double> values, double pct) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const double rank = pct / 100.0 * static_cast<double>(values.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  const double frac = rank - static_cast<double>(lo);
  // numpy's _lerp: a + (b - a) * t, switched to b - (b - a) * (1 - t) for t >= 0.5.
  const double diff = values[hi] - values[lo];
  return frac >= 0.5 ? values[hi] - diff * (1.0 - frac) : values[lo] + diff * frac;
}

double mean(const std::vector<double>& values) {
  if (values.empty()) return 0.0;
  return std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
}

double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  // numpy.median averages the two middle values for an even count.
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2.0;
}

double population_stddev(const std::vector<double>& values) {
  if (values.empty()) return 0.0;
  const double m = mean(values);
  double sum = 0.0;
  for (double v : values) sum += (v - m) * (v - m);
  return std::sqrt(sum / static_cast<double>(values.size()));
}

MetricSummary summarize_seconds(const std::vector<double>& seconds,
                                const std::vector<double>& percentiles) {
  MetricSummary s;
  s.mean_ms = mean(seconds) * 1000.0;
  s.median_ms = median(seconds) * 1000.0;
  s.std_ms = population_stddev(seconds) * 1000.0;
  for (double p : percentiles) s.percentiles_ms.emplace_back(p, percentile(seconds, p) * 1000.0);
  return s;
}

Tpot time_per_output_token(double latency, double ttft, int output_tokens) {
  if (output_tokens <= 1) return {};
  return {true, (latency - ttft) / static_cast<double>(output_tokens - 1)};
}

BenchmarkMetrics calculate_metrics(const std::vector<RequestOutput>& outputs,
                                   const std::vector<int>& input_lens,
                                   const std::vector<int>& output_lens, double duration,
                                   const std::vector<double>& percentiles) {
  BenchmarkMetrics m;
  std::vector<double> ttfts, tpots, itls, e2els;
  double first_start = 0.0, last_end = 0.0;
  bool any = false;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const RequestOutput& o = outputs[i];
    if (!o.success) {
      ++m.failed;
      continue;
    }
    ++m.completed;
    m.total_input += input_lens[i];
    m.total_output += output_lens[i];
    if (const Tpot t = time_per_output_token(o.latency, o.ttft, output_lens[i]); t.valid) {
      tpots.push_back(t.seconds);
    }
    itls.insert(itls.end(), o.itl.begin(), o.itl.end());
    ttfts.push_back(o.ttft);
    e2els.push_back(o.latency);
    first_start = any ? std::min(first_start, o.start_time) : o.start_time;
    last_end = any ? std::max(last_end, o.start_time + o.latency) : o.start_time + o.latency;
    any = true;
  }
  if (duration > 0) {
    m.request_throughput = m.completed / duration;
    m.output_throughput = static_cast<double>(m.total_output) / duration;
    m.total_token_throughput = static_cast<double>(m.total_input + m.total_output) / duration;
  }
  m.ttft = summarize_seconds(ttfts, percentiles);
  m.tpot = summarize_seconds(tpots, percentiles);
  m.itl = summarize_seconds(itls, percentiles);
  m.e2el = summarize_seconds(e2els, percentiles);

  if (any) {
    // Token chunks bucketed by whole seconds since the first successful request started.
    const size_t buckets = static_cast<size_t>(std::ceil(last_end - first_start)) + 1;
    std::vector<double> tokens_per_second(buckets, 0.0);
    std::vector<std::pair<double, int>> events;  // (time, +1 start / -1 end)
    for (const RequestOutput& o : outputs) {
      if (!o.success) continue;
      double t = o.start_time + o.ttft;
      auto count = [&](double at) {
        const double offset = at - first_start;
        if (offset < 0) return;
        const size_t b = static_cast<size_t>(offset);
        if (b < buckets) tokens_per_second[b] += 1.0;
      };
      count(t);
      for (double gap : o.itl) {
        t += gap;
        count(t);
      }
      events.emplace_back(o.start_time, 1);
      events.emplace_back(o.start_time + o.latency, -1);
    }
    // Half-open intervals: at equal times a departure goes before an arrival.
    std::sort(events.begin(), events.end());
    int current = 0;
    for (const auto& [time, delta] : events) {
      current += delta;
      m.max_concurrent_requests = std::max(m.max_concurrent_requests, current);
    }
    m.max_output_tokens_per_s =
        *std::max_element(tokens_per_second.begin(), tokens_per_second.end());
  }
  return m;
}

std::string percentile_word(double pct) {
  if (std::floor(pct) == pct && std::fabs(pct) < 1e15) {
    return std::to_string(static_cast<long long>(pct));
  }
  return python_float_repr(pct);
}

}  // namespace gemmaserve::bench
