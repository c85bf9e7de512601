// Values of the Jinja2 interpreter with Python's semantics: undefined, none, bool, int, float,
// str, list/tuple, insertion-ordered dict, namespace and callables.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace gemmaserve::jinja {

// A template error raised while lexing, parsing or rendering; line 0 means "not yet known" and is
// filled in by the statement that was running.
class TemplateError : public std::runtime_error {
 public:
  explicit TemplateError(const std::string& message, int line = 0)
      : std::runtime_error(message), line_(line) {}
  int line() const { return line_; }

 private:
  int line_;
};

// Bounds on one rendering: templates are request input (the chat_template field), so a loop
// without end or a string that doubles forever ends in an error, not a hang or an exhausted memory.
inline constexpr int64_t kMaxRenderSteps = 2'000'000;
inline constexpr size_t kMaxTextBytes = size_t{64} << 20;
// Bytes of strings and lists one rendering may build, copy or scan: a step that copies a 60 MB
// string costs its bytes, so a loop of such steps ends long before the step budget.
inline constexpr size_t kMaxRenderBytes = size_t{1} << 30;
// Values nested deeper than this are refused by every walk (print, compare, tojson).
inline constexpr int kMaxValueDepth = 512;

// Throws TemplateError when a string of `bytes` is over kMaxTextBytes; call it before building
// the value where the size is known in advance.
void check_text_size(size_t bytes);
// The same for a list of `items` values (each counted at its size in memory).
void check_list_size(size_t items);
// Throws TemplateError past kMaxValueDepth.
void check_value_depth(int depth);

// Charges `bytes` of work on strings and lists to the rendering running on this thread; throws
// TemplateError once the rendering is past kMaxRenderBytes. Free outside a rendering.
void charge_render_bytes(size_t bytes);

// The byte budget of one rendering, open on this thread for the object's lifetime.
class RenderBytesBudget {
 public:
  RenderBytesBudget();
  ~RenderBytesBudget();
  RenderBytesBudget(const RenderBytesBudget&) = delete;
  RenderBytesBudget& operator=(const RenderBytesBudget&) = delete;
  void charge(size_t bytes);

 private:
  size_t used_ = 0;
  RenderBytesBudget* previous_;
};

class Value;

// Containers free their items without recursion (see release_items in value.cpp): a list nested
// 100,000 levels deep would otherwise take 100,000 stack frames to destroy.
struct ListObject {
  ListObject() = default;
  ListObject(const ListObject&) = default;
  ListObject& operator=(const ListObject&) = default;
  ~ListObject();
  std::vector<Value> items;
  bool is_tuple = false;
};

// Python dict with string keys, iterating in insertion order.
class DictObject {
 public:
  DictObject() = default;
  DictObject(const DictObject&) = default;
  DictObject& operator=(const DictObject&) = default;
  ~DictObject();
  const Value* find(const std::string& key) const;
  void set(const std::string& key, Value value);
  // Drops every item (how a rendering breaks the cycles its namespaces may form).
  void clear();
  const std::vector<std::pair<std::string, Value>>& items() const { return items_; }
  size_t size() const;  // defined where Value is complete (clang instantiates eagerly)

 private:
  std::vector<std::pair<std::string, Value>> items_;
  std::unordered_map<std::string, size_t> index_;
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

using NativeFunction = std::function<Value(CallArgs&)>;

struct CallableObject {
  std::string name;
  NativeFunction function;
};

class Value {
 public:
  enum class Kind {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kNamespace,
    kCallable
  };

  // Undefined; `hint` is the message raised when the value is used in a way Jinja forbids.
  Value() = default;
  static Value undefined(std::string hint);
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value number(double d);
  static Value string(std::string s);
  static Value list(std::vector<Value> items = {});
  static Value tuple(std::vector<Value> items);
  static Value dict();
  static Value dict(std::shared_ptr<DictObject> d);
  static Value make_namespace();
  static Value callable(std::string name, NativeFunction fn);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  // int, float or bool (Python's numbers.Number includes bool).
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_tuple() const { return kind_ == Kind::kList && list_->is_tuple; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_callable() const { return kind_ == Kind::kCallable; }

  bool as_bool() const { return bool_; }
  int64_t as_int() const { return int_; }  // also valid for bool
  double as_double() const;                // int, bool or float
  const std::string& as_string() const { return str_ ? *str_ : no_text(); }
  const std::string& undefined_hint() const { return as_string(); }
  std::vector<Value>& items() const { return list_->items; }
  DictObject& dict_object() const { return *dict_; }
  const std::shared_ptr<DictObject>& dict_ptr() const { return dict_; }
  CallableObject& callable_object() const { return *callable_; }

  // Raises the undefined value's error (Jinja's UndefinedError / SecurityError).
  [[noreturn]] void fail_undefined() const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool bool_ = false;
  int64_t int_ = 0;
  double float_ = 0;
  static const std::string& no_text();

  // Shared, so that copying a value (a variable lookup, an argument) never copies its text.
  std::shared_ptr<const std::string> str_;
  std::shared_ptr<ListObject> list_;
  std::shared_ptr<DictObject> dict_;
  std::shared_ptr<CallableObject> callable_;
};

// Python's bool(x); undefined is false.
bool truthy(const Value& v);
// Python's str(x); undefined prints as "".
std::string to_str(const Value& v);
// Python's repr(x).
std::string repr(const Value& v);
// Python's type name ("int", "str", "dict", "NoneType", ...).
std::string type_name(const Value& v);
// Python ==.
bool equals(const Value& a, const Value& b);
// Python ordering (<0, 0, >0); TypeError for unorderable types.
int compare(const Value& a, const Value& b);
// len(x); TypeError for values without a length.
int64_t length(const Value& v);
// The items Python's iter(x) yields: list items, dict keys, string characters; undefined is empty.
std::vector<Value> iterate(const Value& v);

Value from_json(const nlohmann::json& j);
Value from_json(const nlohmann::ordered_json& j);

struct JsonOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // None: single line
  std::optional<std::pair<std::string, std::string>> separators;
  bool sort_keys = false;
};
// Python's json.dumps(x, ...) byte for byte.
std::string to_json(const Value& v, const JsonOptions& options);

}  // namespace gemmaserve::jinja
