#include "bench/bench_serve.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <thread>

#include "bench/serve_benchmark.h"
#include "cli/arg_parser.h"
#include "cli/config_file.h"
#include "core/error.h"
#include "core/python_text.h"
#include "tokenizer/tokenizer.h"

namespace gemmaserve {
namespace {

namespace fs = std::filesystem;
using bench::ServeBenchmarkConfig;
using nlohmann::json;
using nlohmann::ordered_json;

constexpr const char* kUsage =
    "usage: gemmaserve bench serve [--backend openai|vllm|openai-chat] [--base-url URL |\n"
    "                              --host H (127.0.0.1) --port P (8000)] [--endpoint PATH]\n"
    "                              [--model NAME] [--served-model-name NAME] [--tokenizer PATH]\n"
    "                              [--dataset-name random|sharegpt] [--dataset-path FILE]\n"
    "                              [--num-prompts N (1000)] [--seed N (0)] [options]\n"
    "Benchmarks a running OpenAI-compatible server (gemmaserve serve, vllm serve, llama-server)\n"
    "with streamed requests, measuring TTFT, TPOT, ITL and E2EL like `vllm bench serve`.\n"
    "  --endpoint PATH             /v1/completions (default) or /v1/chat/completions\n"
    "                              (the default for --backend openai-chat)\n"
    "  --model NAME                served model name; default: the first id of GET /v1/models\n"
    "  --tokenizer PATH            tokenizer.json, .gguf or checkpoint folder: exact random\n"
    "                              prompts and output token counts; without it the server's\n"
    "                              usage and POST /tokenize are used\n"
    "  --random-input-len N (1024) --random-output-len N (128) --random-range-ratio R (0.0)\n"
    "  --random-prefix-len N (0)   --input-len N / --output-len N (set the dataset's lengths)\n"
    "  --sharegpt-output-len N     output length instead of each reply's token count\n"
    "  --disable-shuffle --no-oversample\n"
    "  --request-rate R (inf)      requests/s with Poisson arrivals (gamma with --burstiness B)\n"
    "  --max-concurrency N         at most N requests in flight\n"
    "  --ignore-eos                (always on for the random dataset, as vLLM)\n"
    "  --temperature T --top-p P --top-k K --min-p P --frequency-penalty X\n"
    "  --presence-penalty X --repetition-penalty X --extra-body JSON\n"
    "  --percentile-metrics ttft,tpot,itl[,e2el,client_queue_time,e2el_including_client_queue]\n"
    "  --metric-percentiles 99     comma-separated, e.g. 50,90,99\n"
    "  --num-warmups N (0) --ready-check-timeout-sec S (0: no check)\n"
    "  --save-result [--save-detailed] [--result-dir DIR] [--result-filename NAME] [--label L]\n"
    "  --header KEY=VALUE (repeatable) --api-key KEY (or OPENAI_API_KEY)\n"
    "  --request-id-prefix P --request-timeout S (21600) --disable-tqdm\n"
    "  --config FILE.yaml          these flags from a YAML mapping; the command line wins\n";

constexpr const char* kKnownPercentileMetrics[] = {
    "ttft", "tpot", "itl", "e2el", "client_queue_time", "e2el_including_client_queue"};

// Seconds the benchmark waits on GET /v1/models, /tokenize and the ready check per call.
constexpr std::chrono::seconds kControlTimeout{60};

double parse_rate(const std::string& flag, const std::string& text) {
  if (text == "inf" || text == "Infinity" || text == "infinity") {
    return std::numeric_limits<double>::infinity();
  }
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !(v > 0)) {
    throw InputError(flag + " expects a positive number or inf, got '" + text + "'");
  }
  return v;
}

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> parts;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = text.find(',', pos);
    const std::string part = text.substr(pos, comma == std::string::npos ? comma : comma - pos);
    if (!part.empty()) parts.push_back(part);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return parts;
}

std::vector<double> parse_percentiles(const std::string& text) {
  std::vector<double> out;
  for (const std::string& part : split_commas(text)) {
    char* end = nullptr;
    const double v = std::strtod(part.c_str(), &end);
    if (*end != '\0' || !(v >= 0.0 && v <= 100.0)) {
      throw InputError("--metric-percentiles: '" + part + "' is not a percentile in [0, 100]");
    }
    out.push_back(v);
  }
  if (out.empty()) throw InputError("--metric-percentiles: no percentile given");
  return out;
}

