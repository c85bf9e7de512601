#include "server/http_server.h"

#include <httplib.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string_view>
#include <thread>

#include "core/error.h"
#include "core/logging.h"
#include "server/api_error.h"
#include "server/chat_page.h"
#include "server/chat_rendering.h"
#include "server/client_stream.h"
#include "server/connection_monitor.h"
#include "server/cors.h"
#include "server/request_body.h"
#include "server/serving_chat.h"
#include "server/serving_completions.h"
#include "server/serving_tokenization.h"
#include "tokenizer/tokenizer.h"

namespace gemmaserve {
namespace {

using ordered_json = nlohmann::ordered_json;

// httplib's ThreadPool has a fixed size, and every open SSE stream holds a worker for its whole
// life; this queue starts a worker whenever none is idle, up to `max_threads`. Past that, at most
// `max_queued` connections wait for a worker; each one more is shed: its job runs at once on the
// accepting thread with shedding() true, and must only answer and close (a flood cannot hold
// descriptors in the queue).
class GrowingTaskQueue : public httplib::TaskQueue {
 public:
  GrowingTaskQueue(size_t max_threads, size_t max_queued)
      : max_threads_(max_threads), max_queued_(max_queued) {}
  ~GrowingTaskQueue() override { shutdown(); }

  static bool shedding() { return shedding_; }

  void enqueue(std::function<void()> fn) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      const bool worker_free = idle_ > jobs_.size() || threads_.size() < max_threads_;
      if (worker_free || jobs_.size() < max_queued_) {
        jobs_.push_back(std::move(fn));
        if (idle_ < jobs_.size() && threads_.size() < max_threads_) {
          threads_.emplace_back([this] { work(); });
        }
        fn = nullptr;
      }
    }
    if (!fn) {
      wake_.notify_one();
      return;
    }
    shedding_ = true;
    fn();
    shedding_ = false;
  }

  void shutdown() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_) return;
      stopping_ = true;
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
  }

 private:
  void work() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        ++idle_;
        wake_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
        --idle_;
        if (jobs_.empty()) return;  // stopping and drained
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
    }
  }

  static thread_local bool shedding_;
  size_t max_threads_;
  size_t max_queued_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
  size_t idle_ = 0;
  bool stopping_ = false;
};

thread_local bool GrowingTaskQueue::shedding_ = false;

// The stream the calling worker serves: httplib's error handler gets none, and asks this one
// whether the request passed a size limit.
thread_local const ClientStream* t_client_stream = nullptr;

ClientStream::Overflow request_overflow() {
  return t_client_stream ? t_client_stream->overflow() : ClientStream::Overflow::kNone;
}

// Headers are counted apart from the body: 64 KiB is 4x uvicorn's (h11's) 16 KiB.
constexpr size_t kMaxHeaderBytes = size_t{64} << 10;
// A chunked body is counted on the wire: room for its chunk-size lines.
constexpr size_t kChunkFramingBytes = size_t{1} << 20;

// httplib's Server with our connection loop: the connection cap, ClientStream's time limits,
// and the monitor's watch on each request's client (0.11 tells a handler nothing of them).
class MonitoredServer : public httplib::Server {
 public:
  MonitoredServer(ConnectionMonitor& monitor, std::chrono::milliseconds io_timeout,
                  size_t max_body_bytes)
      : monitor_(monitor),
        io_timeout_(io_timeout),
        limits_{kMaxHeaderBytes, max_body_bytes + kChunkFramingBytes} {
    // Once draining, every response closes its connection (the client reconnects elsewhere).
    set_post_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (monitor_.draining() && !res.has_header("Connection")) {
        res.headers.erase("Keep-Alive");
        res.set_header("Connection", "close");
      }
      if (response_headers_) response_headers_(req, res);
    });
  }
  // Headers every answer gets (CORS, X-Request-Id), whichever path produced it.
  void set_response_headers(httplib::Server::Handler add) { response_headers_ = std::move(add); }

  // httplib listens with a backlog of 5; a burst of clients needs the system's maximum.
  void widen_backlog() { ::listen(svr_sock_, SOMAXCONN); }
  // Closes the listening socket so listen() ends, or never starts serving: httplib's stop()
  // does nothing before listen() has started.
  void close_listener() {
    const socket_t sock = svr_sock_.exchange(INVALID_SOCKET);
    if (sock == INVALID_SOCKET) return;
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
  }

 private:
  bool process_and_close_socket(socket_t sock) override;
  void refuse(socket_t sock);
  std::string refusal() const;

  ConnectionMonitor& monitor_;
  std::chrono::milliseconds io_timeout_;
  RequestLimits limits_;
  httplib::Server::Handler response_headers_;
};

