// Jinja2's runtime behaviour outside the tree walk: operators, attribute/item access and the
// str/list/dict methods (operators.cpp), filters (filters.cpp), tests and globals (tests.cpp).
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/chat_template/value.h"

namespace gemmaserve::jinja {

// Binds call arguments to parameter names in order; absent ones stay nullopt. Throws TypeError
// style TemplateErrors for extra positionals and unknown keywords.
std::vector<std::optional<Value>> bind_args(const CallArgs& args,
                                            std::initializer_list<const char*> names,
                                            const std::string& function_name);

Value binary_op(const std::string& op, const Value& a, const Value& b);
Value unary_op(const std::string& op, const Value& a);
bool contains(const Value& container, const Value& item);
// `obj.name` and `obj[key]` as ImmutableSandboxedEnvironment resolves them.
Value get_attr(const Value& obj, const std::string& name);
Value get_item(const Value& obj, const Value& key);
Value slice_value(const Value& obj, const Value& start, const Value& stop, const Value& step);
Value call_value(const Value& callee, CallArgs& args);

bool is_known_filter(std::string_view name);
bool is_known_test(std::string_view name);
Value apply_filter(const std::string& name, const Value& input, const CallArgs& args);
bool apply_test(const std::string& name, const Value& input, const CallArgs& args);

// The template globals: range, dict, namespace, cycler, joiner, raise_exception, strftime_now.
void add_globals(DictObject& globals);

}  // namespace gemmaserve::jinja
