// The HTTP front of `gemmaserve serve` (cpp-httplib): vLLM's routes, API-key check, body limit,
// one exception-to-error mapping for every route, and SSE streaming with client-disconnect
// aborts. Serving logic lives in serving_completions / serving_chat.
#pragma once

#include <memory>
#include <string>

#include "server/serving_common.h"

namespace httplib {
class Server;
}

namespace gemmaserve {

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

 private:
  void register_routes();

  ServingContext& ctx_;
  std::unique_ptr<httplib::Server> server_;
};

}  // namespace gemmaserve
