#include "server/http/route_helpers.h"

#include <httplib.h>

#include <memory>

#include "core/error.h"
#include "core/logging.h"
#include "server/http/request_body.h"

namespace gemmaserve {

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

void send_json(httplib::Response& res, int status, const nlohmann::ordered_json& body) {
  res.status = status;
  res.set_content(dump_json(body), "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) {
  if (e.status() == 503) res.set_header("Retry-After", "1");
  send_json(res, e.status(), error_json(e));
}

nlohmann::ordered_json parse_body(const httplib::Request& req) {
  return parse_json_request_body(req.body);
}

// The body of a completions or chat request; vLLM names the response after an X-Request-Id
// header first, then the body's request_id.
nlohmann::ordered_json parse_generation_body(const httplib::Request& req) {
  nlohmann::ordered_json body = parse_body(req);
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
  if (!response.stream && !response.content_type.empty()) {
    res.status = response.status;
    res.set_content(response.text, response.content_type.c_str());
    return;
  }
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

void answer_other_methods(httplib::Server& s, std::initializer_list<const char*> paths,
                          bool posted) {
  const auto method_not_allowed = [](const httplib::Request&, httplib::Response& res) {
    send_json(res, 405, error_json(405, status_phrase(405), status_phrase(405), std::nullopt));
  };
  for (const char* path : paths) {
    if (posted) {
      s.Get(path, method_not_allowed);
    } else {
      s.Post(path, method_not_allowed);
    }
    s.Put(path, method_not_allowed);
    s.Delete(path, method_not_allowed);
  }
}

}  // namespace gemmaserve
