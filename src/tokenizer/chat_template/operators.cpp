#include <algorithm>
#include <cmath>
#include <limits>

#include "tokenizer/chat_template/builtins.h"
#include "tokenizer/chat_template/py_string.h"

namespace gemmaserve::jinja {
namespace {

[[noreturn]] void unsupported(const std::string& op, const Value& a, const Value& b) {
  throw TemplateError("unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" +
                      type_name(b) + "'");
}

// Python ints never overflow; ours are 64-bit, so overflow is an error instead of a wrong value.
int64_t checked_add(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) throw TemplateError("integer overflow");
  return r;
}

int64_t checked_sub(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_sub_overflow(a, b, &r)) throw TemplateError("integer overflow");
  return r;
}

int64_t checked_mul(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) throw TemplateError("integer overflow");
  return r;
}

int64_t floor_div(int64_t a, int64_t b) {
  if (b == 0) throw TemplateError("integer division or modulo by zero");
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t floor_mod(int64_t a, int64_t b) {
  if (b == 0) throw TemplateError("integer division or modulo by zero");
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

double float_mod(double a, double b) {
  if (b == 0) throw TemplateError("float modulo");
  double r = std::fmod(a, b);
  if (r != 0) {
    if ((b < 0) != (r < 0)) r += b;
  } else {
    r = std::copysign(0.0, b);
  }
  return r;
}

double float_floor_div(double a, double b) {
  if (b == 0) throw TemplateError("float floor division by zero");
  double mod = std::fmod(a, b);
  double div = (a - mod) / b;
  if (mod != 0 && ((b < 0) != (mod < 0))) div -= 1.0;
  if (div == 0) return std::copysign(0.0, a / b);
  double floored = std::floor(div);
  if (div - floored > 0.5) floored += 1.0;
  return floored;
}

Value repeat(const Value& seq, int64_t n) {
  const size_t unit = seq.is_string() ? seq.as_string().size() : seq.items().size();
  if (n <= 0 || unit == 0) n = 0;  // `'' * 10**18` is '' at once, not after 10**18 appends
  const size_t total = n > 0 && unit > kMaxTextBytes / static_cast<uint64_t>(n)
                           ? kMaxTextBytes + 1
                           : unit * static_cast<size_t>(n);
  if (seq.is_string()) {
    check_text_size(total);
  } else {
    check_list_size(total);
  }
  if (seq.is_string()) {
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += seq.as_string();
    return Value::string(std::move(out));
  }
  std::vector<Value> out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.items().begin(), seq.items().end());
  return seq.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

std::string object_repr(const Value& v) {
  if (v.is_none()) return "'None'";
  std::string out = "'";  // built piecewise: GCC 12 -O3 flags `"..." + std::string&&` (-Wrestrict)
  out += type_name(v);
  out += " object'";
  return out;
}

Value no_attribute(const Value& obj, const std::string& name) {
  return Value::undefined(object_repr(obj) + " has no attribute '" + name + "'");
}

Value no_element(const Value& obj, const Value& key) {
  return Value::undefined(object_repr(obj) + " has no element " + repr(key));
}

Value unsafe(const Value& obj, const std::string& name) {
  return Value::undefined("access to attribute '" + name + "' of '" + type_name(obj) +
                          "' object is unsafe.");
}

int64_t normalize_index(int64_t index, int64_t size) { return index < 0 ? index + size : index; }

std::optional<std::string> opt_string(const std::optional<Value>& v, const char* what) {
  if (!v || v->is_none()) return std::nullopt;
  if (!v->is_string()) throw TemplateError(std::string(what) + " arg must be None or str");
  return v->as_string();
}

int64_t opt_int(const std::optional<Value>& v, int64_t fallback) {
  if (!v || v->is_none()) return fallback;
  if (!v->is_int() && !v->is_bool()) {
    throw TemplateError("'" + type_name(*v) + "' object cannot be interpreted as an integer");
  }
  return v->as_int();
}

const std::string& require_string(const Value& v, const char* method) {
  if (!v.is_string()) {
    throw TemplateError(std::string(method) + "() argument must be str, not " + type_name(v));
  }
  return v.as_string();
}

bool affix_match_one(const std::string& s, const std::string& a, bool prefix) {
  if (a.size() > s.size()) return false;
  charge_render_bytes(a.size());
  return prefix ? s.compare(0, a.size(), a) == 0 : s.compare(s.size() - a.size(), a.size(), a) == 0;
}

// Python's str.startswith/endswith with a str or a tuple of str (one level, as Python has it).
bool affix_match(const std::string& s, const Value& affix, bool prefix, const char* method) {
  if (!affix.is_list()) return affix_match_one(s, require_string(affix, method), prefix);
  for (const Value& v : affix.items()) {
    if (!v.is_string()) {
      throw TemplateError(std::string("tuple for ") + method + " must only contain str, not " +
                          type_name(v));
    }
    if (affix_match_one(s, v.as_string(), prefix)) return true;
  }
  return false;
}

Value string_list(const std::vector<std::string>& parts) {
  std::vector<Value> out;
  out.reserve(parts.size());
  for (const auto& p : parts) out.push_back(Value::string(p));
  return Value::list(std::move(out));
}

// Code-point index of a byte offset.
int64_t char_index(const std::string& s, size_t byte_offset) {
  return static_cast<int64_t>(code_point_count(std::string_view(s).substr(0, byte_offset)));
}

std::optional<Value> string_method(const Value& obj, const std::string& name) {
  // The method holds the shared string (a copy of a 60 MB string per `s.strip` would be free work).
  auto bind = [&](auto fn) {
    return Value::callable(
        name, [obj, name, fn](CallArgs& args) { return fn(obj.as_string(), args, name); });
  };
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    return bind([](const std::string& s, CallArgs& args, const std::string& n) {
      auto a = bind_args(args, {"chars"}, n);
      return Value::string(py_strip(s, opt_string(a[0], n.c_str()), n != "rstrip", n != "lstrip"));
    });
  }
  if (name == "split" || name == "rsplit") {
    return bind([](const std::string& s, CallArgs& args, const std::string& n) {
      auto a = bind_args(args, {"sep", "maxsplit"}, n);
      auto sep = opt_string(a[0], n.c_str());
      if (sep && sep->empty()) throw TemplateError("empty separator");
      return string_list(py_split(s, sep, opt_int(a[1], -1), n == "rsplit"));
    });
  }
  if (name == "splitlines") {
    return bind([](const std::string& s, CallArgs& args, const std::string& n) {
      auto a = bind_args(args, {"keepends"}, n);
      return string_list(py_splitlines(s, a[0] && truthy(*a[0])));
    });
  }
  if (name == "startswith" || name == "endswith") {
    return bind([](const std::string& s, CallArgs& args, const std::string& n) {
      auto a = bind_args(args, {"prefix"}, n);
      if (!a[0]) throw TemplateError(n + "() takes at least 1 argument (0 given)");
      return Value::boolean(affix_match(s, *a[0], n == "startswith", n.c_str()));
    });
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize" ||
      name == "casefold" || name == "swapcase") {
    return bind([](const std::string& s, CallArgs& args, const std::string& n) {
      bind_args(args, {}, n);
      if (n == "upper") return Value::string(py_upper(s));
      if (n == "lower" || n == "casefold") return Value::string(py_lower(s));
      if (n == "title") return Value::string(py_title(s));
      if (n == "capitalize") return Value::string(py_capitalize(s));
      std::u32string t = decode_utf8(s);
      for (char32_t& c : t) c = is_cased_upper(c) ? to_lower(c) : to_upper(c);
      return Value::string(encode_utf8(t));
    });
  }
  if (name == "replace") {
    return bind([](const std::string& s, CallArgs& args, const std::string& n) {
      auto a = bind_args(args, {"old", "new", "count"}, n);
      if (!a[0] || !a[1]) throw TemplateError("replace expected at least 2 arguments");
      return Value::string(py_replace(s, require_string(*a[0], "replace"),
                                      require_string(*a[1], "replace"), opt_int(a[2], -1)));
    });
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    return bind([](const std::string& s, CallArgs& args, const std::string& n) {
      auto a = bind_args(args, {"sub"}, n);
      if (!a[0]) throw TemplateError(n + "() takes at least 1 argument (0 given)");
      const std::string& sub = require_string(*a[0], n.c_str());
      if (n == "count") return Value::integer(py_count(s, sub));
      charge_render_bytes(s.size());
      size_t pos = (n == "find" || n == "index") ? s.find(sub) : s.rfind(sub);
      if (pos == std::string::npos) {
        if (n == "index" || n == "rindex") throw TemplateError("substring not found");
        return Value::integer(-1);
      }
      return Value::integer(char_index(s, pos));
    });
  }
  if (name == "join") {
    return bind([](const std::string& s, CallArgs& args, const std::string& n) {
      auto a = bind_args(args, {"iterable"}, n);
      if (!a[0]) throw TemplateError("join() takes exactly one argument (0 given)");
      std::string out;
      bool first = true;
      for (const Value& v : iterate(*a[0])) {
        if (!v.is_string()) {
          throw TemplateError("sequence item: expected str instance, " + type_name(v) + " found");
        }
        if (!first) out += s;
        first = false;
        out += v.as_string();
        check_text_size(out.size());
      }
      return Value::string(std::move(out));
    });
  }
  if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" ||
      name == "islower" || name == "isupper" || name == "isnumeric" || name == "isdecimal") {
    return bind([](const std::string& s, CallArgs& args, const std::string& n) {
      bind_args(args, {}, n);
      std::u32string t = decode_utf8(s);
      if (t.empty()) return Value::boolean(false);
      bool any_cased = false;
      for (char32_t c : t) {
        bool digit = c >= '0' && c <= '9';
        bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_cased_upper(c) ||
                     is_cased_lower(c) || (c >= 0x80 && !is_py_space(c) && c > 0x2FF);
        if (n == "isdigit" || n == "isnumeric" || n == "isdecimal") {
          if (!digit) return Value::boolean(false);
        } else if (n == "isalpha") {
          if (!alpha) return Value::boolean(false);
        } else if (n == "isalnum") {
          if (!alpha && !digit) return Value::boolean(false);
        } else if (n == "isspace") {
          if (!is_py_space(c)) return Value::boolean(false);
        } else if (n == "islower") {
          if (is_cased_upper(c)) return Value::boolean(false);
          any_cased = any_cased || is_cased_lower(c);
        } else if (n == "isupper") {
          if (is_cased_lower(c)) return Value::boolean(false);
          any_cased = any_cased || is_cased_upper(c);
        }
      }
      if (n == "islower" || n == "isupper") return Value::boolean(any_cased);
      return Value::boolean(true);
    });
  }
  if (name == "zfill" || name == "ljust" || name == "rjust" || name == "center") {
    return bind([](const std::string& s, CallArgs& args, const std::string& n) {
      auto a = bind_args(args, {"width", "fillchar"}, n);
      int64_t width = opt_int(a[0], 0);
      std::string fill = a[1] && a[1]->is_string() ? a[1]->as_string() : " ";
      int64_t len = static_cast<int64_t>(code_point_count(s));
      if (width <= len) return Value::string(s);
      int64_t pad = width - len;
      check_text_size(static_cast<size_t>(std::min<int64_t>(pad, kMaxTextBytes + 1)) *
                      std::max<size_t>(fill.size(), 1));
      auto fills = [&](int64_t k) {
        std::string out;
        for (int64_t i = 0; i < k; ++i) out += fill;
        return out;
      };
      if (n == "zfill") {
        std::string zeros(static_cast<size_t>(pad), '0');
        if (!s.empty() && (s[0] == '-' || s[0] == '+'))
          return Value::string(s.substr(0, 1) + zeros + s.substr(1));
        return Value::string(zeros + s);
      }
      if (n == "ljust") return Value::string(s + fills(pad));
      if (n == "rjust") return Value::string(fills(pad) + s);
      int64_t left = pad / 2 + (pad & width & 1);
      return Value::string(fills(left) + s + fills(pad - left));
    });
  }
  if (name == "format") {
    return Value::undefined("str.format is not supported in chat templates");
  }
  return std::nullopt;
}

