// Errors raised for bad input at the project's boundaries (files, requests, flags).
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

namespace gemmaserve {

// Bad user-supplied input: a checkpoint file, a flag, a request. The message is shown to the user
// as-is, so it names the file/tensor/field at fault.
class InputError : public std::runtime_error {
 public:
  explicit InputError(const std::string& message) : std::runtime_error(message) {}
  // `param` names the request field at fault for the OpenAI error body ("tool_calls").
  InputError(const std::string& message, std::string param)
      : std::runtime_error(message), param_(std::move(param)) {}
  const std::optional<std::string>& param() const { return param_; }

 private:
  std::optional<std::string> param_;
};

}  // namespace gemmaserve
