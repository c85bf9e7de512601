// Prometheus text for GET /metrics under vLLM's names (vllm/v1/metrics/loggers.py): engine gauges
// and counters from Engine::stats(), latency histograms measured by the server, and gemmaserve's
// own per-attention-type KV block gauges (tests check every block comes back) and the byte
// sizes of the caches requests fill.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <span>
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

// With data parallelism every series repeats per replica, labelled engine="R" as vLLM labels
// its DP engines; the latency histograms and finish counts go to the replica that ran the request.
class ServerMetrics {
 public:
  explicit ServerMetrics(std::string model_name, size_t num_engines = 1);

  void observe_time_to_first_token(double seconds, size_t engine = 0);
  void observe_inter_token_latency(double seconds, size_t engine = 0);
  void observe_e2e_latency(double seconds, size_t engine = 0);
  void observe_request_tokens(int prompt_tokens, int generation_tokens, size_t engine = 0);
  void count_finished(const std::string& finish_reason, size_t engine = 0);

  // `per_engine`: Engine::stats() of each replica, in replica order (num_engines of them).
  std::string render(std::span<const EngineStats> per_engine) const;
  std::string render(const EngineStats& stats) const { return render(std::span(&stats, 1)); }

 private:
  struct PerEngine {
    PerEngine();
    std::string labels;  // engine="R",model_name=".."
    Histogram ttft, itl, e2e, prompt_tokens, generation_tokens;
    std::map<std::string, uint64_t> finished;
  };
  PerEngine& engine(size_t index);

  mutable std::mutex mutex_;
  std::vector<PerEngine> engines_;
};

}  // namespace gemmaserve