std::optional<Value> dict_method(const Value& obj, const std::string& name) {
  if (name == "items" || name == "keys" || name == "values") {
    return Value::callable(name, [obj, name](CallArgs& args) {
      bind_args(args, {}, name);
      std::vector<Value> out;
      for (const auto& [key, value] : obj.dict_object().items()) {
        if (name == "items")
          out.push_back(Value::tuple({Value::string(key), value}));
        else if (name == "keys")
          out.push_back(Value::string(key));
        else
          out.push_back(value);
      }
      return Value::list(std::move(out));
    });
  }
  if (name == "get") {
    return Value::callable(name, [obj](CallArgs& args) {
      auto a = bind_args(args, {"key", "default"}, "get");
      if (!a[0]) throw TemplateError("get expected at least 1 argument, got 0");
      if (a[0]->is_string()) {
        if (const Value* v = obj.dict_object().find(a[0]->as_string())) return *v;
      }
      return a[1] ? *a[1] : Value::none();
    });
  }
  if (name == "copy") {
    return Value::callable(name, [obj](CallArgs& args) {
      bind_args(args, {}, "copy");
      charge_render_bytes(obj.dict_object().size() * sizeof(Value));
      return Value::dict(std::make_shared<DictObject>(obj.dict_object()));
    });
  }
  if (name == "pop" || name == "popitem" || name == "setdefault" || name == "update" ||
      name == "clear") {
    return unsafe(obj, name);
  }
  return std::nullopt;
}

