// One client must not hurt the others (issue 35, point 0): a completion request built from the
// fuzz input over the sampling and structured-output fields (allowed_token_ids, bad_words,
// min_tokens, logit_bias, stop, response_format / structured_outputs masks, n, best_of,
// logprobs, prompt_logprobs, ...) runs through the server's /v1/completions handler in a live
// engine beside a fixed greedy request. Findings: the fixed request's tokens differ from its
// tokens alone, the engine stops, the fuzzed request gets a 500 or an error event that is not
// the client's fault, or an exception other than the 4xx/501 the server answers.
#include <fuzzer/FuzzedDataProvider.h>

#include <condition_variable>
#include <iterator>
#include <mutex>
#include <string>
#include <vector>

#include "core/logging.h"
#include "engine/data_parallel/engine_replicas.h"
#include "fuzz_support.h"
#include "server/shared/metrics.h"
#include "server/shared/serving_common.h"
#include "server/openai/serving_completions.h"

using namespace gemmaserve;
using ordered_json = nlohmann::ordered_json;

namespace {

// The demo model served as `serve models/gemma4-demo` would serve it, without the network.
struct DemoServer {
  DemoServer() : engines(engine_args()), metrics("demo"), ctx(engines, options(), metrics) {
    log::set_level(log::Level::kError);  // every refused or failed request logs a warning
    ctx.gemma4 = true;
    EngineRequest r = fixed_request("reference");
    reference = run_fixed(r);
    fuzz::check(reference.outputs.size() == 1 && reference.outputs[0].finish_reason == "length",
                "the fixed request failed alone");
  }
  static EngineArgs engine_args() {
    EngineArgs a;
    a.model = (fuzz::source_root() / "models/gemma4-demo").string();
    a.threads = 1;
    a.max_model_len = 96;
    a.kv_cache_memory_bytes = 8 << 20;
    a.max_num_seqs = 8;
    a.show_progress = false;
    return a;
  }
  const ServerOptions& options() {
    opts.served_model_names = {"demo"};
    opts.disable_log_requests = true;
    return opts;
  }
  EngineRequest fixed_request(const std::string& id) {
    EngineRequest r;
    r.request_id = id;
    r.prompt_token_ids = engines.front().encode_prompt("The weather in Paris is");
    r.params.temperature = 0;
    r.params.ignore_eos = true;
    r.params.max_tokens = 6;
    return r;
  }
  // Queues the fixed request; wait() returns its output.
  struct Pending {
    std::mutex mutex;
    std::condition_variable done;
    std::optional<RequestOutput> output;
    RequestOutput wait() {
      std::unique_lock<std::mutex> lock(mutex);
      done.wait(lock, [&] { return output.has_value(); });
      return *output;
    }
  };
  void start_fixed(EngineRequest r, Pending* pending) {
    engines.front().add_request(std::move(r),
                                [pending](const RequestOutput& out, const RequestOutputDelta&) {
                                  if (!out.finished) return;
                                  std::lock_guard<std::mutex> lock(pending->mutex);
                                  pending->output = out;
                                  pending->done.notify_all();
                                });
  }
  RequestOutput run_fixed(EngineRequest r) {
    Pending pending;
    start_fixed(std::move(r), &pending);
    return pending.wait();
  }
  ServerOptions opts;
  EngineReplicas engines;
  ServerMetrics metrics;
  ServingContext ctx;
  RequestOutput reference;
};

DemoServer& demo_server() {
  static DemoServer server;
  return server;
}

// Ids near the edges: specials, eos / end of turn, the last id, just past the vocabulary.
int32_t pick_id(FuzzedDataProvider& in, const Engine& engine) {
  const int32_t vocab = engine.vocab_size();
  switch (in.ConsumeIntegralInRange(0, 5)) {
    case 0:
      return engine.eos_token_ids().empty() ? 1 : engine.eos_token_ids().front();
    case 1:
      return in.ConsumeIntegralInRange<int32_t>(0, 4);
    case 2:
      return vocab - 1;
    case 3:
      return in.ConsumeIntegralInRange<int32_t>(vocab - 2, vocab + 1);
    case 4:
      return in.ConsumeIntegral<int32_t>();
    default:
      return in.ConsumeIntegralInRange<int32_t>(0, vocab - 1);
  }
}

// The input's bytes as text a JSON body can hold (the server's parser refuses invalid UTF-8).
std::string text_of(FuzzedDataProvider& in, size_t max_length) {
  std::string s = in.ConsumeRandomLengthString(max_length);
  for (char& c : s) c = static_cast<char>(c & 0x7f);
  return s;
}

std::string short_text(FuzzedDataProvider& in) {
  static const char* kWords[] = {"the", " the",  "Paris",   "{",  "}",     "\"", "a", " ",
                                 "\n",  "<eos>", "<turn|>", "is", "sunny", "0",  "x"};
  if (in.ConsumeBool()) return kWords[in.ConsumeIntegralInRange<size_t>(0, std::size(kWords) - 1)];
  return text_of(in, 12);
}

ordered_json id_list(FuzzedDataProvider& in, const Engine& engine, int max_len) {
  ordered_json ids = ordered_json::array();
  const int len = in.ConsumeIntegralInRange(0, max_len);
  for (int i = 0; i < len; ++i) ids.push_back(pick_id(in, engine));
  return ids;
}

// A schema, regex, choice list or grammar: from a few shapes or the input's bytes.
void add_structured(FuzzedDataProvider& in, ordered_json& body) {
  static const char* kSchemas[] = {
      R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]})",
      R"({"type":"string","maxLength":2})", R"({"enum":["x","y"]})", R"({"type":"boolean"})",
      R"({"type":"array","items":{"type":"number"},"minItems":1})"};
  static const char* kRegexes[] = {"[0-9]+", "a|b", "x{2,3}", "\\w+ is", "(ab)*c"};
  static const char* kGrammars[] = {"root ::= \"yes\" | \"no\"", "root ::= [a-z]+",
                                    "root ::= \"{\" root? \"}\""};
  const bool raw = in.ConsumeBool();
  switch (in.ConsumeIntegralInRange(0, 5)) {
    case 0:
      body["response_format"] = {{"type", "json_object"}};
      break;
    case 1: {
      ordered_json schema = ordered_json::parse(
          raw ? std::string("{}") : kSchemas[in.ConsumeIntegralInRange<size_t>(0, 4)]);
      if (raw) schema = ordered_json::parse(text_of(in, 64), nullptr, false);
      if (schema.is_discarded()) schema = ordered_json::object();
      body["response_format"] = {{"type", "json_schema"},
                                 {"json_schema", {{"name", "x"}, {"schema", schema}}}};
      break;
    }
    case 2:
      body["structured_outputs"] = {
          {"regex", raw ? text_of(in, 16) : kRegexes[in.ConsumeIntegralInRange<size_t>(0, 4)]}};
      break;
    case 3: {
      ordered_json choices = ordered_json::array();
      const int n = in.ConsumeIntegralInRange(0, 3);
      for (int i = 0; i < n; ++i) choices.push_back(short_text(in));
      body["structured_outputs"] = {{"choice", choices}};
      break;
    }
    case 4:
      body["structured_outputs"] = {
          {"grammar", raw ? text_of(in, 32) : kGrammars[in.ConsumeIntegralInRange<size_t>(0, 2)]}};
      break;
    default:
      break;  // none
  }
}