std::vector<std::string> parse_percentile_metrics(const std::string& text) {
  std::vector<std::string> out = split_commas(text);
  for (const std::string& name : out) {
    bool known = false;
    for (const char* k : kKnownPercentileMetrics) known = known || name == k;
    if (!known) {
      throw InputError("--percentile-metrics: unknown metric '" + name +
                       "' (expected ttft, tpot, itl, e2el, client_queue_time or "
                       "e2el_including_client_queue)");
    }
  }
  return out;
}

int int_flag(const ArgParser& p, const std::string& name, int fallback, int minimum) {
  const int v = p.get_int(name, fallback);
  if (v < minimum) {
    throw InputError(name + " must be >= " + std::to_string(minimum) + ", got " +
                     std::to_string(v));
  }
  return v;
}

// The served model: --model, else the first entry of GET /v1/models.
std::string first_served_model(const bench::ServerUrl& server, const bench::HttpHeaders& headers) {
  std::cout << "Model not specified, fetching first model from server..." << std::endl;
  const bench::HttpReply reply = bench::http_get(server, "/v1/models", headers, kControlTimeout);
  const std::string where = server.scheme_host_port + server.path_prefix + "/v1/models";
  if (reply.status != 200) {
    throw InputError("cannot fetch the served models from " + where + ": " +
                     (reply.status ? "HTTP " + std::to_string(reply.status) : reply.error) +
                     " (is the server running? pass --model to skip this)");
  }
  const json models = json::parse(reply.body, nullptr, false);
  if (models.is_discarded() || !models.contains("data") || !models["data"].is_array() ||
      models["data"].empty() || !models["data"][0].contains("id") ||
      !models["data"][0]["id"].is_string()) {
    throw InputError("no models found on the server at " + where);
  }
  const std::string id = models["data"][0]["id"].get<std::string>();
  std::string root = id;
  if (auto r = models["data"][0].find("root"); r != models["data"][0].end() && r->is_string()) {
    root = r->get<std::string>();
  }
  std::cout << "First model name: " << id << ", first model id: " << root << std::endl;
  return id;
}

// A TokenCounter over the server's POST /tokenize, or nullopt when the server has none.
std::optional<bench::TokenCounter> remote_token_counter(const bench::ServerUrl& server,
                                                        const bench::HttpHeaders& headers,
                                                        const std::string& model) {
  auto count = [server, headers, model](const std::string& text, bool add_special) -> int {
    const json body = {{"model", model}, {"prompt", text}, {"add_special_tokens", add_special}};
    const bench::HttpReply reply =
        bench::http_post_json(server, "/tokenize", body, headers, kControlTimeout);
    const json parsed = reply.status == 200 ? json::parse(reply.body, nullptr, false) : json();
    if (parsed.is_object() && parsed.contains("count") && parsed["count"].is_number_integer()) {
      return parsed["count"].get<int>();
    }
    if (parsed.is_object() && parsed.contains("tokens") && parsed["tokens"].is_array()) {
      return static_cast<int>(parsed["tokens"].size());
    }
    throw InputError("POST /tokenize failed: " +
                     (reply.status ? "HTTP " + std::to_string(reply.status) : reply.error));
  };
  try {
    count("Hello", false);
  } catch (const InputError&) {
    return std::nullopt;
  }
  return count;
}

// vLLM checks the first random prompt against the server's /tokenize: a different tokenizer
// would make every prompt's length wrong.
void warn_on_tokenizer_mismatch(const ServeBenchmarkConfig& config,
                                const bench::HttpHeaders& headers,
                                const bench::SampleRequest& first) {
  const std::optional<bench::TokenCounter> remote =
      remote_token_counter(config.server, headers, config.model);
  if (!remote || bench::is_chat_backend(config.backend)) return;
  const int server_count = (*remote)(first.prompt, true);
  if (server_count != first.prompt_len) {
    std::cout << "WARNING: tokenizer mismatch (server=" << server_count
              << ", expected=" << first.prompt_len
              << "): --tokenizer does not match the served model; input token totals come "
                 "from the server's usage."
              << std::endl;
  }
}

std::string local_date_time() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%d-%H%M%S", &tm);
  return buf;
}

