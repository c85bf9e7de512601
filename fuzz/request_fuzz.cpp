// Request bodies as the server reads them: the body text through the JSON reader with its
// nesting limit, then the completions or chat field validation, or the whole /tokenize handler
// (chat rendering included) over the demo model. Bad input may only raise the errors the server
// turns into 4xx answers.
#include <optional>
#include <string_view>

#include "engine/data_parallel/engine_replicas.h"
#include "fuzz_support.h"
#include "server/http/request_body.h"
#include "server/openai/openai_protocol.h"
#include "server/openai/serving_tokenization.h"
#include "server/shared/metrics.h"
#include "server/shared/serving_common.h"
#include "tokenizer/chat_template/chat_template.h"

using namespace gemmaserve;

namespace {

// The demo model served as `serve models/gemma4-demo` would serve it, without the network.
struct DemoServer {
  DemoServer() : engines(engine_args()), metrics("demo"), ctx(engines, options(), metrics) {
    ctx.gemma4 = true;
    if (auto t = load_chat_template(model_dir()))
      ctx.chat_template = ChatTemplate::parse(*t, "demo");
  }
  static std::string model_dir() { return (fuzz::source_root() / "models/gemma4-demo").string(); }
  static EngineArgs engine_args() {
    EngineArgs a;
    a.model = model_dir();
    a.threads = 1;
    a.kv_cache_memory_bytes = 8 << 20;
    a.max_num_seqs = 4;
    return a;
  }
  const ServerOptions& options() {
    opts.served_model_names = {"demo"};
    opts.trust_request_chat_template = true;  // request templates are fuzzed too
    opts.media.disable_url_fetch = true;      // data: URLs only
    return opts;
  }
  ServerOptions opts;
  EngineReplicas engines;  // one replica, as serve runs without --data-parallel-size
  ServerMetrics metrics;
  ServingContext ctx;
};

DemoServer& demo_server() {
  static DemoServer server;
  return server;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int route = data[0] % 3;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  const SamplingParams defaults;
  DemoServer* server = route == 2 ? &demo_server() : nullptr;  // set up outside the checks
  fuzz::expect_input_errors_only([&] {
    const nlohmann::ordered_json body = parse_json_request_body(text);
    if (route == 0) {
      const CompletionRequest r = parse_completion_request(body, defaults);
      fuzz::check(!r.prompts.empty(), "no prompt accepted");
      fuzz::check(r.params.n <= 128, "n above the cap");
    } else if (route == 1) {
      const ChatRequest r = parse_chat_request(body, defaults);
      fuzz::check(r.params.n <= 128, "n above the cap");
      fuzz::check(r.messages.is_array() && !r.messages.empty(), "messages accepted empty");
    } else {
      const nlohmann::ordered_json out = serve_tokenize(server->ctx, body);
      fuzz::check(out["count"].get<size_t>() == out["tokens"].size(), "count differs");
    }
  });
  return 0;
}