// After the answer: the client's unread bytes (up to a bound, or `linger`) are read, so that
// closing does not reset the connection and lose the answer.
void close_after_answer(ClientStream& stream, std::chrono::milliseconds linger) {
  ::shutdown(stream.socket(), SHUT_WR);
  ClientStream drain(stream.socket(), linger);
  std::array<char, 16384> sink{};
  for (size_t total = 0; total < (size_t{16} << 20) && drain.is_readable(); total += sink.size()) {
    if (drain.read(sink.data(), sink.size()) <= 0) break;
  }
}

bool MonitoredServer::process_and_close_socket(socket_t sock) {
  bool ok = true;
  if (GrowingTaskQueue::shedding()) {
    const std::string answer = refusal();
    ::send(sock, answer.data(), answer.size(), MSG_NOSIGNAL | MSG_DONTWAIT);  // best effort
  } else if (!monitor_.open(sock)) {
    refuse(sock);
  } else {
    // A fixed send buffer bounds what a client that stops reading can leave queued.
    const int send_buffer = 256 << 10;
    setsockopt(sock, SOL_SOCKET, SO_SNDBUF, &send_buffer, sizeof send_buffer);
    ClientStream stream(sock, io_timeout_, limits_);
    t_client_stream = &stream;
    const auto listening = [this] { return svr_sock_ != INVALID_SOCKET; };
    const auto headers_read = [&stream](httplib::Request& req) {
      stream.start_body();
      // RFC 9112 6.3: no Content-Length nor Transfer-Encoding is an empty body (uvicorn reads it
      // so); httplib would read to the end of the connection.
      if (!req.has_header("Content-Length") && !req.has_header("Transfer-Encoding")) {
        req.set_header("Content-Length", "0");
      }
    };
    for (size_t left = keep_alive_max_count_; left > 0; --left) {
      if (!stream.wait_for_request(std::chrono::seconds(keep_alive_timeout_sec_), listening)) {
        break;
      }
      monitor_.begin_request();
      stream.start_request();
      bool closed = false;
      ok = process_request(stream, left == 1 || !listening() || monitor_.draining(), closed,
                           headers_read);
      monitor_.release();
      if (stream.overflow() != ClientStream::Overflow::kNone) {
        close_after_answer(stream, std::chrono::milliseconds(500));
        break;
      }
      if (!ok || closed || stream.read_failed() || monitor_.draining()) break;
    }
    t_client_stream = nullptr;
    monitor_.close();
  }
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return ok;
}

std::string MonitoredServer::refusal() const {
  const std::string body =
      dump_json(error_json(503, "ServiceUnavailableError",
                           "Too many open connections (--max-connections " +
                               std::to_string(monitor_.max_connections()) + "). Retry later.",
                           std::nullopt));
  return "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\nRetry-After: 1\r\nConnection: close\r\n\r\n" + body;
}