// vLLM's default name: {label}-{rate}qps[-concurrency{N}]-{model basename}-{date}.json.
fs::path result_path(const ArgParser& p, const ServeBenchmarkConfig& config,
                     const std::string& label, const std::string& date) {
  std::string model_base = config.model.substr(config.model.find_last_of('/') + 1);
  std::string name = label;
  name.append("-").append(python_float_repr(config.request_rate)).append("qps");
  if (config.max_concurrency > 0) {
    name.append("-concurrency").append(std::to_string(config.max_concurrency));
  }
  name.append("-").append(model_base).append("-").append(date).append(".json");
  if (auto f = p.get("--result-filename")) name = *f;
  fs::path path = name;
  if (auto dir = p.get("--result-dir")) {
    std::error_code ec;
    fs::create_directories(*dir, ec);
    if (ec) throw InputError("--result-dir: cannot create " + *dir + ": " + ec.message());
    path = fs::path(*dir) / name;
  }
  return path;
}

// Sends the first request until it succeeds or `timeout_s` passes, as vLLM's ready check.
void wait_for_endpoint(const ServeBenchmarkConfig& config, const bench::SampleRequest& first,
                       int timeout_s) {
  std::cout << "Waiting for endpoint to become up in " << timeout_s << " seconds" << std::endl;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  for (;;) {
    const bench::RequestOutput out = bench::stream_request(
        config.server, config.endpoint, bench::build_request_body(config, first),
        bench::auth_headers(config.api_key), bench::is_chat_backend(config.backend),
        std::chrono::steady_clock::now(), config.request_timeout);
    if (out.success) return;
    if (std::chrono::steady_clock::now() >= deadline) {
      throw InputError(
          "Initial test run failed - Please make sure benchmark arguments are "
          "correctly specified. Error: " +
          out.error);
    }
    std::this_thread::sleep_for(std::chrono::seconds(5));
  }
}

