#include "tokenizer/chat_template/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "core/python_text.h"
#include "core/utf8.h"
#include "tokenizer/chat_template/py_string.h"

namespace gemmaserve::jinja {

size_t DictObject::size() const { return items_.size(); }

void check_text_size(size_t bytes) {
  if (bytes > kMaxTextBytes) {
    throw TemplateError("a string or list in the template would exceed " +
                        std::to_string(kMaxTextBytes) + " bytes");
  }
}

void check_list_size(size_t items) {
  check_text_size(items > kMaxTextBytes / sizeof(Value) ? kMaxTextBytes + 1
                                                        : items * sizeof(Value));
}

void check_value_depth(int depth) {
  if (depth > kMaxValueDepth) {
    throw TemplateError("a value nests deeper than " + std::to_string(kMaxValueDepth) + " levels");
  }
}

namespace {

thread_local RenderBytesBudget* current_budget = nullptr;

// Values whose last owner went away while a release was already running on this thread: that
// release's loop frees them, so freeing a deep value takes a loop, not one frame per level.
thread_local std::vector<Value>* pending_release = nullptr;

bool holds_objects(const Value& v) {
  return v.is_list() || v.is_dict() || v.is_namespace() || v.is_callable();
}

// Moves the values of `items` (got from each element by `value_of`) to the release loop.
template <typename Items, typename ValueOf>
void release_items(Items& items, ValueOf value_of) {
  if (pending_release) {
    for (auto& item : items) {
      if (holds_objects(value_of(item))) pending_release->push_back(std::move(value_of(item)));
    }
    return;
  }
  std::vector<Value> pending;
  pending_release = &pending;
  for (auto& item : items) {
    if (holds_objects(value_of(item))) pending.push_back(std::move(value_of(item)));
  }
  while (!pending.empty()) {
    Value last = std::move(pending.back());
    pending.pop_back();
  }  // `last` dies here; if it was the last owner its items join `pending`
  pending_release = nullptr;
}

Value& list_item(Value& v) { return v; }
Value& dict_value(std::pair<std::string, Value>& item) { return item.second; }

}  // namespace

RenderBytesBudget::RenderBytesBudget() : previous_(current_budget) { current_budget = this; }
RenderBytesBudget::~RenderBytesBudget() { current_budget = previous_; }

void RenderBytesBudget::charge(size_t bytes) {
  if (bytes > kMaxRenderBytes - used_) {
    used_ = kMaxRenderBytes;
    throw TemplateError("rendering processed more than " + std::to_string(kMaxRenderBytes) +
                        " bytes of strings and lists (a string copied in a loop?)");
  }
  used_ += bytes;
}

void charge_render_bytes(size_t bytes) {
  if (current_budget) current_budget->charge(bytes);
}

ListObject::~ListObject() { release_items(items, list_item); }

DictObject::~DictObject() { release_items(items_, dict_value); }

void DictObject::clear() {
  std::vector<std::pair<std::string, Value>> dropped;
  dropped.swap(items_);
  index_.clear();
  release_items(dropped, dict_value);
}

const std::string& Value::no_text() {
  static const std::string empty;
  return empty;
}

const Value* DictObject::find(const std::string& key) const {
  auto it = index_.find(key);
  return it == index_.end() ? nullptr : &items_[it->second].second;
}

void DictObject::set(const std::string& key, Value value) {
  auto it = index_.find(key);
  if (it != index_.end()) {
    items_[it->second].second = std::move(value);
    return;
  }
  index_.emplace(key, items_.size());
  items_.emplace_back(key, std::move(value));
}

Value Value::undefined(std::string hint) {
  charge_render_bytes(hint.size());
  Value v;
  if (!hint.empty()) v.str_ = std::make_shared<const std::string>(std::move(hint));
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.bool_ = b;
  v.int_ = b ? 1 : 0;
  return v;
}

Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.int_ = i;
  return v;
}

Value Value::number(double d) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.float_ = d;
  return v;
}

Value Value::string(std::string s) {
  Value v;
  charge_render_bytes(s.size());
  v.kind_ = Kind::kString;
  v.str_ = std::make_shared<const std::string>(std::move(s));
  return v;
}

Value Value::list(std::vector<Value> items) {
  charge_render_bytes((items.size() + 1) * sizeof(Value));
  Value v;
  v.kind_ = Kind::kList;
  v.list_ = std::make_shared<ListObject>();
  v.list_->items = std::move(items);
  return v;
}

