#include "cli/serve_command.h"

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <thread>

#include "cli/arg_parser.h"
#include "cli/engine_flags.h"
#include "cli/tensor_parallel_launch.h"
#include "core/error.h"
#include "core/logging.h"
#include "engine/data_parallel/engine_replicas.h"
#include "engine/engine.h"
#include "engine/engine_setup.h"
#include "server/chat_rendering.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/serving_common.h"
#include "tokenizer/tokenizer.h"

namespace gemmaserve {
namespace {

using ordered_json = nlohmann::ordered_json;

constexpr const char* kUsage =
    "usage: gemmaserve serve MODEL_DIR [options]      (or --model MODEL_DIR)\n"
    "OpenAI-compatible server with vLLM's routes and flags.\n"
    "server options (vLLM's names):\n"
    "  --host H (0.0.0.0)  --port N (8000; 0 = any free port)\n"
    "  --served-model-name NAME...        names clients use in 'model' (default: MODEL_DIR)\n"
    "  --api-key KEY                      require Authorization: Bearer KEY on /v1 (also env\n"
    "                                     VLLM_API_KEY or GEMMASERVE_API_KEY)\n"
    "  --chat-template FILE|TEXT          override the checkpoint's chat template\n"
    "  --trust-request-chat-template      allow a per-request chat_template\n"
    "  --default-chat-template-kwargs JSON e.g. '{\"enable_thinking\": true}'\n"
    "  --enable-auto-tool-choice  --tool-call-parser gemma4|none  --reasoning-parser gemma4|none\n"
    "                                     (both parsers are on by default for Gemma 4)\n"
    "  --structured-outputs-config JSON  '{\"disable_any_whitespace\": true}': JSON answers "
    "without\n"
    "                                     blank space (the other keys, vLLM's backends, are "
    "ignored)\n"
    "  --max-logprobs N (20)\n"
    "  --max-request-size-mb N (64)  --max-waiting-requests N (8 x --max-num-seqs; more: 503)\n"
    "  --max-connections N (1024)         open connections; more get 503 and are closed\n"
    "  --request-timeout S                abort a request S seconds after it was queued (504;\n"
    "                                     default: no deadline)\n"
    "  --shutdown-timeout S (0)           on SIGTERM/SIGINT, let running requests finish for up\n"
    "                                     to S seconds, then abort the rest and exit 0\n"
    "  --http-timeout S (30)              a client must send a whole request, and take each\n"
    "                                     write of the answer, within S seconds, or is cut\n"
    "  --disable-log-requests  --uvicorn-log-level debug|info|warning|error|critical\n"
    "images in chat (image_url parts; data: URLs always work):\n"
    "  --allowed-local-media-path DIR     allow file:// URLs under DIR (refused without it)\n"
    "  --allowed-media-domains HOST...    http(s) image URLs (and their redirects) only from\n"
    "                                     these hosts (default: any host)\n"
    "  --image-fetch-timeout S            seconds for one http(s) image fetch, redirects\n"
    "                                     included (env VLLM_IMAGE_FETCH_TIMEOUT, default 5)\n"
    "  --disable-media-url-redirects      do not follow redirects of image URLs (also env\n"
    "                                     VLLM_MEDIA_URL_ALLOW_REDIRECTS=0)\n"
    "  --disable-media-url-fetch          no network fetches at all: http(s) image URLs get a\n"
    "                                     400; data: and allowed file:// URLs still work\n"
    "  (env VLLM_MEDIA_EGRESS_BLOCK_PRIVATE=1: refuse loopback/private/link-local addresses)\n"
    "accepted for compatibility, logged and ignored on CPU:\n"
    "  --pipeline-parallel-size/-pp, --enforce-eager, --compilation-config, --trust-remote-code,\n"
    "  --dtype, --enable-chunked-prefill, --async-scheduling, --kv-cache-dtype, "
    "--quantization/-q,\n"
    "  ...\n";

// Flags vLLM users pass that have no meaning (yet) on one CPU process.
const std::vector<std::string>& ignored_value_flags() {
  static const std::vector<std::string> flags = {"--pipeline-parallel-size",
                                                 "--compilation-config",
                                                 "--dtype",
                                                 "--kv-cache-dtype",
                                                 "--quantization",
                                                 "--chat-template-content-format",
                                                 "--swap-space",
                                                 "--speculative-config",
                                                 "--allowed-origins",
                                                 "--load-format",
                                                 "--task",
                                                 "--max-num-partial-prefills"};
  return flags;
}
const std::vector<std::string>& ignored_bool_flags() {
  static const std::vector<std::string> flags = {"--enforce-eager",
                                                 "--trust-remote-code",
                                                 "--enable-chunked-prefill",
                                                 "--async-scheduling",
                                                 "--disable-log-stats",
                                                 "--enable-prompt-tokens-details",
                                                 "--enable-request-id-headers",
                                                 "--enable-tokenizer-info-endpoint",
                                                 "--language-model-only",
                                                 "--disable-uvicorn-access-log",
                                                 "--enable-log-requests",
                                                 "--enable-log-outputs"};
  return flags;
}

// vLLM's nargs="+" flags (--served-model-name, --allowed-media-domains) and its short aliases,
// rewritten for ArgParser.
std::vector<std::string> normalize_args(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-tp") {
      out.push_back("--tensor-parallel-size");
    } else if (a == "-dp") {
      out.push_back("--data-parallel-size");
    } else if (a == "-pp") {
      out.push_back("--pipeline-parallel-size");
    } else if (a == "-q") {
      out.push_back("--quantization");
    } else if (a == "--served-model-name" || a == "--allowed-media-domains") {
      bool any = false;
      while (i + 1 < args.size() && args[i + 1].rfind("-", 0) != 0) {
        out.push_back(a);
        out.push_back(args[++i]);
        any = true;
      }
      if (!any) throw InputError("flag " + a + " needs a value");
    } else {
      out.push_back(a);
    }
  }
  return out;
}

