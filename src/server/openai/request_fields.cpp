#include "server/openai/request_fields.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "server/shared/api_error.h"

namespace gemmaserve {
namespace {

// A whole decimal string as Python's int() reads it (surrounding whitespace, sign, digits, '_').
std::optional<int64_t> parse_int_text(const std::string& s) {
  std::string digits;
  size_t b = s.find_first_not_of(" \t\n\r");
  size_t e = s.find_last_not_of(" \t\n\r");
  if (b == std::string::npos) return std::nullopt;
  for (size_t i = b; i <= e; ++i) {
    if (s[i] != '_') digits.push_back(s[i]);
  }
  if (digits.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(digits.c_str(), &end, 10);
  if (end == digits.c_str() || *end != '\0' || errno == ERANGE) return std::nullopt;
  return static_cast<int64_t>(v);
}

std::optional<double> parse_float_text(const std::string& s) {
  if (s.find_first_not_of(" \t\n\r") == std::string::npos) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  while (end && (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r')) ++end;
  if (end == s.c_str() || *end != '\0') return std::nullopt;
  return v;
}

}  // namespace

int64_t json_to_int(const nlohmann::ordered_json& v, const std::string& what) {
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() &&
        v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      throw bad_request(what + ": Input is too large", what);
    }
    return v.get<int64_t>();
  }
  if (v.is_boolean()) return v.get<bool>() ? 1 : 0;
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.2e18) {
      return static_cast<int64_t>(d);
    }
    throw bad_request(
        what + ": Input should be a valid integer, got a number with a fractional part", what);
  }
  if (v.is_string()) {
    if (auto x = parse_int_text(v.get<std::string>())) return *x;
    throw bad_request(
        what + ": Input should be a valid integer, unable to parse string as an integer", what);
  }
  throw bad_request(what + ": Input should be a valid integer", what);
}

double json_to_double(const nlohmann::ordered_json& v, const std::string& what) {
  if (v.is_number()) return v.get<double>();
  if (v.is_boolean()) return v.get<bool>() ? 1.0 : 0.0;
  if (v.is_string()) {
    if (auto x = parse_float_text(v.get<std::string>())) return *x;
    throw bad_request(what + ": Input should be a valid number, unable to parse string as a number",
                      what);
  }
  throw bad_request(what + ": Input should be a valid number", what);
}

RequestFields::RequestFields(const nlohmann::ordered_json& body) : body_(body) {
  if (!body.is_object()) {
    throw bad_request("The request body must be a JSON object, got " +
                      std::string(body.type_name()) + ".");
  }
}

bool RequestFields::present(const std::string& name) const {
  auto it = body_.find(name);
  return it != body_.end() && !it->is_null();
}

const nlohmann::ordered_json* RequestFields::raw(const std::string& name) {
  read_.insert(name);
  auto it = body_.find(name);
  if (it == body_.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<int64_t> RequestFields::get_int(const std::string& name) {
  const auto* v = raw(name);
  if (!v) return std::nullopt;
  return json_to_int(*v, name);
}

std::optional<int> RequestFields::get_int32(const std::string& name) {
  auto v = get_int(name);
  if (!v) return std::nullopt;
  if (*v > std::numeric_limits<int>::max() || *v < std::numeric_limits<int>::min()) {
    throw bad_request(name + ": " + std::to_string(*v) + " is too large", name);
  }
  return static_cast<int>(*v);
}

std::optional<double> RequestFields::get_double(const std::string& name) {
  const auto* v = raw(name);
  if (!v) return std::nullopt;
  return json_to_double(*v, name);
}

std::optional<bool> RequestFields::get_bool(const std::string& name) {
  const auto* v = raw(name);
  if (!v) return std::nullopt;
  if (v->is_boolean()) return v->get<bool>();
  if (v->is_number_integer() && (v->get<int64_t>() == 0 || v->get<int64_t>() == 1)) {
    return v->get<int64_t>() == 1;
  }
  if (v->is_string()) {
    const std::string s = v->get<std::string>();
    if (s == "true" || s == "True" || s == "1") return true;
    if (s == "false" || s == "False" || s == "0") return false;
  }
  throw bad_request(name + ": Input should be a valid boolean", name);
}

std::optional<std::string> RequestFields::get_string(const std::string& name) {
  const auto* v = raw(name);
  if (!v) return std::nullopt;
  if (!v->is_string()) throw bad_request(name + ": Input should be a valid string", name);
  return v->get<std::string>();
}

std::optional<std::vector<std::string>> RequestFields::get_string_list(const std::string& name,
                                                                       bool allow_single) {
  const auto* v = raw(name);
  if (!v) return std::nullopt;
  if (v->is_string() && allow_single) return std::vector<std::string>{v->get<std::string>()};
  if (!v->is_array()) {
    throw bad_request(name + ": Input should be a valid string or a list of strings", name);
  }
  std::vector<std::string> out;
  for (const auto& e : *v) {
    if (!e.is_string()) throw bad_request(name + ": every entry should be a valid string", name);
    out.push_back(e.get<std::string>());
  }
  return out;
}

std::optional<std::vector<int32_t>> RequestFields::get_int_list(const std::string& name) {
  const auto* v = raw(name);
  if (!v) return std::nullopt;
  if (!v->is_array()) throw bad_request(name + ": Input should be a valid list", name);
  std::vector<int32_t> out;
  for (const auto& e : *v) {
    const int64_t x = json_to_int(e, name);
    if (x < std::numeric_limits<int32_t>::min() || x > std::numeric_limits<int32_t>::max()) {
      throw bad_request(name + ": token id " + std::to_string(x) + " is out of range", name);
    }
    out.push_back(static_cast<int32_t>(x));
  }
  return out;
}

std::vector<std::string> RequestFields::unread() const {
  std::vector<std::string> out;
  for (auto it = body_.begin(); it != body_.end(); ++it) {
    if (read_.count(it.key()) == 0) out.push_back(it.key());
  }
  return out;
}

}  // namespace gemmaserve