// Past --max-connections: a 503 with an OpenAI error, then close. The request is read first
// (closing with unread bytes would reset the connection and lose the answer).
void MonitoredServer::refuse(socket_t sock) {
  ClientStream stream(sock, std::chrono::milliseconds(200));
  std::array<char, 4096> sink{};
  stream.start_request();
  for (size_t total = 0; total < (64u << 10) && stream.is_readable();) {
    const ssize_t n = stream.read(sink.data(), sink.size());
    if (n <= 0) break;
    total += static_cast<size_t>(n);
    if (std::string_view(sink.data(), static_cast<size_t>(n)).find("\r\n\r\n") !=
        std::string_view::npos) {
      break;
    }
  }
  const std::string response = refusal();
  stream.write(response.data(), response.size());
  close_after_answer(stream, std::chrono::milliseconds(200));
}

std::string status_phrase(int status) {
  switch (status) {
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 413:
      return "Request Entity Too Large";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    default:
      return "Error";
  }
}

void send_json(httplib::Response& res, int status, const ordered_json& body) {
  res.status = status;
  res.set_content(dump_json(body), "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) {
  if (e.status() == 503) res.set_header("Retry-After", "1");
  send_json(res, e.status(), error_json(e));
}

// vLLM's verify_token: "<scheme> <token>" split at the first space, the scheme "bearer" in any
// case, the token compared without an early exit.
bool bearer_token_matches(const std::string& header, const std::string& key) {
  const size_t space = header.find(' ');
  std::string scheme = header.substr(0, space);
  std::transform(scheme.begin(), scheme.end(), scheme.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (header.empty() || scheme != "bearer") return false;
  const std::string token = space == std::string::npos ? "" : header.substr(space + 1);
  unsigned char diff = token.size() == key.size() ? 0 : 1;
  for (size_t i = 0; i < token.size(); ++i) {
    diff |= static_cast<unsigned char>(token[i] ^ key[i % std::max<size_t>(key.size(), 1)]);
  }
  return diff == 0;
}

ordered_json parse_body(const httplib::Request& req) { return parse_json_request_body(req.body); }

// The body of a completions or chat request; vLLM names the response after an X-Request-Id
// header first, then the body's request_id.
ordered_json parse_generation_body(const httplib::Request& req) {
  ordered_json body = parse_body(req);
  if (body.is_object() && req.has_header("X-Request-Id")) {
    body["request_id"] = req.get_header_value("X-Request-Id");
  }
  return body;
}

// Runs a route, turning every exception into an OpenAI error response: the one place.
void guarded(httplib::Response& res, const std::function<void()>& route) {
  try {
    route();
  } catch (const ApiError& e) {
    send_error(res, e);
  } catch (const InputError& e) {
    send_error(res, bad_request(e.what(), e.param()));
  } catch (const nlohmann::json::exception& e) {
    send_error(res, bad_request(e.what()));
  } catch (const std::bad_alloc&) {
    send_error(res, ApiError(500, "InternalServerError", "out of memory"));
  } catch (const std::exception& e) {
    GS_LOG_ERROR << "internal error: " << e.what();
    send_error(res, ApiError(500, "InternalServerError", e.what()));
  }
}

void send_serving_response(httplib::Response& res, ServingResponse response) {
  if (!response.stream) {
    send_json(res, response.status, response.body);
    return;
  }
  auto stream = std::make_shared<std::function<void(const SseWrite&)>>(std::move(response.stream));
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [stream](size_t, httplib::DataSink& sink) {
        (*stream)([&sink](const std::string& s) { return sink.write(s.data(), s.size()); });
        sink.done();
        return true;
      },
      // Dropping the stream releases its EngineSession, which aborts what is unfinished.
      [stream](bool) { *stream = nullptr; });
}

// The request headers CORS reads.
CorsRequest cors_request(const httplib::Request& req) {
  CorsRequest r;
  r.method = req.method;
  if (req.has_header("Origin")) r.origin = req.get_header_value("Origin");
  if (req.has_header("Access-Control-Request-Method")) {
    r.request_method = req.get_header_value("Access-Control-Request-Method");
  }
  if (req.has_header("Access-Control-Request-Headers")) {
    r.request_headers = req.get_header_value("Access-Control-Request-Headers");
  }
  r.has_cookie = req.has_header("Cookie");
  return r;
}

// vLLM's middlewares: CORS headers (not on the API key's 401: its middleware runs outside
// CORS) and, with --enable-request-id-headers, X-Request-Id (the request's, else a uuid4 hex).
void add_cors_and_request_id_headers(const ServerOptions& options, const httplib::Request& req,
                                     httplib::Response& res) {
  if (res.status != 401 && !cors_preflight(options.cors, cors_request(req))) {
    for (auto& [name, value] : cors_response_headers(options.cors, cors_request(req))) {
      if (name == "Access-Control-Allow-Origin") res.headers.erase(name);
      res.headers.emplace(name, value);
    }
  }
  if (options.enable_request_id_headers && !res.has_header("X-Request-Id")) {
    res.set_header("X-Request-Id", req.has_header("X-Request-Id")
                                       ? req.get_header_value("X-Request-Id")
                                       : random_request_id(""));
  }
}

// Known routes with the wrong method: 405 like FastAPI (httplib alone would say 404).
void method_not_allowed(const httplib::Request&, httplib::Response& res) {
  send_json(res, 405, error_json(405, status_phrase(405), status_phrase(405), std::nullopt));
}

// GET /tokenizer_info (vLLM's --enable-tokenizer-info-endpoint).
void register_tokenizer_info(httplib::Server& s, ServingContext& ctx) {
  s.Get("/tokenizer_info", [&ctx](const httplib::Request&, httplib::Response& res) {
    guarded(res, [&] {
      const Tokenizer* tok = ctx.engine.tokenizer();
      if (tok == nullptr) throw bad_request("this model has no tokenizer");
      ordered_json out;
      out["tokenizer_class"] = "GemmaTokenizer";
      out["bos_token"] = ctx.bos_token;
      out["eos_token"] = ctx.eos_token;
      out["pad_token"] = "<pad>";
      out["chat_template"] =
          ctx.chat_template ? ordered_json(ctx.chat_template->source()) : ordered_json(nullptr);
      out["model_max_length"] = ctx.engine.max_model_len();
      send_json(res, 200, out);
    });
  });
  s.Post("/tokenizer_info", method_not_allowed);
  s.Put("/tokenizer_info", method_not_allowed);
  s.Delete("/tokenizer_info", method_not_allowed);
}

}  // namespace

