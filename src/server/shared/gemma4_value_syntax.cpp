#include "server/shared/gemma4_value_syntax.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <optional>
#include <system_error>

#include "core/logging.h"
#include "core/python_text.h"
#include "core/utf8.h"
#include "server/shared/special_token_text.h"

namespace gemmaserve {

namespace {

constexpr std::string_view kDelim = kStringDelimiter;
constexpr std::string_view kSpaces = " \t\n\r\f\v";

bool is_space(char c) { return kSpaces.find(c) != std::string_view::npos; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

std::string_view trim(std::string_view s) {
  size_t b = s.find_first_not_of(kSpaces);
  if (b == std::string_view::npos) return {};
  size_t e = s.find_last_not_of(kSpaces);
  return s.substr(b, e - b + 1);
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return (x >= 'A' && x <= 'Z' ? x + 32 : x) == y;
         });
}

// Length of the longest suffix of `s` that is a proper prefix of the string delimiter.
size_t partial_delimiter_suffix(std::string_view s) {
  for (size_t n = std::min(s.size(), kDelim.size() - 1); n > 0; --n) {
    if (kDelim.starts_with(s.substr(s.size() - n))) return n;
  }
  return 0;
}

// Python's digitpart: digits with single '_' only between digits. Appends the digits to `out`.
bool take_digitpart(std::string_view s, std::string& out) {
  if (s.empty() || !is_digit(s.front()) || !is_digit(s.back())) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    if (is_digit(s[i])) {
      out += s[i];
    } else if (s[i] != '_' || !is_digit(s[i + 1])) {  // s.back() is a digit, so i + 1 is valid
      return false;
    }
  }
  return true;
}

// Python int(s) as exact JSON digits (no leading zeros, no '+', "-0" as "0").
std::optional<std::string> python_int_json(std::string_view s) {
  bool negative = false;
  if (!s.empty() && (s.front() == '+' || s.front() == '-')) {
    negative = s.front() == '-';
    s.remove_prefix(1);
  }
  std::string digits;
  if (!take_digitpart(s, digits)) return std::nullopt;
  size_t nz = digits.find_first_not_of('0');
  if (nz == std::string::npos) return "0";
  std::string out = negative ? "-" : "";
  out.append(digits, nz);
  return out;
}

// Python float(s) for the decimal forms (no inf/nan), printed as repr; nullopt when `s` is not
// such a float, has neither '.' nor an exponent (an int), or overflows to infinity.
std::optional<std::string> python_float_json(std::string_view s) {
  bool negative = false;
  if (!s.empty() && (s.front() == '+' || s.front() == '-')) {
    negative = s.front() == '-';
    s.remove_prefix(1);
  }
  size_t e_pos = s.find_first_of("eE");
  std::string_view mantissa = s.substr(0, e_pos);
  std::string_view exponent =
      e_pos == std::string_view::npos ? std::string_view() : s.substr(e_pos + 1);
  size_t dot = mantissa.find('.');
  if (dot == std::string_view::npos && e_pos == std::string_view::npos) return std::nullopt;
  std::string int_digits;
  std::string frac_digits;
  std::string_view int_part = mantissa.substr(0, dot);
  std::string_view frac_part =
      dot == std::string_view::npos ? std::string_view() : mantissa.substr(dot + 1);
  if (int_part.empty() && frac_part.empty()) return std::nullopt;
  if (!int_part.empty() && !take_digitpart(int_part, int_digits)) return std::nullopt;
  if (!frac_part.empty() && !take_digitpart(frac_part, frac_digits)) return std::nullopt;
  long long exp_value = 0;
  std::string exp_digits;
  bool exp_negative = false;
  if (e_pos != std::string_view::npos) {
    if (!exponent.empty() && (exponent.front() == '+' || exponent.front() == '-')) {
      exp_negative = exponent.front() == '-';
      exponent.remove_prefix(1);
    }
    if (!take_digitpart(exponent, exp_digits)) return std::nullopt;
    for (char c : exp_digits) exp_value = std::min(exp_value * 10 + (c - '0'), 1000000LL);
    if (exp_negative) exp_value = -exp_value;
  }
  std::string normalized = int_digits.empty() ? "0" : int_digits;
  normalized.append(".").append(frac_digits.empty() ? "0" : frac_digits).append("e");
  normalized.append(exp_negative ? "-" : "").append(exp_digits.empty() ? "0" : exp_digits);
  double value = 0;
  auto [ptr, ec] = std::from_chars(normalized.data(), normalized.data() + normalized.size(), value);
  if (ec == std::errc::result_out_of_range) {
    // Decimal magnitude decides overflow (Python gives inf: kept as text) or underflow (0.0).
    size_t int_nz = int_digits.find_first_not_of('0');
    long long magnitude =
        int_nz != std::string::npos
            ? static_cast<long long>(int_digits.size() - int_nz) + exp_value
            : exp_value - static_cast<long long>(
                              std::min(frac_digits.find_first_not_of('0'), frac_digits.size()));
    if (magnitude > 0) return std::nullopt;
    value = 0.0;
  } else if (ec != std::errc() || ptr != normalized.data() + normalized.size()) {
    return std::nullopt;
  }
  if (!std::isfinite(value)) return std::nullopt;
  return python_float_repr(negative ? -value : value);
}

}  // namespace

