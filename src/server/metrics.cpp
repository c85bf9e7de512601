#include "server/metrics.h"

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

ServerMetrics::ServerMetrics(std::string model_name)
    : labels_("engine=\"0\",model_name=\"" + label_value(model_name) + "\""),
      ttft_({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
             1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}),
      itl_({0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
            20.0, 40.0, 80.0}),
      e2e_({0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
            30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}),
      prompt_tokens_(token_buckets()),
      generation_tokens_(token_buckets()) {}

void ServerMetrics::observe_time_to_first_token(double s) {
  std::lock_guard<std::mutex> lock(mutex_);
  ttft_.observe(s);
}
void ServerMetrics::observe_inter_token_latency(double s) {
  std::lock_guard<std::mutex> lock(mutex_);
  itl_.observe(s);
}
void ServerMetrics::observe_e2e_latency(double s) {
  std::lock_guard<std::mutex> lock(mutex_);
  e2e_.observe(s);
}
void ServerMetrics::observe_request_tokens(int prompt, int generation) {
  std::lock_guard<std::mutex> lock(mutex_);
  prompt_tokens_.observe(prompt);
  generation_tokens_.observe(generation);
}
void ServerMetrics::count_finished(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++finished_[reason];
}

namespace {

// vLLM's SpecDecodingProm counters, present only with --speculative-config.
void render_spec_decode(std::string& out, const std::string& l, const EngineStats& st) {
  header(out, "vllm:spec_decode_num_drafts_total", "counter", "Number of spec decoding drafts.");
  sample(out, "vllm:spec_decode_num_drafts_total", l,
         static_cast<double>(st.spec_decode_num_drafts));
  header(out, "vllm:spec_decode_num_draft_tokens_total", "counter", "Number of draft tokens.");
  sample(out, "vllm:spec_decode_num_draft_tokens_total", l,
         static_cast<double>(st.spec_decode_num_draft_tokens));
  header(out, "vllm:spec_decode_num_accepted_tokens_total", "counter",
         "Number of accepted tokens.");
  sample(out, "vllm:spec_decode_num_accepted_tokens_total", l,
         static_cast<double>(st.spec_decode_num_accepted_tokens));
  header(out, "vllm:spec_decode_num_accepted_tokens_per_pos_total", "counter",
         "Accepted tokens per draft position.");
  for (size_t pos = 0; pos < st.spec_decode_num_accepted_tokens_per_pos.size(); ++pos) {
    sample(out, "vllm:spec_decode_num_accepted_tokens_per_pos_total",
           l + ",position=\"" + std::to_string(pos) + "\"",
           static_cast<double>(st.spec_decode_num_accepted_tokens_per_pos[pos]));
  }
}

}  // namespace

std::string ServerMetrics::render(const EngineStats& st) const {
  std::string out;
  const std::string& l = labels_;
  header(out, "vllm:num_requests_running", "gauge",
         "Number of requests in model execution batches.");
  sample(out, "vllm:num_requests_running", l, st.num_running);
  header(out, "vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.");
  sample(out, "vllm:num_requests_waiting", l, st.num_waiting);
  header(out, "vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.");
  sample(out, "vllm:kv_cache_usage_perc", l, st.kv_cache_usage);
  header(out, "vllm:prefix_cache_queries_total", "counter",
         "Prefix cache queries, in terms of number of queried tokens.");
  sample(out, "vllm:prefix_cache_queries_total", l, static_cast<double>(st.prefix_cache_queries));
  header(out, "vllm:prefix_cache_hits_total", "counter",
         "Prefix cache hits, in terms of number of cached tokens.");
  sample(out, "vllm:prefix_cache_hits_total", l, static_cast<double>(st.prefix_cache_hits));
  header(out, "vllm:mm_cache_queries_total", "counter",
         "Multi-modal cache queries, in terms of number of queried items.");
  sample(out, "vllm:mm_cache_queries_total", l, static_cast<double>(st.mm_cache_queries));
  header(out, "vllm:mm_cache_hits_total", "counter",
         "Multi-modal cache hits, in terms of number of cached items.");
  sample(out, "vllm:mm_cache_hits_total", l, static_cast<double>(st.mm_cache_hits));
  header(out, "vllm:num_preemptions_total", "counter",
         "Cumulative number of preemption from the engine.");
  sample(out, "vllm:num_preemptions_total", l, static_cast<double>(st.preemptions));
  header(out, "vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.");
  sample(out, "vllm:prompt_tokens_total", l, static_cast<double>(st.prompt_tokens));
  header(out, "vllm:generation_tokens_total", "counter", "Number of generation tokens processed.");
  sample(out, "vllm:generation_tokens_total", l, static_cast<double>(st.generation_tokens));
  std::map<std::string, uint64_t> finished;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    finished = finished_;
  }
  for (const char* r : {"stop", "length", "abort"}) finished.emplace(r, 0);
  header(out, "vllm:request_success_total", "counter", "Count of successfully processed requests.");
  for (const auto& [reason, count] : finished) {
    sample(out, "vllm:request_success_total",
           l + ",finished_reason=\"" + label_value(reason) + "\"", static_cast<double>(count));
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    header(out, "vllm:time_to_first_token_seconds", "histogram",
           "Histogram of time to first token in seconds.");
    ttft_.render(out, "vllm:time_to_first_token_seconds", l);
    header(out, "vllm:inter_token_latency_seconds", "histogram",
           "Histogram of inter-token latency in seconds.");
    itl_.render(out, "vllm:inter_token_latency_seconds", l);
    header(out, "vllm:e2e_request_latency_seconds", "histogram",
           "Histogram of e2e request latency in seconds.");
    e2e_.render(out, "vllm:e2e_request_latency_seconds", l);
    header(out, "vllm:request_prompt_tokens", "histogram", "Number of prefill tokens processed.");
    prompt_tokens_.render(out, "vllm:request_prompt_tokens", l);
    header(out, "vllm:request_generation_tokens", "histogram",
           "Number of generation tokens processed.");
    generation_tokens_.render(out, "vllm:request_generation_tokens", l);
  }
  if (!st.spec_decode_num_accepted_tokens_per_pos.empty()) render_spec_decode(out, l, st);
  static const char* kTypeNames[kNumAttentionTypes] = {"sliding", "full"};
  header(
      out, "gemmaserve:kv_blocks_in_use", "gauge",
      "KV cache blocks held by requests or the prefix cache's live entries, per attention type.");
  for (int t = 0; t < kNumAttentionTypes; ++t) {
    sample(out, "gemmaserve:kv_blocks_in_use", l + ",attention_type=\"" + kTypeNames[t] + "\"",
           st.kv_blocks_in_use[static_cast<size_t>(t)]);
  }
  header(out, "gemmaserve:images_encoded_total", "counter",
         "Images run through the vision tower (encoder-cache hits excluded).");
  sample(out, "gemmaserve:images_encoded_total", l, static_cast<double>(st.images_encoded));
  header(out, "gemmaserve:image_encoder_seconds_total", "counter",
         "Wall time of the vision tower runs, in seconds.");
  sample(out, "gemmaserve:image_encoder_seconds_total", l, st.encoder_seconds);
  header(out, "gemmaserve:kv_blocks_total", "gauge", "KV cache blocks, per attention type.");
  for (int t = 0; t < kNumAttentionTypes; ++t) {
    sample(out, "gemmaserve:kv_blocks_total", l + ",attention_type=\"" + kTypeNames[t] + "\"",
           st.kv_blocks_total[static_cast<size_t>(t)]);
  }
  return out;
}

}  // namespace gemmaserve
