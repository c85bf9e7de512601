#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>

#include "tokenizer/chat_template/builtins.h"
#include "tokenizer/chat_template/py_string.h"

namespace gemmaserve::jinja {
namespace {

using FilterFn = std::function<Value(const Value&, const CallArgs&)>;

Value arg_or(const std::optional<Value>& v, Value fallback) { return v ? *v : fallback; }

int64_t int_arg(const std::optional<Value>& v, int64_t fallback, const char* what) {
  if (!v || v->is_none()) return fallback;
  if (!v->is_int() && !v->is_bool()) {
    throw TemplateError(std::string(what) + ": expected an integer, got " + type_name(*v));
  }
  return v->as_int();
}

// Jinja's make_attrgetter: "a.b.0" looks up each part with getitem (digits as integers).
std::function<Value(const Value&)> attr_getter(const Value& attribute, bool lower_strings,
                                               std::optional<Value> fallback = std::nullopt) {
  std::vector<Value> parts;
  if (attribute.is_string()) {
    for (const std::string& part : py_split(attribute.as_string(), std::string("."), -1, false)) {
      bool digits = !part.empty() && std::all_of(part.begin(), part.end(),
                                                 [](char c) { return c >= '0' && c <= '9'; });
      // Past int64 Python's index finds nothing either: the largest index does the same.
      int64_t index = std::numeric_limits<int64_t>::max();
      if (digits) std::from_chars(part.data(), part.data() + part.size(), index);
      parts.push_back(digits ? Value::integer(index) : Value::string(part));
    }
  } else if (!attribute.is_none() && !attribute.is_undefined()) {
    parts.push_back(attribute);
  }
  return [parts, lower_strings, fallback](const Value& item) {
    Value v = item;
    for (const Value& part : parts) {
      v = get_item(v, part);
      if (v.is_undefined() && fallback) return *fallback;
    }
    if (lower_strings && v.is_string()) return Value::string(py_lower(v.as_string()));
    return v;
  };
}

std::vector<Value> sorted_items(std::vector<Value> items,
                                const std::function<Value(const Value&)>& key, bool reverse) {
  std::vector<std::pair<Value, Value>> keyed;
  keyed.reserve(items.size());
  for (Value& item : items) keyed.emplace_back(key(item), std::move(item));
  std::stable_sort(keyed.begin(), keyed.end(), [reverse](const auto& a, const auto& b) {
    return reverse ? compare(b.first, a.first) < 0 : compare(a.first, b.first) < 0;
  });
  std::vector<Value> out;
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return out;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// Python int(str): optional sign, surrounding whitespace, '_' between digits.
std::optional<int64_t> parse_int(const std::string& text, int base) {
  std::string s = py_strip(text, std::nullopt, true, true);
  if (s.empty()) return std::nullopt;
  size_t i = 0;
  bool negative = false;
  if (s[i] == '+' || s[i] == '-') negative = s[i++] == '-';
  if (i >= s.size()) return std::nullopt;
  // Python accepts the literal prefix that matches the base; base 0 takes it from the prefix.
  if (i + 1 < s.size() && s[i] == '0') {
    char p = static_cast<char>(std::tolower(static_cast<unsigned char>(s[i + 1])));
    int prefixed = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
    if (prefixed && (base == prefixed || base == 0)) {
      base = prefixed;
      i += 2;
    }
  }
  if (base == 0) base = 10;
  int64_t v = 0;
  bool last_digit = false;
  for (; i < s.size(); ++i) {
    char c = s[i];
    if (c == '_' && last_digit && i + 1 < s.size()) {
      last_digit = false;
      continue;
    }
    int d = (c >= '0' && c <= '9')   ? c - '0'
            : (c >= 'a' && c <= 'z') ? c - 'a' + 10
            : (c >= 'A' && c <= 'Z') ? c - 'A' + 10
                                     : 99;
    if (d >= base) return std::nullopt;
    if (__builtin_mul_overflow(v, base, &v) || __builtin_add_overflow(v, d, &v))
      return std::nullopt;
    last_digit = true;
  }
  if (!last_digit) return std::nullopt;
  return negative ? -v : v;
}

// Python float(str) for decimal literals, inf and nan.
std::optional<double> parse_float(const std::string& text) {
  std::string s = py_strip(text, std::nullopt, true, true);
  std::string clean;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_' && i > 0 && i + 1 < s.size() &&
        std::isdigit(static_cast<unsigned char>(s[i - 1])) &&
        std::isdigit(static_cast<unsigned char>(s[i + 1]))) {
      continue;
    }
    clean += s[i];
  }
  if (clean.empty()) return std::nullopt;
  std::string lower = py_lower(clean);
  std::string body = (lower[0] == '+' || lower[0] == '-') ? lower.substr(1) : lower;
  double sign = lower[0] == '-' ? -1 : 1;
  if (body == "inf" || body == "infinity") return sign * INFINITY;
  if (body == "nan") return NAN;
  for (char c : body) {
    if (!std::isdigit(static_cast<unsigned char>(c)) && c != '.' && c != 'e' && c != '+' &&
        c != '-')
      return std::nullopt;
  }
  char* end = nullptr;
  double d = std::strtod(clean.c_str(), &end);
  if (end != clean.c_str() + clean.size()) return std::nullopt;
  return d;
}

double round_half_even(double value, int64_t precision) {
  char buf[512];
  std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(std::clamp<int64_t>(precision, 0, 300)),
                value);
  return std::strtod(buf, nullptr);
}