std::string gemma4_bare_value_to_json(std::string_view raw) {
  std::string_view v = trim(raw);
  if (v == "true" || v == "false") return std::string(v);
  if (iequals(v, "null") || iequals(v, "none") || iequals(v, "nil")) return "null";
  if (auto n = python_int_json(v)) return *n;
  if (auto f = python_float_json(v)) return *f;
  return python_json_quote(v);
}

std::string Gemma4ArgsToJson::feed(std::string_view text) {
  out_.clear();
  pending_.append(text);
  run(false);
  return std::move(out_);
}

std::string Gemma4ArgsToJson::finish() {
  out_.clear();
  run(true);
  switch (mode_) {
    case Mode::kKey:
    case Mode::kQuotedKey:
    case Mode::kExpectColon:
      GS_LOG_DEBUG << "gemma4 tool call: dropped a key without a value";
      break;
    case Mode::kExpectValue:
      if (in_object()) out_ += "\"\"";  // "key:" at the very end: vLLM's empty string
      break;
    case Mode::kString:
      out_ += '"';
      break;
    case Mode::kBare:
      end_bare_value();
      break;
    default:
      break;
  }
  while (!stack_.empty()) close_container();
  return std::move(out_);
}

void Gemma4ArgsToJson::run(bool final) {
  std::string_view in = pending_;
  size_t i = 0;
  bool hold = false;  // the rest of `in` waits for more input
  // A proper prefix of <|"|> at the end of the input may still become the delimiter.
  auto may_be_delimiter = [&](size_t at) {
    std::string_view rest = in.substr(at);
    return !final && rest.size() < kDelim.size() && kDelim.starts_with(rest);
  };
  while (i < in.size() && !hold) {
    char c = in[i];
    switch (mode_) {
      case Mode::kDone:
        if (!warned_ && !trim(in.substr(i)).empty()) {
          GS_LOG_DEBUG << "gemma4 tool call: ignored text after the arguments' closing brace";
          warned_ = true;
        }
        i = in.size();
        break;
      case Mode::kExpectKey:
        if (is_space(c) || c == ',') {
          ++i;
        } else if (c == '}') {
          close_container();
          ++i;
        } else if (in.substr(i).starts_with(kDelim)) {
          token_.clear();
          mode_ = Mode::kQuotedKey;
          i += kDelim.size();
        } else if (may_be_delimiter(i)) {
          hold = true;
        } else {
          token_.clear();
          mode_ = Mode::kKey;
        }
        break;
      case Mode::kKey:
        if (c == ':') {
          std::string_view key = trim(token_);
          if (key.size() >= 2 * kDelim.size() && key.starts_with(kDelim) && key.ends_with(kDelim)) {
            key = key.substr(kDelim.size(), key.size() - 2 * kDelim.size());
          }
          begin_member(key);
          mode_ = Mode::kExpectValue;
        } else if (c == '}') {
          GS_LOG_DEBUG << "gemma4 tool call: dropped a key without a value";
          close_container();
        } else {
          token_ += c;
        }
        ++i;
        break;
      case Mode::kQuotedKey: {
        size_t end = in.find(kDelim, i);
        if (end == std::string_view::npos) {
          size_t keep = final ? 0 : partial_delimiter_suffix(in.substr(i));
          token_.append(in.substr(i, in.size() - i - keep));
          i = in.size() - keep;
          hold = true;
        } else {
          token_.append(in.substr(i, end - i));
          i = end + kDelim.size();
          mode_ = Mode::kExpectColon;
        }
        break;
      }
      case Mode::kExpectColon:
        if (is_space(c)) {
          ++i;
        } else if (c == ':') {
          begin_member(token_);
          mode_ = Mode::kExpectValue;
          ++i;
        } else if (c == '}') {
          close_container();
          ++i;
        } else {
          mode_ = Mode::kKey;  // text after a quoted key: keep collecting it as the key
        }
        break;
      case Mode::kExpectValue:
        if (is_space(c) || (!in_object() && c == ',')) {
          ++i;
        } else if (!in_object() && c == ']') {
          close_container();
          ++i;
        } else if (in_object() && (c == ',' || c == '}')) {
          out_ += "\"\"";  // "key:," has no value; the terminator is handled next
          after_value();
        } else if (in.substr(i).starts_with(kDelim)) {
          if (!in_object()) begin_element();
          out_ += '"';
          mode_ = Mode::kString;
          i += kDelim.size();
        } else if (may_be_delimiter(i)) {
          hold = true;
        } else if (c == '{' || c == '[') {
          if (!in_object()) begin_element();
          open_container(c == '{');
          ++i;
        } else {
          token_.clear();
          mode_ = Mode::kBare;
        }
        break;
      case Mode::kString: {
        size_t end = in.find(kDelim, i);
        if (end == std::string_view::npos) {
          std::string_view rest = in.substr(i);
          size_t keep =
              final ? 0 : std::max(partial_delimiter_suffix(rest), incomplete_utf8_suffix(rest));
          append_python_json_escaped(out_, rest.substr(0, rest.size() - keep));
          i = in.size() - keep;
          hold = true;
        } else {
          append_python_json_escaped(out_, in.substr(i, end - i));
          out_ += '"';
          i = end + kDelim.size();
          after_value();
        }
        break;
      }
      case Mode::kBare:
        // vLLM ends a bare value at ',' '}' ']' in objects and at ',' ']' in arrays.
        if (c == ',' || c == ']' || (c == '}' && in_object())) {
          end_bare_value();
        } else {
          token_ += c;
          ++i;
        }
        break;
      case Mode::kAfterValue:
        if (is_space(c)) {
          ++i;
        } else if (c == ',') {
          mode_ = in_object() ? Mode::kExpectKey : Mode::kExpectValue;
          ++i;
        } else if (c == '}' || c == ']') {
          if ((c == '}') == in_object()) {
            close_container();
          } else {
            GS_LOG_DEBUG << "gemma4 tool call: ignored a stray '" << c << "'";
          }
          ++i;
        } else {
          mode_ = in_object() ? Mode::kExpectKey : Mode::kExpectValue;  // a missing comma
        }
        break;
    }
  }
  pending_.erase(0, i);
}

