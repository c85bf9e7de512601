// Typed, pydantic-like reads of a JSON request body: wrong types become 400 errors naming the
// field (param), and fields nobody read are reported so they can be logged as ignored.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace gemmaserve {

class RequestFields {
 public:
  // Throws a 400 when `body` is not a JSON object.
  explicit RequestFields(const nlohmann::ordered_json& body);

  // The raw value (nullptr when absent or null); marks the field as read.
  const nlohmann::ordered_json* raw(const std::string& name);
  bool present(const std::string& name) const;

  // Pydantic's lax mode: integers, integral floats and numeric strings for int fields; numbers
  // and numeric strings for float fields; booleans (and 0/1) for bool fields.
  std::optional<int64_t> get_int(const std::string& name);
  // get_int bounded to int (400 "... is too large" otherwise).
  std::optional<int> get_int32(const std::string& name);
  std::optional<double> get_double(const std::string& name);
  std::optional<bool> get_bool(const std::string& name);
  std::optional<std::string> get_string(const std::string& name);
  // A string or a list of strings (stop, bad_words).
  std::optional<std::vector<std::string>> get_string_list(const std::string& name,
                                                          bool allow_single = true);
  std::optional<std::vector<int32_t>> get_int_list(const std::string& name);

  // Fields in the body that no get/raw call asked for, in body order.
  std::vector<std::string> unread() const;

 private:
  const nlohmann::ordered_json& body_;
  std::set<std::string> read_;
};

// Reads one JSON value as an integer the way get_int does; `what` names it in errors.
int64_t json_to_int(const nlohmann::ordered_json& v, const std::string& what);
double json_to_double(const nlohmann::ordered_json& v, const std::string& what);

}  // namespace gemmaserve
