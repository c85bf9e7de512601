// A request body's text -> JSON, with the shape limits every route shares (the HTTP server and
// the request fuzz target call this one function).
#pragma once

#include <nlohmann/json.hpp>
#include <string_view>

#include "io/json_shape.h"

namespace gemmaserve {

// Deeper JSON would only be a way to exhaust the stack of recursive consumers (templates, dumps).
inline constexpr int kMaxJsonDepth = 128;

// Throws a 400 ApiError: "JSON nesting deeper than 128 levels is not accepted", "JSON objects
// with more than 10000 members are not accepted" or "JSON decode error: ..." (the parser's).
nlohmann::ordered_json parse_json_request_body(std::string_view body);

}  // namespace gemmaserve