std::optional<Value> list_method(const Value& obj, const std::string& name) {
  if (name == "count" || name == "index") {
    return Value::callable(name, [obj, name](CallArgs& args) {
      auto a = bind_args(args, {"value"}, name);
      if (!a[0]) throw TemplateError(name + "() takes exactly one argument (0 given)");
      int64_t count = 0;
      const auto& items = obj.items();
      for (size_t i = 0; i < items.size(); ++i) {
        if (equals(items[i], *a[0])) {
          if (name == "index") return Value::integer(static_cast<int64_t>(i));
          ++count;
        }
      }
      if (name == "index") throw TemplateError(repr(*a[0]) + " is not in list");
      return Value::integer(count);
    });
  }
  if (name == "copy" && !obj.is_tuple()) {
    return Value::callable(name, [obj](CallArgs& args) {
      bind_args(args, {}, "copy");
      return Value::list(obj.items());
    });
  }
  if (!obj.is_tuple() &&
      (name == "append" || name == "extend" || name == "insert" || name == "pop" ||
       name == "remove" || name == "reverse" || name == "sort" || name == "clear")) {
    return unsafe(obj, name);
  }
  return std::nullopt;
}

std::optional<Value> method(const Value& obj, const std::string& name) {
  if (!name.empty() && name[0] == '_') return unsafe(obj, name);
  if (obj.is_string()) return string_method(obj, name);
  if (obj.is_dict()) return dict_method(obj, name);
  if (obj.is_list()) return list_method(obj, name);
  return std::nullopt;
}

}  // namespace