Value Value::tuple(std::vector<Value> items) {
  Value v = list(std::move(items));
  v.list_->is_tuple = true;
  return v;
}

Value Value::dict() { return dict(std::make_shared<DictObject>()); }

Value Value::dict(std::shared_ptr<DictObject> d) {
  Value v;
  v.kind_ = Kind::kDict;
  v.dict_ = std::move(d);
  return v;
}

Value Value::make_namespace() {
  Value v;
  v.kind_ = Kind::kNamespace;
  v.dict_ = std::make_shared<DictObject>();
  return v;
}

Value Value::callable(std::string name, NativeFunction fn) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.callable_ = std::make_shared<CallableObject>(CallableObject{std::move(name), std::move(fn)});
  return v;
}

double Value::as_double() const {
  return kind_ == Kind::kFloat ? float_ : static_cast<double>(int_);
}

void Value::fail_undefined() const {
  const std::string& hint = undefined_hint();
  throw TemplateError(hint.empty() ? std::string("value is undefined") : hint);
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return false;
    case Value::Kind::kBool:
    case Value::Kind::kInt:
      return v.as_int() != 0;
    case Value::Kind::kFloat:
      return v.as_double() != 0.0;
    case Value::Kind::kString:
      return !v.as_string().empty();
    case Value::Kind::kList:
      return !v.items().empty();
    case Value::Kind::kDict:
      return v.dict_object().size() > 0;
    case Value::Kind::kNamespace:
    case Value::Kind::kCallable:
      return true;
  }
  return false;
}

namespace {

// str.isprintable() for the non-printable code points templates may meet (controls, separators,
// format characters); other planes count as printable.
bool is_printable(char32_t c) {
  if (c < 0x20 || (c >= 0x7F && c < 0xA0)) return false;
  if (c == 0xA0 || c == 0xAD || c == 0x1680 || (c >= 0x2000 && c <= 0x200F)) return false;
  if ((c >= 0x2028 && c <= 0x202F) || (c >= 0x205F && c <= 0x2064) || c == 0x3000) return false;
  if (c == 0xFEFF || (c >= 0xD800 && c <= 0xDFFF)) return false;
  return true;
}

std::string repr_string(const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos;
  bool has_double = s.find('"') != std::string::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : decode_utf8(s)) {
    char buf[16];
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (!is_printable(c)) {
      if (c < 0x100 || (c >= 0xDC80 && c <= 0xDCFF)) {
        std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(c & 0xFF));
      } else {
        std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
      }
      out += buf;
    } else {
      utf8::append(out, c);
    }
  }
  out += quote;
  return out;
}

// Python's repr into one growing string. `path` holds the containers being printed: one met again
// prints as Python's `[...]` / `{...}` (a namespace may hold itself), and its length is the depth.
class ReprWriter {
 public:
  std::string out;

  void write(const Value& v) {
    check_text_size(out.size());
    switch (v.kind()) {
      case Value::Kind::kUndefined:
        return;
      case Value::Kind::kNone:
        out += "None";
        return;
      case Value::Kind::kBool:
        out += v.as_bool() ? "True" : "False";
        return;
      case Value::Kind::kInt:
        out += std::to_string(v.as_int());
        return;
      case Value::Kind::kFloat:
        out += python_float_repr(v.as_double());
        return;
      case Value::Kind::kString:
        out += repr_string(v.as_string());
        return;
      case Value::Kind::kList:
        write_sequence(v);
        return;
      case Value::Kind::kDict:
        write_dict(v.dict_object());
        return;
      case Value::Kind::kNamespace:
        out += "<Namespace ";
        write_dict(v.dict_object());
        out += ">";
        return;
      case Value::Kind::kCallable:
        out += "<function " + v.callable_object().name + ">";
        return;
    }
  }

 private:
  // Enters `container`; false when it is already being printed.
  bool enter(const void* container) {
    if (std::find(path_.begin(), path_.end(), container) != path_.end()) return false;
    path_.push_back(container);
    check_value_depth(static_cast<int>(path_.size()));
    return true;
  }