ordered_json parse_json_object_flag(const std::string& flag, const std::string& text) {
  ordered_json j;
  try {
    j = ordered_json::parse(text);
  } catch (const std::exception& e) {
    throw InputError(flag + ": invalid JSON: " + e.what());
  }
  if (!j.is_object()) throw InputError(flag + ": must be a JSON object");
  return j;
}

bool parser_enabled(const std::string& flag, const std::string& value, bool gemma4) {
  if (value.empty()) return gemma4;
  if (value == "none") return false;
  if (value == "gemma4") {
    if (!gemma4) {
      GS_LOG_WARNING << flag << " gemma4 on a model that is not Gemma 4";
    }
    return true;
  }
  throw InputError(flag + ": unknown parser '" + value + "' (gemmaserve has gemma4 and none)");
}

// The media room's settings from the flags and vLLM's environment variables.
media::MediaConnectorOptions media_options(const ArgParser& p) {
  media::MediaConnectorOptions m;
  m.allowed_local_media_path = p.get("--allowed-local-media-path").value_or("");
  m.allowed_media_domains = p.all("--allowed-media-domains");
  double timeout = m.fetch_timeout_s;
  if (const char* env = std::getenv("VLLM_IMAGE_FETCH_TIMEOUT"); env && *env) {
    try {
      timeout = std::stod(env);
    } catch (const std::exception&) {
      throw InputError(std::string("VLLM_IMAGE_FETCH_TIMEOUT must be a number, got '") + env + "'");
    }
  }
  m.fetch_timeout_s = p.get_double("--image-fetch-timeout", timeout);
  if (!(m.fetch_timeout_s > 0)) throw InputError("--image-fetch-timeout must be positive");
  if (const char* env = std::getenv("VLLM_MEDIA_URL_ALLOW_REDIRECTS"); env && *env) {
    const std::string v = env;
    m.allow_redirects = !(v == "0" || v == "false" || v == "False");
  }
  if (p.get_flag("--disable-media-url-redirects")) m.allow_redirects = false;
  if (const char* env = std::getenv("VLLM_MEDIA_EGRESS_BLOCK_PRIVATE"); env && *env) {
    const std::string v = env;
    m.block_private_addresses = !(v == "0" || v == "false" || v == "False");
  }
  m.disable_url_fetch = p.get_flag("--disable-media-url-fetch");
  return m;
}

}  // namespace