void Gemma4ArgsToJson::begin_output() {
  if (!opened_) {
    out_ += '{';
    opened_ = true;
  }
}

void Gemma4ArgsToJson::begin_member(std::string_view key) {
  begin_output();
  if (stack_.back().count++ > 0) out_ += ", ";
  out_ += python_json_quote(key);
  out_ += ": ";
}

void Gemma4ArgsToJson::begin_element() {
  begin_output();
  if (stack_.back().count++ > 0) out_ += ", ";
}

void Gemma4ArgsToJson::open_container(bool is_object) {
  out_ += is_object ? '{' : '[';
  stack_.push_back(Frame{is_object, 0});
  mode_ = is_object ? Mode::kExpectKey : Mode::kExpectValue;
}

void Gemma4ArgsToJson::close_container() {
  begin_output();
  out_ += stack_.back().is_object ? '}' : ']';
  stack_.pop_back();
  mode_ = stack_.empty() ? Mode::kDone : Mode::kAfterValue;
}

void Gemma4ArgsToJson::end_bare_value() {
  if (!in_object()) begin_element();
  out_ += gemma4_bare_value_to_json(token_);
  token_.clear();
  mode_ = Mode::kAfterValue;
}

void Gemma4ArgsToJson::after_value() { mode_ = Mode::kAfterValue; }

std::string gemma4_args_to_json(std::string_view text) {
  Gemma4ArgsToJson converter;
  std::string out = converter.feed(text);
  out += converter.finish();
  return out;
}

}  // namespace gemmaserve