std::vector<std::optional<Value>> bind_args(const CallArgs& args,
                                            std::initializer_list<const char*> names,
                                            const std::string& function_name) {
  std::vector<std::optional<Value>> out(names.size());
  if (args.positional.size() > names.size()) {
    throw TemplateError(function_name + "() takes at most " + std::to_string(names.size()) +
                        " argument(s) (" + std::to_string(args.positional.size()) + " given)");
  }
  for (size_t i = 0; i < args.positional.size(); ++i) out[i] = args.positional[i];
  for (const auto& [key, value] : args.keyword) {
    size_t index = 0;
    for (const char* n : names) {
      if (key == n) break;
      ++index;
    }
    if (index == names.size()) {
      throw TemplateError(function_name + "() got an unexpected keyword argument '" + key + "'");
    }
    if (out[index]) {
      throw TemplateError(function_name + "() got multiple values for argument '" + key + "'");
    }
    out[index] = value;
  }
  return out;
}

Value binary_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") {
    if (a.is_string() && b.is_string()) {  // sized before anything is copied
      check_text_size(a.as_string().size() + b.as_string().size());
      return Value::string(a.as_string() + b.as_string());
    }
    std::string text = to_str(a);
    const std::string right = to_str(b);
    check_text_size(text.size() + right.size());
    return Value::string(text + right);
  }
  if (a.is_undefined()) a.fail_undefined();
  if (b.is_undefined()) b.fail_undefined();
  bool numbers = a.is_number() && b.is_number();
  bool any_float = a.is_float() || b.is_float();
  if (op == "+") {
    if (numbers) {
      if (any_float) return Value::number(a.as_double() + b.as_double());
      return Value::integer(checked_add(a.as_int(), b.as_int()));
    }
    if (a.is_string() && b.is_string()) {
      check_text_size(a.as_string().size() + b.as_string().size());
      return Value::string(a.as_string() + b.as_string());
    }
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
      check_list_size(a.items().size() + b.items().size());
      std::vector<Value> out = a.items();
      out.insert(out.end(), b.items().begin(), b.items().end());
      return a.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
    }
    if (a.is_string()) {
      throw TemplateError("can only concatenate str (not \"" + type_name(b) + "\") to str");
    }
    if (a.is_list()) {
      throw TemplateError("can only concatenate " + type_name(a) + " (not \"" + type_name(b) +
                          "\") to " + type_name(a));
    }
    unsupported(op, a, b);
  }
  if (op == "-") {
    if (!numbers) unsupported(op, a, b);
    if (any_float) return Value::number(a.as_double() - b.as_double());
    return Value::integer(checked_sub(a.as_int(), b.as_int()));
  }
  if (op == "*") {
    if (numbers) {
      if (any_float) return Value::number(a.as_double() * b.as_double());
      return Value::integer(checked_mul(a.as_int(), b.as_int()));
    }
    if ((a.is_string() || a.is_list()) && (b.is_int() || b.is_bool())) return repeat(a, b.as_int());
    if ((b.is_string() || b.is_list()) && (a.is_int() || a.is_bool())) return repeat(b, a.as_int());
    if (a.is_string() || b.is_string() || a.is_list() || b.is_list()) {
      const Value& other = (a.is_string() || a.is_list()) ? b : a;
      throw TemplateError("can't multiply sequence by non-int of type '" + type_name(other) + "'");
    }
    unsupported(op, a, b);
  }
  if (op == "/") {
    if (!numbers) unsupported(op, a, b);
    if (b.as_double() == 0) throw TemplateError("division by zero");
    return Value::number(a.as_double() / b.as_double());
  }
  if (op == "//") {
    if (!numbers) unsupported(op, a, b);
    if (any_float) return Value::number(float_floor_div(a.as_double(), b.as_double()));
    return Value::integer(floor_div(a.as_int(), b.as_int()));
  }
  if (op == "%") {
    if (a.is_string()) throw TemplateError("printf-style string formatting is not supported");
    if (!numbers) unsupported(op, a, b);
    if (any_float) return Value::number(float_mod(a.as_double(), b.as_double()));
    return Value::integer(floor_mod(a.as_int(), b.as_int()));
  }
  if (op == "**") {
    if (!numbers) unsupported("** or pow()", a, b);
    if (!any_float && b.as_int() >= 0) {
      // By squaring: `1 ** 10**18` takes 60 rounds, not 10**18. A square that overflows while
      // bits remain means the result would overflow too (|base| >= 2 only grows).
      int64_t result = 1;
      int64_t base = a.as_int();
      for (int64_t e = b.as_int(); e > 0; e >>= 1) {
        if (e & 1) result = checked_mul(result, base);
        if (e > 1) base = checked_mul(base, base);
      }
      return Value::integer(result);
    }
    if (a.as_double() == 0 && b.as_double() < 0) {
      throw TemplateError("0.0 cannot be raised to a negative power");
    }
    return Value::number(std::pow(a.as_double(), b.as_double()));
  }
  throw TemplateError("unknown operator " + op);
}