  void write_sequence(const Value& v) {
    if (!enter(&v.items())) {
      out += v.is_tuple() ? "(...)" : "[...]";
      return;
    }
    const auto& items = v.items();
    out += v.is_tuple() ? "(" : "[";
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0) out += ", ";
      write(items[i]);
    }
    if (v.is_tuple() && items.size() == 1) out += ",";
    out += v.is_tuple() ? ")" : "]";
    path_.pop_back();
  }

  void write_dict(const DictObject& d) {
    if (!enter(&d)) {
      out += "{...}";
      return;
    }
    out += "{";
    bool first = true;
    for (const auto& [key, value] : d.items()) {
      if (!first) out += ", ";
      first = false;
      out += repr_string(key);
      out += ": ";
      write(value);
    }
    out += "}";
    path_.pop_back();
  }

  std::vector<const void*> path_;
};

// What one visit of a value costs in equals/compare (against the render's byte budget), so that
// comparing a shared sub-list 2^40 times or `unique` over many items stays bounded.
constexpr size_t kVisitBytes = 16;

bool equals_at(const Value& a, const Value& b, int depth) {
  check_value_depth(depth);
  charge_render_bytes(kVisitBytes);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      charge_render_bytes(std::min(a.as_string().size(), b.as_string().size()));
      return a.as_string() == b.as_string();
    case Value::Kind::kList: {
      if (a.is_tuple() != b.is_tuple()) return false;
      const auto& x = a.items();
      const auto& y = b.items();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!equals_at(x[i], y[i], depth + 1)) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      const auto& x = a.dict_object();
      const auto& y = b.dict_object();
      if (x.size() != y.size()) return false;
      for (const auto& [key, value] : x.items()) {
        const Value* other = y.find(key);
        if (!other || !equals_at(value, *other, depth + 1)) return false;
      }
      return true;
    }
    case Value::Kind::kNamespace:
      return a.dict_ptr() == b.dict_ptr();
    case Value::Kind::kCallable:
      return &a.callable_object() == &b.callable_object();
    default:
      return false;
  }
}

int compare_at(const Value& a, const Value& b, int depth) {
  check_value_depth(depth);
  charge_render_bytes(kVisitBytes);
  if (a.is_undefined()) a.fail_undefined();
  if (b.is_undefined()) b.fail_undefined();
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      double x = a.as_double();
      double y = b.as_double();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    return a.as_int() < b.as_int() ? -1 : (a.as_int() > b.as_int() ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    charge_render_bytes(std::min(a.as_string().size(), b.as_string().size()));
    // UTF-8 byte order is code point order.
    int c = a.as_string().compare(b.as_string());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const auto& x = a.items();
    const auto& y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!equals_at(x[i], y[i], depth + 1)) return compare_at(x[i], y[i], depth + 1);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  throw TemplateError("'<' not supported between instances of '" + type_name(a) + "' and '" +
                      type_name(b) + "'");
}

}  // namespace

std::string to_str(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "";
    case Value::Kind::kString:
      charge_render_bytes(v.as_string().size());
      return v.as_string();
    default:
      return repr(v);
  }
}

std::string repr(const Value& v) {
  ReprWriter writer;
  writer.write(v);
  check_text_size(writer.out.size());
  charge_render_bytes(writer.out.size());
  return std::move(writer.out);
}

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNone:
      return "NoneType";
    case Value::Kind::kBool:
      return "bool";
    case Value::Kind::kInt:
      return "int";
    case Value::Kind::kFloat:
      return "float";
    case Value::Kind::kString:
      return "str";
    case Value::Kind::kList:
      return v.is_tuple() ? "tuple" : "list";
    case Value::Kind::kDict:
      return "dict";
    case Value::Kind::kNamespace:
      return "Namespace";
    case Value::Kind::kCallable:
      return "function";
  }
  return "object";
}

bool equals(const Value& a, const Value& b) { return equals_at(a, b, 0); }

int compare(const Value& a, const Value& b) { return compare_at(a, b, 0); }

