#include <chrono>
#include <ctime>
#include <functional>
#include <map>

#include "tokenizer/chat_template/builtins.h"
#include "tokenizer/chat_template/py_string.h"

namespace gemmaserve::jinja {
namespace {

using TestFn = std::function<bool(const Value&, const CallArgs&)>;

const Value& need_arg(const CallArgs& args, const char* test) {
  if (args.positional.empty()) {
    throw TemplateError(std::string(test) + "() missing 1 required positional argument");
  }
  return args.positional[0];
}

bool all_cased(const std::string& s, bool upper) {
  bool any = false;
  for (char32_t c : decode_utf8(s)) {
    if (upper ? is_cased_lower(c) : is_cased_upper(c)) return false;
    any = any || (upper ? is_cased_upper(c) : is_cased_lower(c));
  }
  return any;
}

// Python's `is`: singletons and shared containers compare by identity, small values by value.
bool same_as(const Value& a, const Value& b) {
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kList:
      return &a.items() == &b.items();
    case Value::Kind::kDict:
    case Value::Kind::kNamespace:
      return a.dict_ptr() == b.dict_ptr();
    case Value::Kind::kCallable:
      return &a.callable_object() == &b.callable_object();
    case Value::Kind::kUndefined:
      return false;
    default:
      return equals(a, b);
  }
}

const std::map<std::string, TestFn, std::less<>>& tests() {
  static const std::map<std::string, TestFn, std::less<>> table = [] {
    std::map<std::string, TestFn, std::less<>> t;
    t["defined"] = [](const Value& v, const CallArgs&) { return !v.is_undefined(); };
    t["undefined"] = [](const Value& v, const CallArgs&) { return v.is_undefined(); };
    t["none"] = [](const Value& v, const CallArgs&) { return v.is_none(); };
    t["boolean"] = [](const Value& v, const CallArgs&) { return v.is_bool(); };
    t["true"] = [](const Value& v, const CallArgs&) { return v.is_bool() && v.as_bool(); };
    t["false"] = [](const Value& v, const CallArgs&) { return v.is_bool() && !v.as_bool(); };
    t["integer"] = [](const Value& v, const CallArgs&) { return v.is_int(); };
    t["float"] = [](const Value& v, const CallArgs&) { return v.is_float(); };
    t["number"] = [](const Value& v, const CallArgs&) { return v.is_number(); };
    t["string"] = [](const Value& v, const CallArgs&) { return v.is_string(); };
    t["mapping"] = [](const Value& v, const CallArgs&) { return v.is_dict(); };
    t["iterable"] = [](const Value& v, const CallArgs&) {
      return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
    };
    t["sequence"] = [](const Value& v, const CallArgs&) {
      return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
    };
    t["callable"] = [](const Value& v, const CallArgs&) {
      return v.is_callable() || v.is_undefined();
    };
    t["escaped"] = [](const Value&, const CallArgs&) { return false; };
    t["lower"] = [](const Value& v, const CallArgs&) { return all_cased(to_str(v), false); };
    t["upper"] = [](const Value& v, const CallArgs&) { return all_cased(to_str(v), true); };
    t["odd"] = [](const Value& v, const CallArgs&) {
      return binary_op("%", v, Value::integer(2)).as_double() == 1;
    };
    t["even"] = [](const Value& v, const CallArgs&) {
      return binary_op("%", v, Value::integer(2)).as_double() == 0;
    };
    t["divisibleby"] = [](const Value& v, const CallArgs& a) {
      return binary_op("%", v, need_arg(a, "divisibleby")).as_double() == 0;
    };
    t["sameas"] = [](const Value& v, const CallArgs& a) {
      return same_as(v, need_arg(a, "sameas"));
    };
    t["in"] = [](const Value& v, const CallArgs& a) { return contains(need_arg(a, "in"), v); };
    t["filter"] = [](const Value& v, const CallArgs&) {
      return v.is_string() && is_known_filter(v.as_string());
    };
    t["test"] = [](const Value& v, const CallArgs&) {
      return v.is_string() && is_known_test(v.as_string());
    };
    TestFn eq = [](const Value& v, const CallArgs& a) { return equals(v, need_arg(a, "eq")); };
    TestFn ne = [](const Value& v, const CallArgs& a) { return !equals(v, need_arg(a, "ne")); };
    TestFn lt = [](const Value& v, const CallArgs& a) { return compare(v, need_arg(a, "lt")) < 0; };
    TestFn le = [](const Value& v, const CallArgs& a) {
      return compare(v, need_arg(a, "le")) <= 0;
    };
    TestFn gt = [](const Value& v, const CallArgs& a) { return compare(v, need_arg(a, "gt")) > 0; };
    TestFn ge = [](const Value& v, const CallArgs& a) {
      return compare(v, need_arg(a, "ge")) >= 0;
    };
    for (const char* n : {"eq", "equalto", "=="}) t[n] = eq;
    for (const char* n : {"ne", "!="}) t[n] = ne;
    for (const char* n : {"lt", "lessthan", "<"}) t[n] = lt;
    for (const char* n : {"le", "<="}) t[n] = le;
    for (const char* n : {"gt", "greaterthan", ">"}) t[n] = gt;
    for (const char* n : {"ge", ">="}) t[n] = ge;
    return t;
  }();
  return table;
}

Value make_range(CallArgs& args) {
  if (!args.keyword.empty()) throw TemplateError("range() takes no keyword arguments");
  std::vector<int64_t> n;
  for (const Value& v : args.positional) {
    if (!v.is_int() && !v.is_bool()) {
      throw TemplateError("'" + type_name(v) + "' object cannot be interpreted as an integer");
    }
    n.push_back(v.as_int());
  }
  int64_t start = 0, stop = 0, step = 1;
  if (n.size() == 1) {
    stop = n[0];
  } else if (n.size() == 2 || n.size() == 3) {
    start = n[0];
    stop = n[1];
    if (n.size() == 3) step = n[2];
  } else {
    throw TemplateError("range expected at most 3 arguments, got " + std::to_string(n.size()));
  }
  if (step == 0) throw TemplateError("range() arg 3 must not be zero");
  int64_t count = step > 0 ? (stop > start ? (stop - start + step - 1) / step : 0)
                           : (start > stop ? (start - stop - step - 1) / -step : 0);
  constexpr int64_t kMaxRange = 100000;  // ImmutableSandboxedEnvironment's MAX_RANGE
  if (count > kMaxRange) {
    throw TemplateError("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  }
  std::vector<Value> out;
  out.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) out.push_back(Value::integer(start + i * step));
  return Value::list(std::move(out));
}

void fill_dict(DictObject& d, CallArgs& args, const char* what) {
  if (args.positional.size() > 1) {
    throw TemplateError(std::string(what) + " expected at most 1 argument");
  }
  if (!args.positional.empty()) {
    const Value& init = args.positional[0];
    if (init.is_dict()) {
      charge_render_bytes(init.dict_object().size() * sizeof(Value));  // `dict(d)` copies d
      for (const auto& [key, value] : init.dict_object().items()) d.set(key, value);
    } else {
      for (const Value& pair : iterate(init)) {
        if (!pair.is_list() || pair.items().size() != 2 || !pair.items()[0].is_string()) {
          throw TemplateError(std::string(what) + ": expected (str, value) pairs");
        }
        d.set(pair.items()[0].as_string(), pair.items()[1]);
      }
    }
  }
  for (auto& [key, value] : args.keyword) d.set(key, value);
}

}  // namespace

bool is_known_test(std::string_view name) { return tests().find(name) != tests().end(); }

bool apply_test(const std::string& name, const Value& input, const CallArgs& args) {
  auto it = tests().find(name);
  if (it == tests().end()) throw TemplateError("No test named '" + name + "'.");
  return it->second(input, args);
}

void add_globals(DictObject& globals) {
  globals.set("range", Value::callable("range", make_range));
  globals.set("dict", Value::callable("dict", [](CallArgs& args) {
                Value d = Value::dict();
                fill_dict(d.dict_object(), args, "dict");
                return d;
              }));
  globals.set("namespace", Value::callable("namespace", [](CallArgs& args) {
                Value ns = Value::make_namespace();
                fill_dict(ns.dict_object(), args, "namespace");
                return ns;
              }));
  globals.set("joiner", Value::callable("joiner", [](CallArgs& args) {
                auto a = bind_args(args, {"sep"}, "joiner");
                std::string sep = a[0] ? to_str(*a[0]) : ", ";
                auto used = std::make_shared<bool>(false);
                return Value::callable("joiner", [sep, used](CallArgs&) {
                  if (!*used) {
                    *used = true;
                    return Value::string("");
                  }
                  return Value::string(sep);
                });
              }));
  globals.set("raise_exception", Value::callable("raise_exception", [](CallArgs& args) -> Value {
                auto a = bind_args(args, {"message"}, "raise_exception");
                throw TemplateError(a[0] ? to_str(*a[0]) : std::string());
              }));
  globals.set("strftime_now", Value::callable("strftime_now", [](CallArgs& args) {
                auto a = bind_args(args, {"format"}, "strftime_now");
                std::string format = a[0] ? to_str(*a[0]) : "";
                std::time_t now =
                    std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
                std::tm local{};
                localtime_r(&now, &local);
                char buf[512];
                size_t n = std::strftime(buf, sizeof(buf), format.c_str(), &local);
                return Value::string(std::string(buf, n));
              }));
}

}  // namespace gemmaserve::jinja
