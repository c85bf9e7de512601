#include "cli/serve_command.h"

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <thread>

#include "cli/arg_parser.h"
#include "cli/config_file.h"
#include "cli/engine_flags.h"
#include "cli/tensor_parallel_launch.h"
#include "cli/vllm_serve_flags.h"
#include "core/error.h"
#include "core/logging.h"
#include "engine/data_parallel/engine_replicas.h"
#include "engine/engine.h"
#include "engine/engine_setup.h"
#include "server/chat_page/chat_page.h"
#include "server/http/http_server.h"
#include "server/openai/openai_routes.h"
#include "server/shared/chat_rendering.h"
#include "server/shared/metrics.h"
#include "server/shared/serving_common.h"
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
    "  --chat-template-content-format auto|string|openai  how message content reaches the\n"
    "                                     template (auto: detected from it, as vLLM)\n"
    "  --default-chat-template-kwargs JSON e.g. '{\"enable_thinking\": true}'\n"
    "  --enable-auto-tool-choice  --tool-call-parser gemma4|none  --reasoning-parser gemma4|none\n"
    "                                     (both parsers are on by default for Gemma 4)\n"
    "  --structured-outputs-config JSON  '{\"disable_any_whitespace\": true}': JSON answers "
    "without\n"
    "                                     blank space (backend: auto only; other keys refused)\n"
    "  --max-logprobs N (20)\n"
    "  --max-request-size-mb N (64)  --max-waiting-requests N (8 x --max-num-seqs; more: 503)\n"
    "  --max-connections N (1024)         open connections; more get 503 and are closed\n"
    "  --max-http-workers N               threads serving connections, one per open connection\n"
    "                                     (2 x --max-num-seqs, at least 64); a connection that\n"
    "                                     finds none free gets 503 and is closed\n"
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
    "CORS (vLLM's defaults: any origin, method and header):\n"
    "  --allowed-origins JSON  --allowed-methods JSON  --allowed-headers JSON  "
    "--allow-credentials\n"
    "  --enable-request-id-headers        X-Request-Id on every response\n"
    "  --enable-prompt-tokens-details     usage.prompt_tokens_details.cached_tokens\n"
    "  --enable-force-include-usage       a usage chunk at the end of every stream\n"
    "  --return-tokens-as-token-ids       logprob tokens as token_id:N by default\n"
    "  --enable-tokenizer-info-endpoint   serve /tokenizer_info\n"
    "every other vLLM serve flag is refused with its reason or, for GPU-only hints such as\n"
    "--enforce-eager, accepted with one warning (docs/PROTOCOL.md, serve flags)\n";