// Runs the benchmark the parsed flags ask for.
int run_bench_serve(const ArgParser& p) {
  ServeBenchmarkConfig config;
  config.backend = p.get("--backend").value_or("openai");
  const bool chat = bench::is_chat_backend(config.backend);
  config.endpoint = p.get("--endpoint").value_or(chat ? "/v1/chat/completions" : "/v1/completions");
  bench::validate_backend(config.backend, config.endpoint);
  if (auto base = p.get("--base-url")) {
    config.server = bench::parse_server_url(*base);
  } else {
    std::string host = p.get("--host").value_or("127.0.0.1");
    if (host.find(':') != std::string::npos) host = "[" + host + "]";
    config.server = bench::parse_server_url("http://" + host + ":" +
                                            std::to_string(int_flag(p, "--port", 8000, 1)));
  }
  const char* env_key = std::getenv("OPENAI_API_KEY");
  config.api_key = p.get("--api-key").value_or(env_key ? env_key : "");
  for (const std::string& h : p.all("--header")) {
    const size_t eq = h.find('=');
    if (eq == std::string::npos) {
      throw InputError("--header: expected KEY=VALUE, got '" + h + "'");
    }
    config.extra_headers.emplace(h.substr(0, eq), h.substr(eq + 1));
  }
  bench::HttpHeaders control_headers = bench::auth_headers(config.api_key);
  for (const auto& h : config.extra_headers) control_headers.insert(h);

  const std::optional<std::string> model_flag = p.get("--model");
  const std::string model_id =
      model_flag ? *model_flag : first_served_model(config.server, control_headers);
  config.model = p.get("--served-model-name").value_or(model_id);
  config.request_rate = parse_rate("--request-rate", p.get("--request-rate").value_or("inf"));
  config.burstiness = parse_rate("--burstiness", p.get("--burstiness").value_or("1.0"));
  if (p.has("--max-concurrency")) config.max_concurrency = int_flag(p, "--max-concurrency", 0, 1);
  const int seed = p.get_int("--seed", 0);
  config.seed = static_cast<uint64_t>(static_cast<int64_t>(seed));
  config.show_progress = !p.get_flag("--disable-tqdm");
  config.request_timeout = std::chrono::seconds(int_flag(p, "--request-timeout", 6 * 60 * 60, 1));
  if (auto m = p.get("--percentile-metrics"))
    config.percentile_metrics = parse_percentile_metrics(*m);
  if (auto m = p.get("--metric-percentiles")) config.metric_percentiles = parse_percentiles(*m);

  json sampling = json::object();
  for (const char* name : {"--temperature", "--top-p", "--min-p", "--frequency-penalty",
                           "--presence-penalty", "--repetition-penalty"}) {
    if (p.has(name)) {
      std::string key = std::string(name).substr(2);
      for (char& c : key) c = c == '-' ? '_' : c;
      sampling[key] = p.get_double(name, 0.0);
    }
  }
  if (p.has("--top-k")) sampling["top_k"] = p.get_int("--top-k", 0);
  if (auto extra = p.get("--extra-body")) {
    const json parsed = json::parse(*extra, nullptr, false);
    if (parsed.is_discarded() || !parsed.is_object()) {
      throw InputError("--extra-body must be a JSON object, got '" + *extra + "'");
    }
    sampling.update(parsed);
  }
  config.extra_body = sampling;
  if (!config.extra_body.contains("temperature")) {
    std::cout << "WARNING: no --temperature: the server's default sampling applies "
                 "(pass --temperature 0 for greedy)."
              << std::endl;
  }

  // Tokenizer: --tokenizer, else the model folder when --model names one on this machine.
  std::optional<Tokenizer> tokenizer;
  std::optional<std::string> tokenizer_id;
  if (auto t = p.get("--tokenizer")) {
    tokenizer = Tokenizer::from_path(*t);
    tokenizer_id = *t;
  } else if (model_flag && fs::is_directory(*model_flag)) {
    tokenizer = Tokenizer::from_model_dir(*model_flag);
    if (tokenizer) tokenizer_id = *model_flag;
  }
  std::optional<bench::TokenCounter> counter;
  if (tokenizer) {
    counter = bench::local_token_counter(*tokenizer);
  } else {
    counter = remote_token_counter(config.server, control_headers, config.model);
    std::cout << (counter ? "No --tokenizer: counting tokens with the server's POST /tokenize."
                          : "No --tokenizer and no POST /tokenize on the server: prompt and "
                            "output token counts come from the server's usage fields.")
              << std::endl;
  }

  const std::string dataset = p.get("--dataset-name").value_or("random");
  const int num_prompts = int_flag(p, "--num-prompts", 1000, 1);
  std::string id_prefix;
  if (auto prefix = p.get("--request-id-prefix")) {
    id_prefix = *prefix;
  } else {
    std::random_device rd;
    char buf[16];
    std::snprintf(buf, sizeof(buf), "%08x", static_cast<unsigned>(rd()));
    id_prefix = std::string("bench-") + buf + "-";
  }
  std::vector<bench::SampleRequest> requests;
  if (dataset == "random") {
    if (p.has("--dataset-path")) {
      throw InputError(
          "Cannot use 'random' dataset with --dataset-path; use --dataset-name "
          "sharegpt for a dataset file");
    }
    bench::RandomDatasetOptions o;
    o.num_prompts = num_prompts;
    o.input_len = int_flag(p, "--random-input-len", 1024, 0);
    o.output_len = int_flag(p, "--random-output-len", 128, 1);
    if (p.has("--input-len")) o.input_len = int_flag(p, "--input-len", 0, 0);
    if (p.has("--output-len")) o.output_len = int_flag(p, "--output-len", 0, 1);
    o.range_ratio = p.get_double("--random-range-ratio", 0.0);
    o.prefix_len = int_flag(p, "--random-prefix-len", 0, 0);
    o.seed = config.seed;
    o.request_id_prefix = id_prefix;
    requests = tokenizer ? bench::sample_random_requests(*tokenizer, o)
                         : bench::sample_random_text_requests(o, counter ? &*counter : nullptr);
    // vLLM ignores EOS on random prompts so every request runs to its output length.
    config.ignore_eos = true;
    if (tokenizer) warn_on_tokenizer_mismatch(config, control_headers, requests.front());
  } else if (dataset == "sharegpt") {
    const std::optional<std::string> path = p.get("--dataset-path");
    if (!path) throw InputError("--dataset-name sharegpt needs --dataset-path FILE");
    if (!counter) {
      throw InputError(
          "--dataset-name sharegpt needs --tokenizer (or a server with POST "
          "/tokenize) to count prompt and reply tokens");
    }
    bench::ShareGptOptions o;
    o.num_prompts = num_prompts;
    o.seed = config.seed;
    if (p.has("--sharegpt-output-len")) o.output_len = int_flag(p, "--sharegpt-output-len", 0, 1);
    if (p.has("--output-len")) o.output_len = int_flag(p, "--output-len", 0, 1);
    o.disable_shuffle = p.get_flag("--disable-shuffle");
    o.no_oversample = p.get_flag("--no-oversample");
    o.request_id_prefix = id_prefix;
    requests = bench::sample_sharegpt_requests(bench::load_sharegpt(*path), o, *counter);
  } else {
    throw InputError("--dataset-name: unsupported dataset '" + dataset +
                     "' (expected random or sharegpt)");
  }
  if (p.get_flag("--ignore-eos")) config.ignore_eos = true;

  if (const int ready_s = int_flag(p, "--ready-check-timeout-sec", 0, 0); ready_s > 0) {
    wait_for_endpoint(config, requests.front(), ready_s);
    std::cout << "Initial test run completed." << std::endl;
  }
  if (const int warmups = int_flag(p, "--num-warmups", 0, 0); warmups > 0) {
    std::cout << "Warming up with " << warmups << " requests..." << std::endl;
    ServeBenchmarkConfig warm = config;
    warm.request_rate = std::numeric_limits<double>::infinity();
    warm.show_progress = false;
    const std::vector<bench::SampleRequest> copies(static_cast<size_t>(warmups), requests.front());
    bench::run_serve_benchmark(warm, copies, nullptr);
    std::cout << "Warmup run completed." << std::endl;
  }

  std::cout << "Starting main benchmark run..." << std::endl;
  std::cout << "Traffic request rate: " << python_float_repr(config.request_rate) << "\n";
  std::cout << "Burstiness factor: " << python_float_repr(config.burstiness) << " ("
            << (config.burstiness == 1.0 ? "Poisson process" : "Gamma distribution") << ")\n";
  std::cout << "Maximum request concurrency: "
            << (config.max_concurrency > 0 ? std::to_string(config.max_concurrency) : "None")
            << std::endl;
  const bench::ServeBenchmarkRun run =
      bench::run_serve_benchmark(config, requests, counter ? &*counter : nullptr);
  std::cout << bench::format_report(config, run) << std::flush;

  if (p.get_flag("--save-result")) {
    const std::string date = local_date_time();
    const std::string label = p.get("--label").value_or(config.backend);
    ordered_json setup;
    setup["date"] = date;
    setup["endpoint_type"] = config.backend;
    setup["backend"] = config.backend;
    setup["label"] = p.has("--label") ? ordered_json(label) : ordered_json(nullptr);
    setup["model_id"] = model_id;
    setup["tokenizer_id"] = tokenizer_id ? ordered_json(*tokenizer_id) : ordered_json(nullptr);
    setup["num_prompts"] = num_prompts;
    setup["request_rate"] =
        std::isinf(config.request_rate) ? ordered_json("inf") : ordered_json(config.request_rate);
    setup["burstiness"] = config.burstiness;
    setup["max_concurrency"] =
        config.max_concurrency > 0 ? ordered_json(config.max_concurrency) : ordered_json(nullptr);
    const ordered_json result =
        bench::result_json(config, run, std::move(setup), p.get_flag("--save-detailed"));
    const fs::path path = result_path(p, config, label, date);
    std::ofstream out(path);
    if (!out) throw InputError("--save-result: cannot write " + path.string());
    out << result.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
    std::cout << "Saved result to " << path.string() << std::endl;
  }
  return 0;
}

}  // namespace

