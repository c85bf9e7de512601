#include "server/http/http_server.h"

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
#include "server/http/client_stream.h"
#include "server/http/connection_monitor.h"
#include "server/http/request_body.h"
#include "server/http/route_helpers.h"
#include "server/shared/api_error.h"
#include "server/shared/cors.h"

namespace gemmaserve {
namespace {

using ordered_json = nlohmann::ordered_json;

// httplib's ThreadPool has a fixed size, and every open SSE stream holds a worker for its whole
// life; this queue starts a worker whenever none is idle, up to `max_threads` (--max-http-workers).
// A connection that finds none free is shed: its job runs at once on the accepting thread with
// shedding() true, and must only answer and close (a flood holds no descriptors nor threads, and
// waits for nothing).
class GrowingTaskQueue : public httplib::TaskQueue {
 public:
  explicit GrowingTaskQueue(size_t max_threads) : max_threads_(max_threads) {}
  ~GrowingTaskQueue() override { shutdown(); }

  static bool shedding() { return shedding_; }

  void enqueue(std::function<void()> fn) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (idle_ > jobs_.size() || threads_.size() < max_threads_) {
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
thread_local ClientStream* t_client_stream = nullptr;

ClientStream::Overflow request_overflow() {
  return t_client_stream ? t_client_stream->overflow() : ClientStream::Overflow::kNone;
}

std::string request_framing_error() {
  return t_client_stream ? t_client_stream->framing_error() : std::string();
}

// Headers are counted apart from the body: 64 KiB is 4x uvicorn's (h11's) 16 KiB.
constexpr size_t kMaxHeaderBytes = size_t{64} << 10;
// A chunked body is counted on the wire: room for its chunk-size lines.
constexpr size_t kChunkFramingBytes = size_t{1} << 20;
// An answer given before the body was read reads this much of what is left (Go's net/http:
// 256 KiB) and drops it to keep the connection; with more left, the answer closes it.
constexpr size_t kMaxDiscardBytes = size_t{256} << 10;

// The body framing of a request's headers (RFC 9112 6.1-6.3), strict where httplib is lenient
// (it reads "0x28" as Content-Length 0, "4a" as 4, and ignores a Transfer-Encoding that is not
// exactly "chunked"): an ambiguous one is an error, answered 400 with the connection closed, since
// a proxy may have framed it otherwise. No length nor Transfer-Encoding is an empty body (uvicorn
// reads it so; httplib would read to the end of the connection).
BodyFraming body_framing(httplib::Request& req) {
  BodyFraming framing;
  const size_t lengths = req.get_header_value_count("Content-Length");
  const size_t encodings = req.get_header_value_count("Transfer-Encoding");
  if (encodings > 0) {
    std::string coding = req.get_header_value("Transfer-Encoding");
    std::transform(coding.begin(), coding.end(), coding.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (encodings > 1 || coding != "chunked") {
      framing.error = "Transfer-Encoding '" + coding + "' is not supported (only chunked)";
    } else if (lengths > 0) {
      framing.error = "Content-Length and Transfer-Encoding: chunked together";
    }
    framing.chunked = framing.error.empty();
  }
  for (size_t i = 0; i < lengths && framing.error.empty(); ++i) {
    const std::string value = req.get_header_value("Content-Length", i);
    const bool digits = !value.empty() && value.size() <= 19 &&
                        std::all_of(value.begin(), value.end(),
                                    [](unsigned char c) { return std::isdigit(c) != 0; });
    if (!digits || (i > 0 && std::stoull(value) != framing.length)) {
      framing.error = "invalid Content-Length '" + value + "'";
    } else {
      framing.length = std::stoull(value);
    }
  }
  // uvicorn does not decode a request's Content-Encoding (a gzip body is then invalid JSON);
  // httplib would, into memory without a bound: 64 MiB of gzip are 64 GiB.
  req.headers.erase("Content-Encoding");
  if (!framing.error.empty() || (lengths == 0 && !framing.chunked)) {
    // httplib reads no body: the 400 answers before any, and the connection closes after it.
    req.headers.erase("Transfer-Encoding");
    req.headers.erase("Content-Length");
    req.set_header("Content-Length", "0");
    framing.chunked = false;
    framing.length = 0;
  }
  return framing;
}

// httplib's Server with our connection loop: the connection cap, ClientStream's time limits,
// and the monitor's watch on each request's client (0.11 tells a handler nothing of them).
class MonitoredServer : public httplib::Server {
 public:
  MonitoredServer(ConnectionMonitor& monitor, std::chrono::milliseconds io_timeout,
                  size_t max_body_bytes, int max_workers)
      : monitor_(monitor),
        io_timeout_(io_timeout),
        max_workers_(max_workers),
        max_body_bytes_(max_body_bytes),
        limits_{kMaxHeaderBytes, max_body_bytes + kChunkFramingBytes} {
    // Once draining, every response closes its connection (the client reconnects elsewhere).
    // So does one answered before its request's body was read, unless the rest of that body is
    // small enough to read and drop now: the next request must not be parsed from it.
    set_post_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      ClientStream* stream = t_client_stream;
      const bool body_read = stream == nullptr || stream->discard_body(kMaxDiscardBytes);
      if (stream != nullptr && !body_read) stream->end_keep_alive();
      if ((monitor_.draining() || !body_read) && !res.has_header("Connection")) {
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
  // The 503 for a connection past --max-connections, or (`no_worker`) past --max-http-workers.
  std::string refusal(bool no_worker) const;

  ConnectionMonitor& monitor_;
  std::chrono::milliseconds io_timeout_;
  int max_workers_;
  size_t max_body_bytes_;
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
    const std::string answer = refusal(true);
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
    const auto headers_read = [this, &stream](httplib::Request& req) {
      BodyFraming framing = body_framing(req);
      const bool too_long = !framing.chunked && framing.length > max_body_bytes_;
      stream.start_body(std::move(framing));
      if (too_long) stream.refuse_body();
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
      if (stream.overflow() != ClientStream::Overflow::kNone || !stream.keep_alive()) {
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

std::string MonitoredServer::refusal(bool no_worker) const {
  const std::string limit = no_worker
                                ? "--max-http-workers " + std::to_string(max_workers_)
                                : "--max-connections " + std::to_string(monitor_.max_connections());
  const std::string body = dump_json(
      error_json(503, "ServiceUnavailableError",
                 "Too many open connections (" + limit + "). Retry later.", std::nullopt));
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
  const std::string response = refusal(false);
  stream.write(response.data(), response.size());
  close_after_answer(stream, std::chrono::milliseconds(200));
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
  server_ = std::make_unique<MonitoredServer>(
      *monitor_, io_timeout, ctx.options.max_request_size_bytes, ctx.options.max_http_workers);
  raise_descriptor_limit(ctx.options.max_connections);
  const auto max_threads = static_cast<size_t>(std::max(ctx.options.max_http_workers, 1));
  // httplib takes ownership of the returned queue (its API needs a raw pointer).
  server_->new_task_queue = [max_threads] { return new GrowingTaskQueue(max_threads); };
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
  // A request whose headers frame its body ambiguously gets a 400 before anything reads it. Then
  // CORS preflights (vLLM's CORSMiddleware answers them before any route), then the API key on
  // /v1 routes, as vLLM's AuthenticationMiddleware: its check and its exact answer (401,
  // {"error":"Unauthorized"}, not the OpenAI error object).
  s.set_pre_routing_handler([&ctx](const httplib::Request& req, httplib::Response& res) {
    if (const std::string framing = request_framing_error(); !framing.empty()) {
      send_error(res, bad_request("Bad request framing: " + framing));
      return httplib::Server::HandlerResponse::Handled;
    }
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
  answer_other_methods(s, {"/health", "/version", "/metrics"}, /*posted=*/false);
}

}  // namespace gemmaserve