// vLLM's nargs="+" flags and its short aliases, rewritten for ArgParser.
std::vector<std::string> normalize_args(const ArgParser& p, const std::vector<std::string>& args) {
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    const auto flag = p.find(a);
    if (a.size() > 2 && a.rfind("-O", 0) == 0 && a.find('=') == std::string::npos) {
      out.push_back("--compilation-config");  // vLLM's -O3
      out.push_back(a.substr(2));
    } else if (flag && flag->kind == FlagKind::kList) {
      size_t count = 0;
      while (i + 1 < args.size() && args[i + 1].rfind("-", 0) != 0) {
        out.push_back(a);
        out.push_back(args[++i]);
        ++count;
      }
      if (count == 0) throw InputError("flag " + a + " needs a value");
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

ArgParser serve_arg_parser() {
  ArgParser p;
  add_engine_flags(p);
  p.value("--model").value("--host").value("--port");
  p.list("--served-model-name").list("--api-key").value("--chat-template");
  p.json("--default-chat-template-kwargs").value("--chat-template-content-format");
  p.value("--tool-call-parser").value("--reasoning-parser");
  p.value("--uvicorn-log-level").value("--max-request-size-mb").value("--max-waiting-requests");
  p.value("--max-logprobs").value("--max-connections").json("--structured-outputs-config");
  p.value("--max-http-workers");
  p.value("--request-timeout").value("--shutdown-timeout").value("--http-timeout");
  p.value("--allowed-local-media-path").list("--allowed-media-domains");
  p.value("--image-fetch-timeout");
  p.flag("--disable-media-url-fetch").flag("--disable-media-url-redirects");
  p.flag("--trust-request-chat-template").flag("--enable-auto-tool-choice");
  p.flag("--disable-log-requests").flag("--enable-log-requests").flag("--help", {"-h"});
  p.json("--allowed-origins").json("--allowed-methods").json("--allowed-headers");
  p.flag("--allow-credentials").flag("--enable-request-id-headers");
  p.flag("--enable-prompt-tokens-details").flag("--enable-force-include-usage");
  p.flag("--return-tokens-as-token-ids").flag("--enable-tokenizer-info-endpoint");
  p.value("--scheduling-policy").flag("--disable-mm-preprocessor-cache");
  declare_vllm_flag_rules(p);
  return p;
}

namespace {

// --allowed-origins and its siblings: vLLM parses them with json.loads (a list of strings).
std::vector<std::string> json_string_list_flag(const ArgParser& p, const std::string& flag,
                                               std::vector<std::string> fallback) {
  const auto text = p.get(flag);
  if (!text) return fallback;
  ordered_json j;
  try {
    j = ordered_json::parse(*text);
  } catch (const std::exception& e) {
    throw InputError(flag + ": invalid JSON: " + e.what());
  }
  const auto is_string = [](const ordered_json& v) { return v.is_string(); };
  if (!j.is_array() || !std::all_of(j.begin(), j.end(), is_string)) {
    throw InputError(flag + ": must be a JSON list of strings such as '[\"*\"]'");
  }
  return j.get<std::vector<std::string>>();
}

// What the parsed flags ask, checked; InputError for a bad one.
ServeSetup serve_setup(const ArgParser& p) {
  std::string model;
  if (!p.positionals().empty()) model = p.positionals()[0];
  if (auto m = p.get("--model")) {
    if (!model.empty() && model != *m) {
      throw InputError("serve got two models: '" + model + "' and --model '" + *m + "'");
    }
    model = *m;
  }
  if (model.empty()) {
    throw InputError("serve needs MODEL_DIR (or --model, or model: in the --config file)\n" +
                     std::string(kUsage));
  }
  if (auto lvl = p.get("--uvicorn-log-level")) log::set_level(log::parse_level(*lvl));
  apply_vllm_flag_rules(p);

  ServeSetup setup;
  setup.model = model;
  ServerOptions& opt = setup.options;
  opt.host = p.get("--host").value_or(opt.host);
  opt.port = p.get_int("--port", opt.port);
  if (opt.port < 0 || opt.port > 65535) throw InputError("--port must be in [0, 65535]");
  opt.served_model_names = p.all("--served-model-name");
  if (opt.served_model_names.empty()) opt.served_model_names.push_back(model);
  if (p.all("--api-key").size() > 1) {
    throw InputError("--api-key: takes several keys; gemmaserve checks one key");
  }
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
  if (auto f = p.get("--chat-template-content-format")) {
    try {
      opt.chat_template_content_format = parse_content_format_option(*f);
    } catch (const InputError& e) {
      throw InputError(std::string("--chat-template-content-format: ") + e.what());
    }
  }
  opt.trust_request_chat_template = p.get_flag("--trust-request-chat-template");
  if (auto kw = p.get("--default-chat-template-kwargs")) {
    opt.default_chat_template_kwargs =
        parse_json_object_flag("--default-chat-template-kwargs", *kw);
  }
  if (auto so = p.get("--structured-outputs-config")) {
    const ordered_json config = parse_json_object_flag("--structured-outputs-config", *so);
    for (const auto& [key, value] : config.items()) {
      if (key == "backend" && value == "auto") continue;  // vLLM's default
      if (key != "disable_any_whitespace") {
        throw InputError("--structured-outputs-config: '" + key +
                         "' is not supported: gemmaserve "
                         "has one structured-output backend (keys: disable_any_whitespace, "
                         "backend auto)");
      }
      if (!value.is_boolean()) {
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
  opt.disable_log_requests = p.has("--disable-log-requests")
                                 ? p.get_flag("--disable-log-requests")
                                 : !p.get_flag("--enable-log-requests", true);
  opt.cors.allowed_origins = json_string_list_flag(p, "--allowed-origins", {"*"});
  opt.cors.allowed_methods = json_string_list_flag(p, "--allowed-methods", {"*"});
  opt.cors.allowed_headers = json_string_list_flag(p, "--allowed-headers", {"*"});
  opt.cors.allow_credentials = p.get_flag("--allow-credentials");
  opt.enable_request_id_headers = p.get_flag("--enable-request-id-headers");
  opt.enable_prompt_tokens_details = p.get_flag("--enable-prompt-tokens-details");
  opt.enable_force_include_usage = p.get_flag("--enable-force-include-usage");
  opt.return_tokens_as_token_ids = p.get_flag("--return-tokens-as-token-ids");
  opt.enable_tokenizer_info_endpoint = p.get_flag("--enable-tokenizer-info-endpoint");
  if (auto policy = p.get("--scheduling-policy");
      policy && *policy != "fcfs" && *policy != "priority") {
    throw InputError("--scheduling-policy: unknown policy '" + *policy + "' (fcfs or priority)");
  }
  const int size_mb = p.get_int("--max-request-size-mb", 64);
  if (size_mb <= 0) throw InputError("--max-request-size-mb must be positive");
  opt.max_request_size_bytes = static_cast<size_t>(size_mb) << 20;
  if (const char* env = std::getenv("VLLM_MAX_AUDIO_CLIP_FILESIZE_MB"); env && *env) {
    char* end = nullptr;
    const long mb = std::strtol(env, &end, 10);
    if (*end != '\0' || mb <= 0) {
      throw InputError(std::string("VLLM_MAX_AUDIO_CLIP_FILESIZE_MB must be a positive integer, "
                                   "got '") +
                       env + "'");
    }
    opt.max_audio_file_bytes = static_cast<size_t>(mb) << 20;
  }
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
  setup.engine_args = engine_args_from_flags(p, model);
  EngineArgs& ea = setup.engine_args;
  if (p.get_flag("--disable-mm-preprocessor-cache")) ea.mm_processor_cache_gb = 0;
  opt.max_waiting_requests = p.get_int("--max-waiting-requests", 8 * ea.max_num_seqs);
  if (opt.max_waiting_requests <= 0) throw InputError("--max-waiting-requests must be positive");
  // Every running sequence can stream on its own connection, and as many more connections can
  // wait, idle or ask other routes.
  opt.max_http_workers = p.get_int("--max-http-workers", std::max(64, 2 * ea.max_num_seqs));
  if (opt.max_http_workers <= 0) throw InputError("--max-http-workers must be positive");

  return setup;
}

}  // namespace

std::optional<ServeSetup> parse_serve_args(const std::vector<std::string>& raw_args) {
  ArgParser p = serve_arg_parser();
  const ConfigFileFlags config = parse_with_config_file(p, normalize_args(p, raw_args), 1);
  if (p.get_flag("--help")) {
    std::cout << kUsage << engine_flags_usage();
    return std::nullopt;
  }
  return config.explaining([&] { return serve_setup(p); });
}

int run_serve_command(const std::vector<std::string>& raw_args) {
  std::optional<ServeSetup> setup = parse_serve_args(raw_args);
  if (!setup) return 0;  // --help
  const std::string& model = setup->model;
  const ServerOptions& opt = setup->options;
  const EngineArgs& ea = setup->engine_args;
  if (run_as_tensor_parallel_follower(ea)) return 0;

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
  } else if (auto t = load_chat_template(engine.model_source())) {
    ctx.chat_template = ChatTemplate::parse(*t, model + " chat template");
  } else {
    GS_LOG_WARNING << model << " has no chat template; /v1/chat/completions needs "
                   << "--chat-template or a per-request chat_template";
  }
  if (ctx.chat_template) {  // vLLM's start-up line
    GS_LOG_INFO << "Detected the chat template content format to be '"
                << content_format_name(ctx.chat_template->content_format()) << "'"
                << (opt.chat_template_content_format
                        ? ", --chat-template-content-format " +
                              std::string(content_format_name(*opt.chat_template_content_format)) +
                              " used"
                        : std::string());
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
  register_openai_routes(server.routes(), ctx);
  register_chat_page(server.routes());
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
