// Errors raised for bad input at the project's boundaries (files, requests, flags).
#pragma once

#include <stdexcept>
#include <string>

namespace gemmaserve {

// Bad user-supplied input: a checkpoint file, a flag, a request. The message is shown to the user
// as-is, so it names the file/tensor/field at fault.
class InputError : public std::runtime_error {
 public:
  explicit InputError(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace gemmaserve
