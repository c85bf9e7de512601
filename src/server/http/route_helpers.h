// What every API surface's routes answer with: JSON bodies, errors, SSE streams, and the one place
// where an exception becomes an error response. Surfaces register their routes on the HttpServer's
// httplib::Server with these (openai/openai_routes, chat_page/).
#pragma once

#include <functional>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>

#include "server/shared/api_error.h"
#include "server/shared/serving_common.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace gemmaserve {

std::string status_phrase(int status);
void send_json(httplib::Response& res, int status, const nlohmann::ordered_json& body);
void send_error(httplib::Response& res, const ApiError& e);
// The request body as JSON (request_body's limits; 400 on bad JSON).
nlohmann::ordered_json parse_body(const httplib::Request& req);
// The body of a generation request; vLLM names the response after an X-Request-Id header first,
// then the body's request_id.
nlohmann::ordered_json parse_generation_body(const httplib::Request& req);
// Runs a route, turning every exception into an OpenAI error response: the one place.
void guarded(httplib::Response& res, const std::function<void()>& route);
// A JSON body, or an SSE stream whose end (or the client's) releases its engine session.
void send_serving_response(httplib::Response& res, ServingResponse response);
// Known routes with the wrong method: 405 like FastAPI (httplib alone would say 404). `posted`:
// the routes are POST routes (GET, PUT and DELETE get the 405), else GET routes.
void answer_other_methods(httplib::Server& s, std::initializer_list<const char*> paths,
                          bool posted);

}  // namespace gemmaserve