Value do_tojson(const Value& v, const CallArgs& args) {
  auto a = bind_args(args, {"ensure_ascii", "indent", "separators", "sort_keys"}, "tojson");
  JsonOptions o;
  o.ensure_ascii = a[0] && truthy(*a[0]);
  if (a[1] && !a[1]->is_none()) {
    if (a[1]->is_string()) {
      o.indent = a[1]->as_string();
    } else {
      int64_t n = int_arg(a[1], 0, "tojson indent");
      check_text_size(static_cast<size_t>(std::clamp<int64_t>(n, 0, kMaxTextBytes + 1)));
      o.indent = std::string(static_cast<size_t>(std::max<int64_t>(n, 0)), ' ');
    }
  }
  if (a[2] && !a[2]->is_none()) {
    const Value& sep = *a[2];
    if (!sep.is_list() || sep.items().size() != 2 || !sep.items()[0].is_string() ||
        !sep.items()[1].is_string()) {
      throw TemplateError("tojson separators must be a pair of strings");
    }
    o.separators = std::make_pair(sep.items()[0].as_string(), sep.items()[1].as_string());
  }
  o.sort_keys = a[3] && truthy(*a[3]);
  return Value::string(to_json(v, o));
}

Value do_indent(const Value& v, const CallArgs& args) {
  auto a = bind_args(args, {"width", "first", "blank"}, "indent");
  std::string indention;
  Value width = arg_or(a[0], Value::integer(4));
  if (width.is_string()) {
    indention = width.as_string();
  } else {
    const int64_t n = int_arg(width, 4, "indent");
    check_text_size(static_cast<size_t>(std::clamp<int64_t>(n, 0, kMaxTextBytes + 1)));
    indention = std::string(static_cast<size_t>(std::max<int64_t>(n, 0)), ' ');
  }
  std::string s = to_str(v) + "\n";
  std::vector<std::string> lines = py_splitlines(s, false);
  std::string rv;
  if (a[2] && truthy(*a[2])) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i > 0) rv += "\n" + indention;
      rv += lines[i];
      check_text_size(rv.size());
    }
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      rv += "\n";
      if (!lines[i].empty()) rv += indention;
      rv += lines[i];
      check_text_size(rv.size());
    }
  }
  if (a[1] && truthy(*a[1])) rv = indention + rv;
  return Value::string(rv);
}