Value unary_op(const std::string& op, const Value& a) {
  if (op == "not") return Value::boolean(!truthy(a));
  if (a.is_undefined()) a.fail_undefined();
  if (!a.is_number()) {
    throw TemplateError("bad operand type for unary " + op + ": '" + type_name(a) + "'");
  }
  if (op == "+") return a.is_float() ? a : Value::integer(a.as_int());
  if (a.is_float()) return Value::number(-a.as_double());
  if (a.as_int() == std::numeric_limits<int64_t>::min()) throw TemplateError("integer overflow");
  return Value::integer(-a.as_int());
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kString:
      if (!item.is_string()) {
        throw TemplateError("'in <string>' requires string as left operand, not " +
                            type_name(item));
      }
      charge_render_bytes(container.as_string().size());
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::kList:
      for (const Value& v : container.items()) {
        if (equals(v, item)) return true;
      }
      return false;
    case Value::Kind::kDict:
      return item.is_string() && container.dict_object().find(item.as_string()) != nullptr;
    default:
      throw TemplateError("argument of type '" + type_name(container) + "' is not iterable");
  }
}

Value get_attr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) obj.fail_undefined();
  if (auto m = method(obj, name)) return *m;
  if (obj.is_dict() || obj.is_namespace()) {
    if (const Value* v = obj.dict_object().find(name)) return *v;
  }
  return no_attribute(obj, name);
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) obj.fail_undefined();
  if (obj.is_dict() && key.is_string()) {
    if (const Value* v = obj.dict_object().find(key.as_string())) return *v;
  }
  if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t size = length(obj);
    int64_t index = normalize_index(key.as_int(), size);
    if (index < 0 || index >= size) return no_element(obj, key);
    if (obj.is_list()) return obj.items()[static_cast<size_t>(index)];
    std::u32string t = decode_utf8(obj.as_string());
    return Value::string(encode_utf8(t.substr(static_cast<size_t>(index), 1)));
  }
  if (key.is_string()) {
    if (auto m = method(obj, key.as_string())) return *m;
    return no_attribute(obj, key.as_string());
  }
  return no_element(obj, key);
}

