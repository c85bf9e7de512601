#include "server/http/request_body.h"

#include <string>

#include "server/shared/api_error.h"

namespace gemmaserve {

nlohmann::ordered_json parse_json_request_body(std::string_view body) {
  const JsonShape shape = json_shape(body);
  if (shape.depth > kMaxJsonDepth) {
    throw bad_request("JSON nesting deeper than " + std::to_string(kMaxJsonDepth) +
                      " levels is not accepted");
  }
  if (shape.widest_object > kMaxJsonObjectMembers) {
    throw bad_request("JSON objects with more than " + std::to_string(kMaxJsonObjectMembers) +
                      " members are not accepted");
  }
  if (shape.key_comparisons > kMaxJsonKeyComparisons) {
    throw bad_request("JSON objects this large in all are not accepted (parsing their " +
                      std::to_string(shape.key_comparisons) + " key comparisons exceeds " +
                      std::to_string(kMaxJsonKeyComparisons) + ")");
  }
  try {
    return nlohmann::ordered_json::parse(body);
  } catch (const nlohmann::json::exception& e) {
    throw bad_request(std::string("JSON decode error: ") + e.what());
  }
}

}  // namespace gemmaserve