namespace {

// One descriptor per connection (plus the model's files): a soft limit of 1024 would refuse
// connections below --max-connections, so raise it toward the hard limit.
void raise_descriptor_limit(int max_connections) {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  const rlim_t wanted = static_cast<rlim_t>(max_connections) + 256;
  if (limit.rlim_cur >= wanted) return;
  limit.rlim_cur = limit.rlim_max == RLIM_INFINITY ? wanted : std::min(wanted, limit.rlim_max);
  if (setrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur < wanted) {
    GS_LOG_WARNING << "open-file limit " << limit.rlim_cur << " is below --max-connections "
                   << max_connections << " + 256; raise it with ulimit -n";
  }
}

}  // namespace

HttpServer::HttpServer(ServingContext& ctx)
    : ctx_(ctx),
      monitor_(std::make_unique<ConnectionMonitor>(ctx.options.max_connections,
                                                   ctx.options.request_timeout_s)) {
  const auto io_timeout = std::chrono::milliseconds(
      static_cast<int64_t>(std::max(ctx.options.http_timeout_s, 0.001) * 1000));
  server_ =
      std::make_unique<MonitoredServer>(*monitor_, io_timeout, ctx.options.max_request_size_bytes);
  raise_descriptor_limit(ctx.options.max_connections);
  // Connections past the cap still get a thread, to be answered 503 and closed.
  const size_t max_threads = static_cast<size_t>(std::max(ctx.options.max_connections, 8)) + 64;
  // Beyond that, connections wait for a thread up to this bound; more are shed (503, closed).
  const size_t max_queued = max_threads;
  // httplib takes ownership of the returned queue (its API needs a raw pointer).
  server_->new_task_queue = [max_threads, max_queued] {
    return new GrowingTaskQueue(max_threads, max_queued);
  };
  server_->set_keep_alive_max_count(100000);
  server_->set_payload_max_length(ctx.options.max_request_size_bytes);
  ConnectionMonitor* monitor = monitor_.get();
  ctx_.watch_session = [monitor](const std::shared_ptr<EngineSession>& s) { monitor->watch(s); };
  ctx_.request_began_before_drain = [monitor] { return monitor->began_before_drain(); };
  register_routes();
}

