#include "server/shared/metrics.h"

#include <algorithm>
#include <sstream>

#include "core/python_text.h"

namespace gemmaserve {
namespace {

// Prometheus label values escape backslash, quote and newline.
std::string label_value(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out.push_back('\\');
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out.push_back(c);
  }
  return out;
}

std::string number(double v) { return python_float_repr(v); }

void header(std::string& out, const std::string& name, const std::string& type,
            const std::string& help) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void sample(std::string& out, const std::string& name, const std::string& labels, double v) {
  out += name;
  out += "{";
  out += labels;
  out += "} ";
  out += number(v);
  out += "\n";
}

std::vector<double> token_buckets() {
  // vLLM's build_1_2_5_buckets up to a large max_model_len.
  std::vector<double> b;
  for (double m = 1; m <= 1e6; m *= 10) {
    for (double k : {1.0, 2.0, 5.0}) b.push_back(k * m);
  }
  return b;
}

}  // namespace

Histogram::Histogram(std::vector<double> buckets)
    : bounds_(std::move(buckets)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += value;
  ++count_;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& labels) const {
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i];
    const std::string le = i < bounds_.size() ? number(bounds_[i]) : "+Inf";
    out += name + "_bucket{" + labels + ",le=\"" + le + "\"} " + std::to_string(cumulative) + "\n";
  }
  out += name + "_sum{" + labels + "} " + number(sum_) + "\n";
  out += name + "_count{" + labels + "} " + std::to_string(count_) + "\n";
}

ServerMetrics::PerEngine::PerEngine()
    : ttft({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
            1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}),
      itl({0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
           20.0, 40.0, 80.0}),
      e2e({0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
           30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}),
      prompt_tokens(token_buckets()),
      generation_tokens(token_buckets()) {}

ServerMetrics::ServerMetrics(std::string model_name, size_t num_engines)
    : engines_(std::max<size_t>(1, num_engines)) {
  for (size_t i = 0; i < engines_.size(); ++i) {
    engines_[i].labels =
        "engine=\"" + std::to_string(i) + "\",model_name=\"" + label_value(model_name) + "\"";
  }
}

// Under mutex_. An index past the replicas (a caller's bug) counts on the last one.
ServerMetrics::PerEngine& ServerMetrics::engine(size_t index) {
  return engines_[std::min(index, engines_.size() - 1)];
}

void ServerMetrics::observe_time_to_first_token(double s, size_t e) {
  std::lock_guard<std::mutex> lock(mutex_);
  engine(e).ttft.observe(s);
}
void ServerMetrics::observe_inter_token_latency(double s, size_t e) {
  std::lock_guard<std::mutex> lock(mutex_);
  engine(e).itl.observe(s);
}
void ServerMetrics::observe_e2e_latency(double s, size_t e) {
  std::lock_guard<std::mutex> lock(mutex_);
  engine(e).e2e.observe(s);
}
void ServerMetrics::observe_request_tokens(int prompt, int generation, size_t e) {
  std::lock_guard<std::mutex> lock(mutex_);
  engine(e).prompt_tokens.observe(prompt);
  engine(e).generation_tokens.observe(generation);
}
void ServerMetrics::count_finished(const std::string& reason, size_t e) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++engine(e).finished[reason];
}

