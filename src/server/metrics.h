// Prometheus text for GET /metrics under vLLM's names (vllm/v1/metrics/loggers.py): engine gauges
// and counters from Engine::stats(), latency histograms measured by the server, and gemmaserve's
// own per-attention-type KV block gauges (tests check every block comes back).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace gemmaserve {

class Histogram {
 public:
  explicit Histogram(std::vector<double> buckets);
  void observe(double value);
  // Appends NAME_bucket/_sum/_count lines with `labels` (without braces).
  void render(std::string& out, const std::string& name, const std::string& labels) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative
  double sum_ = 0;
  uint64_t count_ = 0;
};

class ServerMetrics {
 public:
  explicit ServerMetrics(std::string model_name);

  void observe_time_to_first_token(double seconds);
  void observe_inter_token_latency(double seconds);
  void observe_e2e_latency(double seconds);
  void observe_request_tokens(int prompt_tokens, int generation_tokens);
  void count_finished(const std::string& finish_reason);

  std::string render(const EngineStats& stats) const;

 private:
  std::string labels_;  // model_name="..",engine="0"
  mutable std::mutex mutex_;
  Histogram ttft_, itl_, e2e_, prompt_tokens_, generation_tokens_;
  std::map<std::string, uint64_t> finished_;
};

}  // namespace gemmaserve