Value slice_value(const Value& obj, const Value& start_v, const Value& stop_v,
                  const Value& step_v) {
  if (obj.is_undefined()) obj.fail_undefined();
  if (!obj.is_list() && !obj.is_string()) {
    return Value::undefined("'" + type_name(obj) + "' object is not subscriptable");
  }
  auto as_index = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.is_none() || v.is_undefined()) return std::nullopt;
    if (!v.is_int() && !v.is_bool()) {
      throw TemplateError(std::string("slice ") + what +
                          " indices must be integers or None or have an __index__ method");
    }
    return v.as_int();
  };
  int64_t size = length(obj);
  int64_t step = as_index(step_v, "step").value_or(1);
  if (step == 0) throw TemplateError("slice step cannot be zero");
  auto clamp = [&](std::optional<int64_t> v, int64_t fallback) {
    if (!v) return fallback;
    int64_t i = *v < 0 ? *v + size : *v;
    if (step > 0) return std::clamp<int64_t>(i, 0, size);
    return std::clamp<int64_t>(i, -1, size - 1);
  };
  int64_t start = clamp(as_index(start_v, "start"), step > 0 ? 0 : size - 1);
  int64_t stop = clamp(as_index(stop_v, "stop"), step > 0 ? size : -1);
  std::vector<size_t> picks;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    picks.push_back(static_cast<size_t>(i));
  }
  if (obj.is_string()) {
    std::u32string t = decode_utf8(obj.as_string());
    std::u32string out;
    for (size_t i : picks) out.push_back(t[i]);
    return Value::string(encode_utf8(out));
  }
  std::vector<Value> out;
  for (size_t i : picks) out.push_back(obj.items()[i]);
  return obj.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

Value call_value(const Value& callee, CallArgs& args) {
  if (callee.is_undefined()) callee.fail_undefined();
  if (!callee.is_callable()) {
    throw TemplateError("'" + type_name(callee) + "' object is not callable");
  }
  return callee.callable_object().function(args);
}

}  // namespace gemmaserve::jinja