std::string ServerMetrics::render(std::span<const EngineStats> per_engine) const {
  std::string out;
  const size_t n = std::min(per_engine.size(), engines_.size());
  // One family: its header, then a sample per replica.
  auto family = [&](const char* name, const char* type, const char* help, auto value) {
    header(out, name, type, help);
    for (size_t e = 0; e < n; ++e) sample(out, name, engines_[e].labels, value(per_engine[e]));
  };
  using S = const EngineStats&;
  family("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.",
         [](S st) { return st.num_running; });
  family("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
         [](S st) { return st.num_waiting; });
  family("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.",
         [](S st) { return st.kv_cache_usage; });
  family("vllm:prefix_cache_queries_total", "counter",
         "Prefix cache queries, in terms of number of queried tokens.",
         [](S st) { return static_cast<double>(st.prefix_cache_queries); });
  family("vllm:prefix_cache_hits_total", "counter",
         "Prefix cache hits, in terms of number of cached tokens.",
         [](S st) { return static_cast<double>(st.prefix_cache_hits); });
  family("vllm:mm_cache_queries_total", "counter",
         "Multi-modal cache queries, in terms of number of queried items.",
         [](S st) { return static_cast<double>(st.mm_cache_queries); });
  family("vllm:mm_cache_hits_total", "counter",
         "Multi-modal cache hits, in terms of number of cached items.",
         [](S st) { return static_cast<double>(st.mm_cache_hits); });
  family("vllm:num_preemptions_total", "counter",
         "Cumulative number of preemption from the engine.",
         [](S st) { return static_cast<double>(st.preemptions); });
  family("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.",
         [](S st) { return static_cast<double>(st.prompt_tokens); });
  family("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.",
         [](S st) { return static_cast<double>(st.generation_tokens); });
  {
    std::lock_guard<std::mutex> lock(mutex_);
    header(out, "vllm:request_success_total", "counter",
           "Count of successfully processed requests.");
    for (size_t e = 0; e < n; ++e) {
      std::map<std::string, uint64_t> finished = engines_[e].finished;
      for (const char* r : {"stop", "length", "abort"}) finished.emplace(r, 0);
      for (const auto& [reason, count] : finished) {
        sample(out, "vllm:request_success_total",
               engines_[e].labels + ",finished_reason=\"" + label_value(reason) + "\"",
               static_cast<double>(count));
      }
    }
    auto histogram = [&](const char* name, const char* help, Histogram PerEngine::*member) {
      header(out, name, "histogram", help);
      for (size_t e = 0; e < n; ++e) (engines_[e].*member).render(out, name, engines_[e].labels);
    };
    histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
              &PerEngine::ttft);
    histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
              &PerEngine::itl);
    histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
              &PerEngine::e2e);
    histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.",
              &PerEngine::prompt_tokens);
    histogram("vllm:request_generation_tokens", "Number of generation tokens processed.",
              &PerEngine::generation_tokens);
  }
  // vLLM's SpecDecodingProm counters, present only with --speculative-config.
  if (n > 0 && !per_engine[0].spec_decode_num_accepted_tokens_per_pos.empty()) {
    family("vllm:spec_decode_num_drafts_total", "counter", "Number of spec decoding drafts.",
           [](S st) { return static_cast<double>(st.spec_decode_num_drafts); });
    family("vllm:spec_decode_num_draft_tokens_total", "counter", "Number of draft tokens.",
           [](S st) { return static_cast<double>(st.spec_decode_num_draft_tokens); });
    family("vllm:spec_decode_num_accepted_tokens_total", "counter", "Number of accepted tokens.",
           [](S st) { return static_cast<double>(st.spec_decode_num_accepted_tokens); });
    header(out, "vllm:spec_decode_num_accepted_tokens_per_pos_total", "counter",
           "Accepted tokens per draft position.");
    for (size_t e = 0; e < n; ++e) {
      const auto& per_pos = per_engine[e].spec_decode_num_accepted_tokens_per_pos;
      for (size_t pos = 0; pos < per_pos.size(); ++pos) {
        sample(out, "vllm:spec_decode_num_accepted_tokens_per_pos_total",
               engines_[e].labels + ",position=\"" + std::to_string(pos) + "\"",
               static_cast<double>(per_pos[pos]));
      }
    }
  }
  static const char* kTypeNames[kNumAttentionTypes] = {"sliding", "full"};
  auto per_type = [&](const char* name, const char* help, auto blocks) {
    header(out, name, "gauge", help);
    for (size_t e = 0; e < n; ++e) {
      for (int t = 0; t < kNumAttentionTypes; ++t) {
        sample(out, name, engines_[e].labels + ",attention_type=\"" + kTypeNames[t] + "\"",
               blocks(per_engine[e])[static_cast<size_t>(t)]);
      }
    }
  };
  per_type("gemmaserve:kv_blocks_in_use",
           "KV cache blocks held by requests or the prefix cache's live entries, per attention "
           "type.",
           [](S st) { return st.kv_blocks_in_use; });
  family("gemmaserve:images_encoded_total", "counter",
         "Images run through the vision tower (encoder-cache hits excluded).",
         [](S st) { return static_cast<double>(st.images_encoded); });
  family("gemmaserve:image_encoder_seconds_total", "counter",
         "Wall time of the vision tower runs, in seconds.",
         [](S st) { return st.encoder_seconds; });
  per_type("gemmaserve:kv_blocks_total", "KV cache blocks, per attention type.",
           [](S st) { return st.kv_blocks_total; });
  family("gemmaserve:encoder_cache_bytes", "gauge",
         "Bytes held by the encoded-image cache (bounded by --mm-processor-cache-gb).",
         [](S st) { return static_cast<double>(st.encoder_cache_bytes); });
  family("gemmaserve:encoder_cache_entries", "gauge", "Images in the encoded-image cache.",
         [](S st) { return static_cast<double>(st.encoder_cache_entries); });
  family("gemmaserve:structured_output_cache_bytes", "gauge",
         "Bytes held by the compiled-grammar and token-mask cache (bounded by "
         "--structured-outputs-cache-gb).",
         [](S st) { return static_cast<double>(st.structured_output_cache_bytes); });
  family("gemmaserve:structured_output_cache_entries", "gauge",
         "Compiled grammars and token masks in the structured-output cache.",
         [](S st) { return static_cast<double>(st.structured_output_cache_entries); });
  return out;
}

}  // namespace gemmaserve