int64_t length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return 0;
    case Value::Kind::kString:
      return static_cast<int64_t>(code_point_count(v.as_string()));
    case Value::Kind::kList:
      return static_cast<int64_t>(v.items().size());
    case Value::Kind::kDict:
      return static_cast<int64_t>(v.dict_object().size());
    default:
      throw TemplateError("object of type '" + type_name(v) + "' has no len()");
  }
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return {};
    case Value::Kind::kString: {
      std::u32string text = decode_utf8(v.as_string());
      check_list_size(text.size());
      charge_render_bytes(text.size() * sizeof(Value));
      std::vector<Value> out;
      out.reserve(text.size());
      for (char32_t c : text) {
        out.push_back(Value::string(encode_utf8(std::u32string(1, c))));
      }
      return out;
    }
    case Value::Kind::kList:
      charge_render_bytes(v.items().size() * sizeof(Value));
      return v.items();
    case Value::Kind::kDict: {
      charge_render_bytes(v.dict_object().size() * sizeof(Value));
      std::vector<Value> out;
      for (const auto& item : v.dict_object().items()) out.push_back(Value::string(item.first));
      return out;
    }
    default:
      throw TemplateError("'" + type_name(v) + "' object is not iterable");
  }
}

namespace {

template <typename Json>
Value convert_json(const Json& j, int depth = 0) {
  check_value_depth(depth);
  switch (j.type()) {
    case nlohmann::json::value_t::null:
    case nlohmann::json::value_t::discarded:
      return Value::none();
    case nlohmann::json::value_t::boolean:
      return Value::boolean(j.template get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value::integer(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      uint64_t u = j.template get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value::number(static_cast<double>(u));
      return Value::integer(static_cast<int64_t>(u));
    }
    case nlohmann::json::value_t::number_float:
      return Value::number(j.template get<double>());
    case nlohmann::json::value_t::string:
      return Value::string(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& item : j) items.push_back(convert_json(item, depth + 1));
      return Value::list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      Value d = Value::dict();
      for (auto it = j.begin(); it != j.end(); ++it)
        d.dict_object().set(it.key(), convert_json(*it, depth + 1));
      return d;
    }
    case nlohmann::json::value_t::binary:
      break;
  }
  throw TemplateError("unsupported JSON value");
}

void dump_json(std::string& out, const Value& v, const JsonOptions& o, int depth) {
  check_value_depth(depth);
  check_text_size(out.size());  // a list holding one sub-list twice, 40 times over, stops here
  const std::string item_sep = o.separators ? o.separators->first : (o.indent ? "," : ", ");
  const std::string key_sep = o.separators ? o.separators->second : ": ";
  auto newline = [&](int level) {
    if (!o.indent) return;
    out += '\n';
    for (int i = 0; i < level; ++i) out += *o.indent;
    check_text_size(out.size());
  };
  switch (v.kind()) {
    case Value::Kind::kNone:
      out += "null";
      return;
    case Value::Kind::kBool:
      out += v.as_bool() ? "true" : "false";
      return;
    case Value::Kind::kInt:
      out += std::to_string(v.as_int());
      return;
    case Value::Kind::kFloat: {
      double d = v.as_double();
      if (std::isnan(d)) {
        out += "NaN";
      } else if (std::isinf(d)) {
        out += d > 0 ? "Infinity" : "-Infinity";
      } else {
        out += python_float_repr(d);
      }
      return;
    }
    case Value::Kind::kString:
      out += python_json_quote(v.as_string(), o.ensure_ascii);
      return;
    case Value::Kind::kList: {
      const auto& items = v.items();
      if (items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += item_sep;
        newline(depth + 1);
        dump_json(out, items[i], o, depth + 1);
      }
      newline(depth);
      out += ']';
      return;
    }
    case Value::Kind::kDict: {
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& item : v.dict_object().items()) items.push_back(&item);
      if (items.empty()) {
        out += "{}";
        return;
      }
      if (o.sort_keys) {
        std::stable_sort(items.begin(), items.end(),
                         [](const auto* a, const auto* b) { return a->first < b->first; });
      }
      out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += item_sep;
        newline(depth + 1);
        out += python_json_quote(items[i]->first, o.ensure_ascii);
        out += key_sep;
        dump_json(out, items[i]->second, o, depth + 1);
      }
      newline(depth);
      out += '}';
      return;
    }
    default:
      throw TemplateError("Object of type " + type_name(v) + " is not JSON serializable");
  }
}

}  // namespace

Value from_json(const nlohmann::json& j) { return convert_json(j); }
Value from_json(const nlohmann::ordered_json& j) { return convert_json(j); }

std::string to_json(const Value& v, const JsonOptions& options) {
  std::string out;
  dump_json(out, v, options, 0);
  check_text_size(out.size());
  return out;
}

}  // namespace gemmaserve::jinja
