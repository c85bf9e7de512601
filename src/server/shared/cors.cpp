#include "server/shared/cors.h"

#include <algorithm>
#include <cctype>
#include <set>

namespace gemmaserve {
namespace {

bool contains(const std::vector<std::string>& list, const std::string& item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string trim(const std::string& s) {
  const size_t begin = s.find_first_not_of(" \t");
  if (begin == std::string::npos) return "";
  return s.substr(begin, s.find_last_not_of(" \t") - begin + 1);
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

std::vector<std::string> allowed_methods(const CorsOptions& o) {
  if (contains(o.allowed_methods, "*")) {
    return {"DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT"};
  }
  return o.allowed_methods;
}

bool all_origins(const CorsOptions& o) { return contains(o.allowed_origins, "*"); }

bool origin_allowed(const CorsOptions& o, const std::string& origin) {
  return all_origins(o) || contains(o.allowed_origins, origin);
}

}  // namespace

std::optional<CorsPreflight> cors_preflight(const CorsOptions& o, const CorsRequest& request) {
  if (request.method != "OPTIONS" || !request.origin || !request.request_method) {
    return std::nullopt;
  }
  // Starlette names the origin itself unless every origin is allowed without credentials.
  const bool explicit_origin = !all_origins(o) || o.allow_credentials;
  const bool all_headers = contains(o.allowed_headers, "*");
  const std::vector<std::string> methods = allowed_methods(o);
  std::set<std::string> header_set = {"Accept", "Accept-Language", "Content-Language",
                                      "Content-Type"};  // the CORS-safelisted ones
  header_set.insert(o.allowed_headers.begin(), o.allowed_headers.end());
  const std::vector<std::string> headers(header_set.begin(), header_set.end());

  CorsPreflight answer;
  HeaderList& h = answer.headers;
  if (explicit_origin) {
    h.emplace_back("Vary", "Origin");
  } else {
    h.emplace_back("Access-Control-Allow-Origin", "*");
  }
  h.emplace_back("Access-Control-Allow-Methods", join(methods));
  h.emplace_back("Access-Control-Max-Age", "600");
  if (!all_headers) h.emplace_back("Access-Control-Allow-Headers", join(headers));
  if (o.allow_credentials) h.emplace_back("Access-Control-Allow-Credentials", "true");

  std::vector<std::string> failures;
  if (origin_allowed(o, *request.origin)) {
    if (explicit_origin) h.emplace_back("Access-Control-Allow-Origin", *request.origin);
  } else {
    failures.push_back("origin");
  }
  if (!contains(methods, *request.request_method)) failures.push_back("method");
  if (all_headers && request.request_headers) {
    h.emplace_back("Access-Control-Allow-Headers", *request.request_headers);
  } else if (request.request_headers) {
    std::vector<std::string> allowed;
    for (const std::string& name : headers) allowed.push_back(lower(name));
    size_t start = 0;
    while (start <= request.request_headers->size()) {
      const size_t comma = request.request_headers->find(',', start);
      const std::string name = trim(lower(request.request_headers->substr(start, comma - start)));
      if (!contains(allowed, name)) {
        failures.push_back("headers");
        break;
      }
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  if (failures.empty()) {
    answer.body = "OK";
  } else {
    answer.status = 400;
    answer.body = "Disallowed CORS " + join(failures);
  }
  return answer;
}

HeaderList cors_response_headers(const CorsOptions& o, const CorsRequest& request) {
  HeaderList h;
  if (!request.origin) return h;
  const bool any = all_origins(o);
  if (any && !request.has_cookie) h.emplace_back("Access-Control-Allow-Origin", "*");
  if (o.allow_credentials) h.emplace_back("Access-Control-Allow-Credentials", "true");
  // A request with cookies, or a listed origin, gets its own origin back.
  if ((any && request.has_cookie) || (!any && origin_allowed(o, *request.origin))) {
    h.emplace_back("Access-Control-Allow-Origin", *request.origin);
    h.emplace_back("Vary", "Origin");
  }
  return h;
}

}  // namespace gemmaserve
