// CORS as vLLM answers it (Starlette's CORSMiddleware with --allowed-origins, --allowed-methods,
// --allowed-headers and --allow-credentials): headers added to answers of requests that carry
// an Origin, and the answer to a preflight (OPTIONS with Access-Control-Request-Method).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace gemmaserve {

struct CorsOptions {
  std::vector<std::string> allowed_origins{"*"};  // vLLM's defaults
  std::vector<std::string> allowed_methods{"*"};
  std::vector<std::string> allowed_headers{"*"};
  bool allow_credentials = false;
};

// The request headers CORS reads.
struct CorsRequest {
  std::string method;
  std::optional<std::string> origin;
  std::optional<std::string> request_method;   // Access-Control-Request-Method
  std::optional<std::string> request_headers;  // Access-Control-Request-Headers
  bool has_cookie = false;
};

using HeaderList = std::vector<std::pair<std::string, std::string>>;

struct CorsPreflight {
  int status = 200;  // 400 "Disallowed CORS origin, method, headers" when refused
  std::string body;  // text/plain
  HeaderList headers;
};

// The preflight answer, or nullopt when `request` is not a preflight.
std::optional<CorsPreflight> cors_preflight(const CorsOptions& options, const CorsRequest& request);

// Headers for the answer to any other request (none without an Origin).
HeaderList cors_response_headers(const CorsOptions& options, const CorsRequest& request);

}  // namespace gemmaserve