HttpServer::~HttpServer() {
  stop();
  ctx_.watch_session = nullptr;
  ctx_.request_began_before_drain = nullptr;
}

int HttpServer::bind(const std::string& host, int port) {
  const int bound =
      port == 0 ? server_->bind_to_any_port(host) : (server_->bind_to_port(host, port) ? port : -1);
  if (bound < 0) {
    throw InputError("cannot listen on " + host + ":" + std::to_string(port) +
                     " (address in use or not available)");
  }
  static_cast<MonitoredServer&>(*server_).widen_backlog();
  return bound;
}

bool HttpServer::listen() { return server_->listen_after_bind(); }

void HttpServer::stop() {
  if (server_) static_cast<MonitoredServer&>(*server_).close_listener();
}

void HttpServer::shut_down(double timeout_s) {
  ctx_.admission.start_draining();
  monitor_->start_draining();
  GS_LOG_INFO << "draining: " << monitor_->num_busy() << " request(s) in flight ("
              << monitor_->num_watched() << " generating), --shutdown-timeout " << timeout_s
              << " s";
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  if (!monitor_->wait_requests_done(deadline)) {
    GS_LOG_WARNING << "aborting " << monitor_->num_busy()
                   << " request(s) still in flight at the shutdown timeout";
  }
  monitor_->abort_all(AbortReason::kShutdown);
  // Aborted requests answer at once; a client that does not read gets the I/O timeout at most.
  monitor_->wait_requests_done(std::chrono::steady_clock::now() + std::chrono::seconds(2));
  stop();
  monitor_->cut_all();  // keep-alive waits and stalled writes end now
}