ordered_json fuzzed_body(FuzzedDataProvider& in, const Engine& engine) {
  ordered_json body;
  body["model"] = "demo";
  if (in.ConsumeBool()) {
    const std::string first = short_text(in);
    body["prompt"] = first + " " + short_text(in);
  } else {
    ordered_json ids = id_list(in, engine, 6);
    if (ids.empty()) ids.push_back(5);
    body["prompt"] = ids;
  }
  body["max_tokens"] = in.ConsumeIntegralInRange(0, 6);
  if (in.ConsumeBool()) body["min_tokens"] = in.ConsumeIntegralInRange(0, 7);
  if (in.ConsumeBool()) body["n"] = in.ConsumeIntegralInRange(1, 3);
  if (in.ConsumeBool()) body["best_of"] = in.ConsumeIntegralInRange(1, 3);
  static const double kTemperatures[] = {0.0, 1e-6, 0.7, 1.0, 2.0};
  body["temperature"] = kTemperatures[in.ConsumeIntegralInRange<size_t>(0, 4)];
  if (in.ConsumeBool()) body["seed"] = in.ConsumeIntegral<uint32_t>();
  if (in.ConsumeBool()) body["top_k"] = in.ConsumeIntegralInRange(-1, 5);
  if (in.ConsumeBool()) body["top_p"] = in.ConsumeFloatingPointInRange(0.01, 1.0);
  if (in.ConsumeBool()) body["min_p"] = in.ConsumeFloatingPointInRange(0.0, 1.0);
  if (in.ConsumeBool()) body["repetition_penalty"] = in.ConsumeFloatingPointInRange(0.5, 2.0);
  if (in.ConsumeBool()) body["presence_penalty"] = in.ConsumeFloatingPointInRange(-2.0, 2.0);
  if (in.ConsumeBool()) body["frequency_penalty"] = in.ConsumeFloatingPointInRange(-2.0, 2.0);
  if (in.ConsumeBool()) body["allowed_token_ids"] = id_list(in, engine, 4);
  if (in.ConsumeBool()) {
    ordered_json words = ordered_json::array();
    const int n = in.ConsumeIntegralInRange(0, 3);
    for (int i = 0; i < n; ++i) words.push_back(short_text(in));
    body["bad_words"] = words;
  }
  if (in.ConsumeBool()) {
    ordered_json bias = ordered_json::object();
    const int n = in.ConsumeIntegralInRange(0, 3);
    static const double kBiases[] = {-100.0, 100.0, -1e30, 1e30, 0.5};
    for (int i = 0; i < n; ++i) {
      bias[std::to_string(pick_id(in, engine))] =
          in.ConsumeBool() ? kBiases[in.ConsumeIntegralInRange<size_t>(0, 4)]
                           : in.ConsumeFloatingPoint<double>();
    }
    body["logit_bias"] = bias;
  }
  if (in.ConsumeBool()) {
    ordered_json stop = ordered_json::array();
    const int n = in.ConsumeIntegralInRange(0, 2);
    for (int i = 0; i < n; ++i) stop.push_back(short_text(in));
    body["stop"] = stop;
  }
  if (in.ConsumeBool()) body["stop_token_ids"] = id_list(in, engine, 2);
  if (in.ConsumeBool()) body["ignore_eos"] = in.ConsumeBool();
  if (in.ConsumeBool()) body["include_stop_str_in_output"] = in.ConsumeBool();
  if (in.ConsumeBool()) body["skip_special_tokens"] = in.ConsumeBool();
  if (in.ConsumeBool()) body["logprobs"] = in.ConsumeIntegralInRange(-1, 6);
  if (in.ConsumeBool()) body["prompt_logprobs"] = in.ConsumeIntegralInRange(-1, 3);
  if (in.ConsumeBool()) body["echo"] = in.ConsumeBool();
  add_structured(in, body);
  body["stream"] = in.ConsumeBool();
  return body;
}

