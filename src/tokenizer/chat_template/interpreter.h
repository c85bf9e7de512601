// Walks the parsed template: Jinja2's scoping (a fresh scope per loop iteration and macro call,
// if-blocks sharing their parent's), loops with `loop.*`, macros, call/filter blocks, namespaces.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>

#include "tokenizer/chat_template/ast.h"
#include "tokenizer/chat_template/value.h"

namespace gemmaserve::jinja {

class Frame {
 public:
  explicit Frame(std::shared_ptr<Frame> parent) : parent_(std::move(parent)) {}
  const Value* lookup(const std::string& name) const;
  void set(const std::string& name, Value value) { vars_[name] = std::move(value); }

 private:
  std::unordered_map<std::string, Value> vars_;
  std::shared_ptr<Frame> parent_;
};
using FramePtr = std::shared_ptr<Frame>;

// Renders `body` with `context` (a dict) as the template's variables. Throws TemplateError
// carrying the line of the failing statement.
std::string render_template(const Body& body, const Value& context);

}  // namespace gemmaserve::jinja