void HttpServer::register_routes() {
  httplib::Server& s = *server_;
  ServingContext& ctx = ctx_;

  static_cast<MonitoredServer&>(s).set_response_headers(
      [&ctx](const httplib::Request& req, httplib::Response& res) {
        add_cors_and_request_id_headers(ctx.options, req, res);
      });
  // CORS preflights first (vLLM's CORSMiddleware answers them before any route), then the API
  // key on /v1 routes, as vLLM's AuthenticationMiddleware: its check and its exact answer (401,
  // {"error":"Unauthorized"}, not the OpenAI error object).
  s.set_pre_routing_handler([&ctx](const httplib::Request& req, httplib::Response& res) {
    if (auto preflight = cors_preflight(ctx.options.cors, cors_request(req))) {
      res.status = preflight->status;
      for (auto& [name, value] : preflight->headers) res.headers.emplace(name, value);
      res.set_content(preflight->body, "text/plain; charset=utf-8");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (!ctx.options.api_key || req.method == "OPTIONS" || req.path.rfind("/v1", 0) != 0) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    if (!bearer_token_matches(req.get_header_value("Authorization"), *ctx.options.api_key)) {
      res.status = 401;
      res.set_content(R"({"error":"Unauthorized"})", "application/json");
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // Framework-level errors (unknown route, body too large) in the same error shape.
  s.set_error_handler(
      httplib::Server::HandlerWithResponse([](const httplib::Request&, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        // httplib answers a read that the stream's size limit failed with a 400.
        if (request_overflow() == ClientStream::Overflow::kHeaders) res.status = 431;
        if (request_overflow() == ClientStream::Overflow::kBody) res.status = 413;
        std::string message = status_phrase(res.status);
        if (res.status == 413) message = "Request body too large (see --max-request-size-mb)";
        if (res.status == 431) {
          message = "Request line and headers too large (more than " +
                    std::to_string(kMaxHeaderBytes >> 10) + " KiB)";
        }
        res.set_content(
            dump_json(error_json(res.status, status_phrase(res.status), message, std::nullopt)),
            "application/json");
        return httplib::Server::HandlerResponse::Handled;
      }));

  register_chat_page(s);
  // 503 once the engine thread failed or the server drains for shutdown (load balancers stop
  // sending); vLLM answers its dead engine the same way.
  s.Get("/health", [&ctx](const httplib::Request&, httplib::Response& res) {
    if (auto failure = ctx.replicas.failure()) {
      send_error(res, ApiError(503, "ServiceUnavailableError",
                               "The engine stopped after an error: " + *failure));
    } else if (ctx.admission.draining()) {
      send_error(res, ApiError(503, "ServiceUnavailableError", "The server is shutting down."));
    } else {
      res.status = 200;
    }
  });
  s.Get("/ping", [](const httplib::Request&, httplib::Response& res) { res.status = 200; });
  s.Get("/version", [](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200, ordered_json{{"version", GEMMASERVE_VERSION}});
  });
  s.Get("/metrics", [&ctx](const httplib::Request&, httplib::Response& res) {
    res.set_content(ctx.metrics.render(ctx.replicas.stats()),
                    "text/plain; version=0.0.4; charset=utf-8");
  });
  s.Get("/v1/models", [&ctx](const httplib::Request&, httplib::Response& res) {
    const int64_t now = unix_time_now();  // vLLM's ModelCard: the time of the call
    ordered_json data = ordered_json::array();
    for (const std::string& name : ctx.options.served_model_names) {
      ordered_json perm;
      perm["id"] = random_request_id("modelperm-");
      perm["object"] = "model_permission";
      perm["created"] = now;
      perm["allow_create_engine"] = false;
      perm["allow_sampling"] = true;
      perm["allow_logprobs"] = true;
      perm["allow_search_indices"] = false;
      perm["allow_view"] = true;
      perm["allow_fine_tuning"] = false;
      perm["organization"] = "*";
      perm["group"] = nullptr;
      perm["is_blocking"] = false;
      ordered_json m;
      m["id"] = name;
      m["object"] = "model";
      m["created"] = now;
      m["owned_by"] = "vllm";
      m["root"] = ctx.engine.args().model;
      m["parent"] = nullptr;
      m["max_model_len"] = ctx.engine.max_model_len();
      m["permission"] = ordered_json::array({perm});
      data.push_back(std::move(m));
    }
    send_json(res, 200, ordered_json{{"object", "list"}, {"data", data}});
  });
  s.Post("/v1/completions", [&ctx](const httplib::Request& req, httplib::Response& res) {
    guarded(res,
            [&] { send_serving_response(res, serve_completion(ctx, parse_generation_body(req))); });
  });
  s.Post("/v1/chat/completions", [&ctx](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] { send_serving_response(res, serve_chat(ctx, parse_generation_body(req))); });
  });
  s.Post("/tokenize", [&ctx](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] { send_json(res, 200, serve_tokenize(ctx, parse_body(req))); });
  });
  s.Post("/detokenize", [&ctx](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] { send_json(res, 200, serve_detokenize(ctx, parse_body(req))); });
  });
  // vLLM serves it only with --enable-tokenizer-info-endpoint: it shows the chat template.
  if (ctx.options.enable_tokenizer_info_endpoint) register_tokenizer_info(s, ctx);
  // Known routes with the wrong method: 405 like FastAPI (httplib alone would say 404).
  for (const char* path : {"/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize"}) {
    s.Get(path, method_not_allowed);
    s.Put(path, method_not_allowed);
    s.Delete(path, method_not_allowed);
  }
  for (const char* path : {"/v1/models", "/health", "/version", "/metrics"}) {
    s.Post(path, method_not_allowed);
    s.Put(path, method_not_allowed);
    s.Delete(path, method_not_allowed);
  }
}

}  // namespace gemmaserve