int run_serve_command(const std::vector<std::string>& raw_args) {
  ArgParser p;
  add_engine_flags(p);
  p.value("--model").value("--host").value("--port").value("--served-model-name");
  p.value("--api-key").value("--chat-template").value("--default-chat-template-kwargs");
  p.value("--tool-call-parser").value("--reasoning-parser");
  p.value("--uvicorn-log-level").value("--max-request-size-mb").value("--max-waiting-requests");
  p.value("--max-logprobs").value("--max-connections").value("--structured-outputs-config");
  p.value("--request-timeout").value("--shutdown-timeout").value("--http-timeout");
  p.value("--allowed-local-media-path").value("--allowed-media-domains");
  p.value("--image-fetch-timeout");
  p.flag("--disable-media-url-fetch").flag("--disable-media-url-redirects");
  p.flag("--trust-request-chat-template").flag("--enable-auto-tool-choice");
  p.flag("--disable-log-requests").flag("--help", {"-h"});
  for (const auto& f : ignored_value_flags()) p.value(f);
  for (const auto& f : ignored_bool_flags()) p.flag(f);
  p.parse(normalize_args(raw_args), 1);
  if (p.get_flag("--help")) {
    std::cout << kUsage << engine_flags_usage();
    return 0;
  }
  std::string model;
  if (!p.positionals().empty()) model = p.positionals()[0];
  if (auto m = p.get("--model")) {
    if (!model.empty() && model != *m) {
      throw InputError("serve got two models: '" + model + "' and --model '" + *m + "'");
    }
    model = *m;
  }
  if (model.empty()) throw InputError("serve needs MODEL_DIR (or --model)\n" + std::string(kUsage));
  if (auto lvl = p.get("--uvicorn-log-level")) log::set_level(log::parse_level(*lvl));

  ServerOptions opt;
  opt.host = p.get("--host").value_or(opt.host);
  opt.port = p.get_int("--port", opt.port);
  if (opt.port < 0 || opt.port > 65535) throw InputError("--port must be in [0, 65535]");
  opt.served_model_names = p.all("--served-model-name");
  if (opt.served_model_names.empty()) opt.served_model_names.push_back(model);
  if (auto k = p.get("--api-key")) {
    opt.api_key = *k;
  } else if (const char* env = std::getenv("VLLM_API_KEY"); env && *env) {
    opt.api_key = env;
  } else if (const char* genv = std::getenv("GEMMASERVE_API_KEY"); genv && *genv) {
    opt.api_key = genv;
  }
  if (auto t = p.get("--chat-template")) {
    // vLLM refuses a path-like value that is not a file instead of rendering it as text.
    const bool path_like = t->find_first_of("{}\n") == std::string::npos &&
                           (t->find('/') != std::string::npos || t->ends_with(".jinja"));
    if (path_like && !std::filesystem::exists(*t)) {
      throw InputError("--chat-template: '" + *t + "' looks like a path, but no such file exists");
    }
    opt.chat_template = resolve_chat_template_arg(*t);
  }
  opt.trust_request_chat_template = p.get_flag("--trust-request-chat-template");
  if (auto kw = p.get("--default-chat-template-kwargs")) {
    opt.default_chat_template_kwargs =
        parse_json_object_flag("--default-chat-template-kwargs", *kw);
  }
  if (auto so = p.get("--structured-outputs-config")) {
    const ordered_json config = parse_json_object_flag("--structured-outputs-config", *so);
    for (const auto& [key, value] : config.items()) {
      if (key != "disable_any_whitespace") {
        GS_LOG_WARNING << "--structured-outputs-config: '" << key << "' is ignored (gemmaserve "
                       << "has one structured-output backend)";
      } else if (!value.is_boolean()) {
        throw InputError(
            "--structured-outputs-config: disable_any_whitespace must be true or false");
      } else {
        opt.disable_any_whitespace = value.get<bool>();
      }
    }
  }
  opt.enable_auto_tool_choice = p.get_flag("--enable-auto-tool-choice");
  opt.tool_call_parser = p.get("--tool-call-parser").value_or("");
  opt.reasoning_parser = p.get("--reasoning-parser").value_or("");
  for (const auto& [flag, value] : {std::pair{"--tool-call-parser", opt.tool_call_parser},
                                    std::pair{"--reasoning-parser", opt.reasoning_parser}}) {
    if (!value.empty() && value != "gemma4" && value != "none") {
      throw InputError(std::string(flag) + ": unknown parser '" + value +
                       "' (gemmaserve has gemma4 and none)");
    }
  }
  opt.disable_log_requests = p.get_flag("--disable-log-requests");
  const int size_mb = p.get_int("--max-request-size-mb", 64);
  if (size_mb <= 0) throw InputError("--max-request-size-mb must be positive");
  opt.max_request_size_bytes = static_cast<size_t>(size_mb) << 20;
  opt.max_logprobs = p.get_int("--max-logprobs", opt.max_logprobs);
  opt.max_connections = p.get_int("--max-connections", opt.max_connections);
  if (opt.max_connections <= 0) throw InputError("--max-connections must be positive");
  opt.request_timeout_s = p.get_double("--request-timeout", opt.request_timeout_s);
  if (opt.request_timeout_s < 0) throw InputError("--request-timeout must not be negative");
  opt.shutdown_timeout_s = p.get_double("--shutdown-timeout", opt.shutdown_timeout_s);
  if (opt.shutdown_timeout_s < 0) throw InputError("--shutdown-timeout must not be negative");
  opt.http_timeout_s = p.get_double("--http-timeout", opt.http_timeout_s);
  if (!(opt.http_timeout_s > 0)) throw InputError("--http-timeout must be positive");
  opt.media = media_options(p);
  const EngineArgs ea = engine_args_from_flags(p, model);
  if (run_as_tensor_parallel_follower(ea)) return 0;
  opt.max_waiting_requests = p.get_int("--max-waiting-requests", 8 * ea.max_num_seqs);
  if (opt.max_waiting_requests <= 0) throw InputError("--max-waiting-requests must be positive");

  for (const auto& f : ignored_value_flags()) {
    if (auto v = p.get(f)) {
      GS_LOG_WARNING << f << " " << *v << " is accepted for vLLM compatibility and ignored: "
                     << "gemmaserve runs one CPU process (float32 compute)";
    }
  }
  for (const auto& f : ignored_bool_flags()) {
    if (p.get_flag(f)) {
      GS_LOG_INFO << f << " is accepted for vLLM compatibility; no effect here";
    }
  }

  // SIGINT/SIGTERM are taken by one waiting thread; blocked before any other thread starts.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  EngineReplicas replicas(ea);
  Engine& engine = replicas.front();
  ServerMetrics metrics(opt.served_model_names.front(), replicas.size());
  ServingContext ctx{replicas, opt, metrics};
  ctx.generation =
      resolve_generation_defaults(model, ea.generation_config, ea.override_generation_config);
  ctx.gemma4 = engine.model_config().model_type.rfind("gemma4", 0) == 0;
  ctx.reasoning_parser = parser_enabled("--reasoning-parser", opt.reasoning_parser, ctx.gemma4);
  ctx.tool_parser = parser_enabled("--tool-call-parser", opt.tool_call_parser, ctx.gemma4);
  if (opt.chat_template) {
    ctx.chat_template = ChatTemplate::parse(*opt.chat_template, "--chat-template");
  } else if (auto t = load_chat_template(model)) {
    ctx.chat_template = ChatTemplate::parse(*t, model + " chat template");
  } else {
    GS_LOG_WARNING << model << " has no chat template; /v1/chat/completions needs "
                   << "--chat-template or a per-request chat_template";
  }
  if (const Tokenizer* tok = engine.tokenizer()) {
    ctx.bos_token = token_text_or_empty(*tok, tok->bos_id());
    if (!tok->eos_ids().empty()) ctx.eos_token = token_text_or_empty(*tok, tok->eos_ids()[0]);
  }
  std::string eos;
  for (int32_t id : engine.eos_token_ids()) eos += (eos.empty() ? "" : ",") + std::to_string(id);
  GS_LOG_INFO << "serving " << model << " as '" << opt.served_model_names.front()
              << "', max_model_len " << engine.max_model_len() << ", stop token ids [" << eos
              << "], reasoning parser " << (ctx.reasoning_parser ? "gemma4" : "off")
              << ", tool parser " << (ctx.tool_parser ? "gemma4" : "off");

  HttpServer server(ctx);
  const int port = server.bind(opt.host, opt.port);
  std::atomic<bool> listening = true;
  std::atomic<bool> engine_failed = false;
  std::thread signal_thread([&server, &listening, &opt, &replicas, &engine_failed, signals] {
    // A failed engine serves nobody again: answer what is in flight, then exit non-zero so a
    // supervisor restarts the server (vLLM's API server exits on EngineDeadError).
    const timespec poll{0, 200'000'000};
    int sig = -1;
    while (sig < 0) {
      sig = sigtimedwait(&signals, nullptr, &poll);
      if (sig >= 0 || !listening) break;
      if (auto failure = replicas.failure()) {
        GS_LOG_ERROR << "the engine stopped after an error (" << *failure
                     << "); exiting so that a supervisor restarts the server";
        engine_failed = true;
        server.shut_down(opt.shutdown_timeout_s);
        return;
      }
    }
    if (!listening) return;  // the listener ended by itself
    GS_LOG_INFO << "shutting down (signal " << sig << ")";
    server.shut_down(opt.shutdown_timeout_s);
  });
  GS_LOG_INFO << "Uvicorn running on http://" << opt.host << ":" << port
              << " (Press CTRL+C to quit)";
  const bool ok = server.listen();
  // Wake the signal thread if the listener ended by itself.
  listening = false;
  pthread_kill(signal_thread.native_handle(), SIGTERM);
  signal_thread.join();
  return ok && !engine_failed ? 0 : 1;
}

}  // namespace gemmaserve