Value do_format(const Value& v, const CallArgs& args) {
  if (!args.keyword.empty()) throw TemplateError("format with keyword arguments is not supported");
  const std::string fmt = to_str(v);
  std::string out;
  size_t next = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    if (++i >= fmt.size()) throw TemplateError("incomplete format");
    char spec = fmt[i];
    if (spec == '%') {
      out += '%';
      continue;
    }
    if (next >= args.positional.size())
      throw TemplateError("not enough arguments for format string");
    const Value& arg = args.positional[next++];
    if (spec == 's')
      out += to_str(arg);
    else if (spec == 'r')
      out += repr(arg);
    else if ((spec == 'd' || spec == 'i') && arg.is_number()) {
      out += std::to_string(arg.is_float() ? static_cast<int64_t>(arg.as_double()) : arg.as_int());
    } else {
      throw TemplateError(std::string("unsupported format character '") + spec + "'");
    }
    check_text_size(out.size());
  }
  if (next < args.positional.size()) {
    throw TemplateError("not all arguments converted during string formatting");
  }
  return Value::string(out);
}

Value select_or_reject(const Value& v, const CallArgs& args, bool select, bool by_attribute,
                       const char* name) {
  size_t off = by_attribute ? 1 : 0;
  std::function<Value(const Value&)> transform = [](const Value& x) { return x; };
  if (by_attribute) {
    if (args.positional.empty()) throw TemplateError("Missing parameter for attribute name");
    transform = attr_getter(args.positional[0], false);
  }
  std::optional<std::string> test;
  CallArgs test_args;
  if (args.positional.size() > off) {
    test = to_str(args.positional[off]);
    test_args.positional.assign(args.positional.begin() + static_cast<long>(off) + 1,
                                args.positional.end());
    test_args.keyword = args.keyword;
    if (!is_known_test(*test)) throw TemplateError("No test named '" + *test + "'.");
  } else if (!args.keyword.empty()) {
    throw TemplateError(std::string(name) + "() got unexpected keyword arguments");
  }
  std::vector<Value> out;
  for (const Value& item : iterate(v)) {
    Value x = transform(item);
    bool passed = test ? apply_test(*test, x, test_args) : truthy(x);
    if (passed == select) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value do_map(const Value& v, const CallArgs& args) {
  std::function<Value(const Value&)> func;
  if (args.positional.empty()) {
    std::optional<Value> attribute;
    std::optional<Value> fallback;
    for (const auto& [key, value] : args.keyword) {
      if (key == "attribute")
        attribute = value;
      else if (key == "default")
        fallback = value;
      else
        throw TemplateError("Unexpected keyword argument '" + key + "'");
    }
    if (!attribute) throw TemplateError("map requires a filter argument");
    func = attr_getter(*attribute, false, fallback);
  } else {
    std::string filter = to_str(args.positional[0]);
    if (!is_known_filter(filter)) throw TemplateError("No filter named '" + filter + "'.");
    CallArgs rest;
    rest.positional.assign(args.positional.begin() + 1, args.positional.end());
    rest.keyword = args.keyword;
    func = [filter, rest](const Value& item) { return apply_filter(filter, item, rest); };
  }
  std::vector<Value> out;
  for (const Value& item : iterate(v)) out.push_back(func(item));
  return Value::list(std::move(out));
}

Value min_max(const Value& v, const CallArgs& args, bool is_max) {
  auto a = bind_args(args, {"case_sensitive", "attribute"}, is_max ? "max" : "min");
  bool case_sensitive = a[0] && truthy(*a[0]);
  auto key = attr_getter(arg_or(a[1], Value::none()), !case_sensitive);
  std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  Value best_key = key(items[0]);
  for (size_t i = 1; i < items.size(); ++i) {
    Value k = key(items[i]);
    if (is_max ? compare(k, best_key) > 0 : compare(k, best_key) < 0) {
      best = i;
      best_key = k;
    }
  }
  return items[best];
}

const std::map<std::string, FilterFn, std::less<>>& filters() {
  static const std::map<std::string, FilterFn, std::less<>> table = [] {
    std::map<std::string, FilterFn, std::less<>> t;
    t["tojson"] = do_tojson;
    t["indent"] = do_indent;
    t["format"] = do_format;
    t["map"] = do_map;
    t["select"] = [](const Value& v, const CallArgs& a) {
      return select_or_reject(v, a, true, false, "select");
    };
    t["reject"] = [](const Value& v, const CallArgs& a) {
      return select_or_reject(v, a, false, false, "reject");
    };
    t["selectattr"] = [](const Value& v, const CallArgs& a) {
      return select_or_reject(v, a, true, true, "selectattr");
    };
    t["rejectattr"] = [](const Value& v, const CallArgs& a) {
      return select_or_reject(v, a, false, true, "rejectattr");
    };
    t["max"] = [](const Value& v, const CallArgs& a) { return min_max(v, a, true); };
    t["min"] = [](const Value& v, const CallArgs& a) { return min_max(v, a, false); };
    t["trim"] = [](const Value& v, const CallArgs& args) {
      auto a = bind_args(args, {"chars"}, "trim");
      std::optional<std::string> chars;
      if (a[0] && !a[0]->is_none()) chars = to_str(*a[0]);
      return Value::string(py_strip(to_str(v), chars, true, true));
    };
    t["upper"] = [](const Value& v, const CallArgs& a) {
      bind_args(a, {}, "upper");
      return Value::string(py_upper(to_str(v)));
    };
    t["lower"] = [](const Value& v, const CallArgs& a) {
      bind_args(a, {}, "lower");
      return Value::string(py_lower(to_str(v)));
    };
    t["capitalize"] = [](const Value& v, const CallArgs& a) {
      bind_args(a, {}, "capitalize");
      return Value::string(py_capitalize(to_str(v)));
    };
    t["title"] = [](const Value& v, const CallArgs& a) {
      bind_args(a, {}, "title");
      // Jinja capitalizes each chunk after runs of whitespace, '-', '(', '{', '[' or '<'.
      std::u32string s = decode_utf8(to_str(v));
      std::u32string out;
      bool boundary = true;
      for (char32_t c : s) {
        bool sep = is_py_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
        if (sep) {
          out.push_back(c);
          boundary = true;
        } else {
          out.push_back(boundary ? to_upper(c) : to_lower(c));
          boundary = false;
        }
      }
      return Value::string(encode_utf8(out));
    };
    FilterFn fdefault = [](const Value& v, const CallArgs& args) {
      auto a = bind_args(args, {"default_value", "boolean"}, "default");
      bool boolean = a[1] && truthy(*a[1]);
      if (v.is_undefined() || (boolean && !truthy(v))) return arg_or(a[0], Value::string(""));
      return v;
    };
    t["default"] = fdefault;
    t["d"] = fdefault;
    FilterFn flength = [](const Value& v, const CallArgs& a) {
      bind_args(a, {}, "length");
      return Value::integer(length(v));
    };
    t["length"] = flength;
    t["count"] = flength;
    t["first"] = [](const Value& v, const CallArgs& a) {
      bind_args(a, {}, "first");
      std::vector<Value> items = iterate(v);
      if (items.empty()) return Value::undefined("No first item, sequence was empty.");
      return items.front();
    };
    t["last"] = [](const Value& v, const CallArgs& a) {
      bind_args(a, {}, "last");
      std::vector<Value> items = iterate(v);
      if (items.empty()) return Value::undefined("No last item, sequence was empty.");
      return items.back();
    };
    t["join"] = [](const Value& v, const CallArgs& args) {
      auto a = bind_args(args, {"d", "attribute"}, "join");
      std::string sep = a[0] ? to_str(*a[0]) : "";
      auto key = attr_getter(arg_or(a[1], Value::none()), false);
      std::string out;
      bool first = true;
      for (const Value& item : iterate(v)) {
        if (!first) out += sep;
        first = false;
        out += to_str(key(item));
        check_text_size(out.size());
      }
      return Value::string(out);
    };
    t["list"] = [](const Value& v, const CallArgs& a) {
      bind_args(a, {}, "list");
      return Value::list(iterate(v));
    };
    t["items"] = [](const Value& v, const CallArgs& a) {
      bind_args(a, {}, "items");
      if (v.is_undefined()) return Value::list();
      if (!v.is_dict()) throw TemplateError("Can only get item pairs from a mapping.");
      std::vector<Value> out;
      for (const auto& [key, value] : v.dict_object().items()) {
        out.push_back(Value::tuple({Value::string(key), value}));
      }
      return Value::list(std::move(out));
    };
    t["dictsort"] = [](const Value& v, const CallArgs& args) {
      auto a = bind_args(args, {"case_sensitive", "by", "reverse"}, "dictsort");
      bool case_sensitive = a[0] && truthy(*a[0]);
      std::string by = a[1] ? to_str(*a[1]) : "key";
      if (by != "key" && by != "value") {
        throw TemplateError("You can only sort by either \"key\" or \"value\"");
      }
      if (v.is_undefined()) v.fail_undefined();
      if (!v.is_dict()) {
        throw TemplateError("'" + type_name(v) + "' object has no attribute 'items'");
      }
      std::vector<Value> pairs;
      for (const auto& [key, value] : v.dict_object().items()) {
        pairs.push_back(Value::tuple({Value::string(key), value}));
      }
      size_t pos = by == "key" ? 0 : 1;
      return Value::list(sorted_items(
          std::move(pairs),
          [pos, case_sensitive](const Value& item) {
            const Value& k = item.items()[pos];
            if (!case_sensitive && k.is_string()) return Value::string(py_lower(k.as_string()));
            return k;
          },
          a[2] && truthy(*a[2])));
    };
    t["sort"] = [](const Value& v, const CallArgs& args) {
      auto a = bind_args(args, {"reverse", "case_sensitive", "attribute"}, "sort");
      bool case_sensitive = a[1] && truthy(*a[1]);
      auto key = attr_getter(arg_or(a[2], Value::none()), !case_sensitive);
      return Value::list(sorted_items(iterate(v), key, a[0] && truthy(*a[0])));
    };
    t["unique"] = [](const Value& v, const CallArgs& args) {
      auto a = bind_args(args, {"case_sensitive", "attribute"}, "unique");
      bool case_sensitive = a[0] && truthy(*a[0]);
      auto key = attr_getter(arg_or(a[1], Value::none()), !case_sensitive);
      std::vector<Value> seen;
      std::vector<Value> out;
      for (const Value& item : iterate(v)) {
        Value k = key(item);
        bool found = false;
        for (const Value& s : seen) found = found || equals(s, k);
        if (!found) {
          seen.push_back(k);
          out.push_back(item);
        }
      }
      return Value::list(std::move(out));
    };
    t["reverse"] = [](const Value& v, const CallArgs& a) {
      bind_args(a, {}, "reverse");
      if (v.is_string()) {
        std::u32string s = decode_utf8(v.as_string());
        std::reverse(s.begin(), s.end());
        return Value::string(encode_utf8(s));
      }
      std::vector<Value> items = iterate(v);
      std::reverse(items.begin(), items.end());
      return Value::list(std::move(items));
    };
    t["sum"] = [](const Value& v, const CallArgs& args) {
      auto a = bind_args(args, {"attribute", "start"}, "sum");
      auto key = attr_getter(arg_or(a[0], Value::none()), false);
      Value total = arg_or(a[1], Value::integer(0));
      for (const Value& item : iterate(v)) total = binary_op("+", total, key(item));
      return total;
    };
    t["string"] = [](const Value& v, const CallArgs& a) {
      bind_args(a, {}, "string");
      return Value::string(to_str(v));
    };
    t["int"] = [](const Value& v, const CallArgs& args) {
      auto a = bind_args(args, {"default", "base"}, "int");
      Value fallback = arg_or(a[0], Value::integer(0));
      int64_t base = int_arg(a[1], 10, "int base");
      if (v.is_bool() || v.is_int()) return Value::integer(v.as_int());
      // Python's int is unbounded; past int64 the template gets an error, not a wrapped value.
      const auto to_int = [](double d) {
        if (!(d > -0x1p63 && d < 0x1p63)) {
          throw TemplateError("int: " + repr(Value::number(d)) +
                              " is past the 64-bit integer range");
        }
        return Value::integer(static_cast<int64_t>(d));
      };
      if (v.is_float()) {
        double d = v.as_double();
        if (std::isnan(d) || std::isinf(d)) return fallback;
        return to_int(d);
      }
      if (v.is_string()) {
        if (auto i = parse_int(v.as_string(), static_cast<int>(base))) return Value::integer(*i);
        if (auto d = parse_float(v.as_string()); d && !std::isnan(*d) && !std::isinf(*d)) {
          return to_int(*d);
        }
      }
      return fallback;
    };
    t["float"] = [](const Value& v, const CallArgs& args) {
      auto a = bind_args(args, {"default"}, "float");
      Value fallback = arg_or(a[0], Value::number(0.0));
      if (v.is_number()) return Value::number(v.as_double());
      if (v.is_string()) {
        if (auto d = parse_float(v.as_string())) return Value::number(*d);
      }
      return fallback;
    };
    t["abs"] = [](const Value& v, const CallArgs& a) {
      bind_args(a, {}, "abs");
      if (v.is_float()) return Value::number(std::fabs(v.as_double()));
      if (v.is_int() || v.is_bool())
        return Value::integer(v.as_int() < 0 ? -v.as_int() : v.as_int());
      throw TemplateError("bad operand type for abs(): '" + type_name(v) + "'");
    };
    t["round"] = [](const Value& v, const CallArgs& args) {
      auto a = bind_args(args, {"precision", "method"}, "round");
      int64_t precision = int_arg(a[0], 0, "round precision");
      std::string method = a[1] ? to_str(*a[1]) : "common";
      if (method != "common" && method != "ceil" && method != "floor") {
        throw TemplateError("method must be common, ceil or floor");
      }
      if (!v.is_number()) throw TemplateError("type " + type_name(v) + " doesn't define __round__");
      if (method == "common") {
        if (!v.is_float()) return Value::integer(v.as_int());
        return Value::number(round_half_even(v.as_double(), precision));
      }
      double scale = std::pow(10.0, static_cast<double>(precision));
      double x = v.as_double() * scale;
      return Value::number((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
    };
    t["replace"] = [](const Value& v, const CallArgs& args) {
      auto a = bind_args(args, {"old", "new", "count"}, "replace");
      if (!a[0] || !a[1]) throw TemplateError("replace() missing required arguments");
      return Value::string(
          py_replace(to_str(v), to_str(*a[0]), to_str(*a[1]), int_arg(a[2], -1, "replace count")));
    };
    FilterFn identity = [](const Value& v, const CallArgs&) { return v; };
    t["safe"] = identity;
    FilterFn escape = [](const Value& v, const CallArgs&) {
      return Value::string(html_escape(to_str(v)));
    };
    t["escape"] = escape;
    t["e"] = escape;
    t["forceescape"] = escape;
    t["wordcount"] = [](const Value& v, const CallArgs&) {
      std::u32string s = decode_utf8(to_str(v));
      int64_t words = 0;
      bool in_word = false;
      for (char32_t c : s) {
        bool word = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    c == '_' || (c >= 0x80 && !is_py_space(c));
        if (word && !in_word) ++words;
        in_word = word;
      }
      return Value::integer(words);
    };
    t["truncate"] = [](const Value& v, const CallArgs& args) {
      auto a = bind_args(args, {"length", "killwords", "end", "leeway"}, "truncate");
      std::u32string s = decode_utf8(to_str(v));
      int64_t length = int_arg(a[0], 255, "truncate length");
      std::u32string end = decode_utf8(a[2] ? to_str(*a[2]) : "...");
      int64_t leeway = int_arg(a[3], 5, "truncate leeway");
      int64_t end_size = static_cast<int64_t>(end.size());
      if (length < end_size) {
        throw TemplateError("expected length >= " + std::to_string(end_size) + ", got " +
                            std::to_string(length));
      }
      if (static_cast<int64_t>(s.size()) <= length + leeway) return Value::string(to_str(v));
      std::u32string head = s.substr(0, static_cast<size_t>(length - end_size));
      if (!(a[1] && truthy(*a[1]))) {
        size_t space = head.rfind(U' ');
        if (space != std::u32string::npos) head = head.substr(0, space);
      }
      return Value::string(encode_utf8(head + end));
    };
    t["center"] = [](const Value& v, const CallArgs& args) {
      auto a = bind_args(args, {"width"}, "center");
      CallArgs inner;
      inner.positional.push_back(arg_or(a[0], Value::integer(80)));
      Value method = get_attr(Value::string(to_str(v)), "center");
      return call_value(method, inner);
    };
    t["batch"] = [](const Value& v, const CallArgs& args) {
      auto a = bind_args(args, {"linecount", "fill_with"}, "batch");
      int64_t n = int_arg(a[0], 0, "batch");
      if (n <= 0) throw TemplateError("batch linecount must be positive");
      if (a[1] && !a[1]->is_none()) check_list_size(static_cast<size_t>(n));  // filled up to n
      std::vector<Value> out;
      std::vector<Value> tmp;
      for (const Value& item : iterate(v)) {
        if (static_cast<int64_t>(tmp.size()) == n) {
          out.push_back(Value::list(std::move(tmp)));
          tmp.clear();
        }
        tmp.push_back(item);
      }
      if (!tmp.empty()) {
        if (a[1] && !a[1]->is_none()) {
          while (static_cast<int64_t>(tmp.size()) < n) tmp.push_back(*a[1]);
        }
        out.push_back(Value::list(std::move(tmp)));
      }
      return Value::list(std::move(out));
    };
    t["slice"] = [](const Value& v, const CallArgs& args) {
      auto a = bind_args(args, {"slices", "fill_with"}, "slice");
      int64_t slices = int_arg(a[0], 0, "slice");
      if (slices <= 0) throw TemplateError("slice count must be positive");
      check_list_size(static_cast<size_t>(slices));
      std::vector<Value> seq = iterate(v);
      int64_t len = static_cast<int64_t>(seq.size());
      int64_t per = len / slices;
      int64_t extra = len % slices;
      int64_t offset = 0;
      std::vector<Value> out;
      for (int64_t k = 0; k < slices; ++k) {
        int64_t start = offset + k * per;
        if (k < extra) ++offset;
        int64_t end = offset + (k + 1) * per;
        std::vector<Value> tmp(seq.begin() + start, seq.begin() + end);
        if (a[1] && !a[1]->is_none() && k >= extra) tmp.push_back(*a[1]);
        out.push_back(Value::list(std::move(tmp)));
      }
      return Value::list(std::move(out));
    };
    return t;
  }();
  return table;
}

}  // namespace

bool is_known_filter(std::string_view name) { return filters().find(name) != filters().end(); }

Value apply_filter(const std::string& name, const Value& input, const CallArgs& args) {
  auto it = filters().find(name);
  if (it == filters().end()) throw TemplateError("No filter named '" + name + "'.");
  return it->second(input, args);
}

}  // namespace gemmaserve::jinja
