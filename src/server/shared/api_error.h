// Errors the HTTP layer sends as OpenAI error objects: {"error": {message, type, param, code}}
// with vLLM's status mapping. Everything a handler throws is turned into one of these in one
// place (HttpServer's exception handler), so a bad request can never take the server down.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>

namespace gemmaserve {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string type, const std::string& message,
           std::optional<std::string> param = std::nullopt)
      : std::runtime_error(message),
        status_(status),
        type_(std::move(type)),
        param_(std::move(param)) {}

  int status() const { return status_; }
  const std::string& type() const { return type_; }
  const std::optional<std::string>& param() const { return param_; }

 private:
  int status_;
  std::string type_;
  std::optional<std::string> param_;
};

// 400 BadRequestError, vLLM's VLLMValidationError / ValueError mapping.
inline ApiError bad_request(const std::string& message,
                            std::optional<std::string> param = std::nullopt) {
  return ApiError(400, "BadRequestError", message, std::move(param));
}

// The OpenAI error body.
inline nlohmann::ordered_json error_json(int status, const std::string& type,
                                         const std::string& message,
                                         const std::optional<std::string>& param) {
  nlohmann::ordered_json e;
  e["message"] = message;
  e["type"] = type;
  e["param"] = param ? nlohmann::ordered_json(*param) : nlohmann::ordered_json(nullptr);
  e["code"] = status;
  nlohmann::ordered_json body;
  body["error"] = std::move(e);
  return body;
}

inline nlohmann::ordered_json error_json(const ApiError& e) {
  return error_json(e.status(), e.type(), e.what(), e.param());
}

}  // namespace gemmaserve
