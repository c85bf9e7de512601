// The HTTP layer of `gemmaserve serve` (cpp-httplib): the API-key check, body and header limits,
// the server's own routes (/health, /ping, /version, /metrics) and the connection rules: cap,
// slow clients cut, disconnects and deadlines abort, graceful shutdown. Each API surface
// registers its routes on routes() (openai/openai_routes, chat_page/) with route_helpers.
#pragma once

#include <memory>
#include <string>

#include "server/shared/serving_common.h"

namespace httplib {
class Server;
}

namespace gemmaserve {

class ConnectionMonitor;

class HttpServer {
 public:
  explicit HttpServer(ServingContext& ctx);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds host:port (port 0 = any free port); returns the bound port. InputError on failure.
  int bind(const std::string& host, int port);
  // Serves until stop(); returns false when the listener failed.
  bool listen();
  void stop();
  // SIGTERM: new generation requests and /health get 503, running requests get up to
  // `timeout_s` to finish, the rest are aborted (503), then the listener stops.
  void shut_down(double timeout_s);
  // Where API surfaces register their routes, before bind().
  httplib::Server& routes() { return *server_; }

 private:
  void register_routes();

  ServingContext& ctx_;
  std::unique_ptr<ConnectionMonitor> monitor_;  // before server_: its threads use it
  std::unique_ptr<httplib::Server> server_;
};

}  // namespace gemmaserve