int run_bench_serve_command(const std::vector<std::string>& args) {
  ArgParser p;
  p.value("--backend").value("--base-url").value("--host").value("--port").value("--endpoint");
  p.value("--model").value("--served-model-name").value("--tokenizer").value("--dataset-name");
  p.value("--dataset-path").value("--num-prompts").value("--seed").value("--random-input-len");
  p.value("--random-output-len").value("--random-range-ratio").value("--random-prefix-len");
  p.value("--input-len").value("--output-len").value("--sharegpt-output-len");
  p.value("--request-rate").value("--burstiness").value("--max-concurrency");
  p.value("--temperature").value("--top-p").value("--top-k").value("--min-p");
  p.value("--frequency-penalty").value("--presence-penalty").value("--repetition-penalty");
  p.json("--extra-body").value("--percentile-metrics").value("--metric-percentiles");
  p.value("--result-dir").value("--result-filename").value("--label").list("--header");
  p.value("--api-key").value("--request-id-prefix").value("--request-timeout");
  p.value("--num-warmups").value("--ready-check-timeout-sec").value("--config");
  p.flag("--ignore-eos").flag("--save-result").flag("--save-detailed").flag("--disable-tqdm");
  p.flag("--disable-shuffle").flag("--no-oversample").flag("--help", {"-h"});
  const ConfigFileFlags config_file = parse_with_config_file(p, args, 0);
  if (p.get_flag("--help")) {
    std::cout << kUsage;
    return 0;
  }
  return config_file.explaining([&] { return run_bench_serve(p); });
}

}  // namespace gemmaserve