// The error object of an SSE event, if it is one.
std::optional<ordered_json> stream_error(const std::string& event) {
  const std::string prefix = "data: ";
  if (event.rfind(prefix, 0) != 0 || event.find("[DONE]") != std::string::npos) return {};
  const ordered_json j = ordered_json::parse(event.substr(prefix.size()), nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("error")) return {};
  return j["error"];
}

void check_client_error_status(int status, const std::string& what) {
  const bool client = (status >= 400 && status < 500) || status == 501;
  fuzz::check(client, "the fuzzed request got " + std::to_string(status) + ": " + what);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  DemoServer& server = demo_server();  // set up outside the checks
  Engine& engine = server.engines.front();
  FuzzedDataProvider in(data, size);
  const ordered_json body = fuzzed_body(in, engine);

  DemoServer::Pending fixed;
  server.start_fixed(server.fixed_request("fixed"), &fixed);
  try {
    ServingResponse resp = serve_completion(server.ctx, body);
    if (resp.stream) {
      std::vector<std::string> events;
      resp.stream([&](const std::string& e) {
        events.push_back(e);
        return true;
      });
      fuzz::check(!events.empty() && events.back() == "data: [DONE]\n\n",
                  "a stream that does not end with [DONE]");
      for (const std::string& e : events) {
        if (auto error = stream_error(e)) {
          check_client_error_status(error->value("code", 0), error->dump());
        }
      }
    } else if (resp.status >= 400) {
      check_client_error_status(resp.status, resp.body.dump());
    }
  } catch (const ApiError& e) {
    check_client_error_status(e.status(), e.what());
  } catch (const InputError&) {
  } catch (const nlohmann::json::exception&) {
  } catch (const std::exception& e) {
    fuzz::fail(std::string("unexpected exception: ") + e.what() + " for " + body.dump());
  }
  const RequestOutput out = fixed.wait();
  fuzz::check(!engine.failure().has_value(),
              "the engine stopped: " + engine.failure().value_or("") + " after " + body.dump());
  fuzz::check(out.outputs.size() == 1, "the fixed request has no output");
  fuzz::check(out.outputs[0].token_ids == server.reference.outputs[0].token_ids &&
                  out.outputs[0].finish_reason == server.reference.outputs[0].finish_reason,
              "the fixed request's tokens changed beside " + body.dump());
  return 0;
}
