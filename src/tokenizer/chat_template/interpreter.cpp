#include "tokenizer/chat_template/interpreter.h"

#include <algorithm>

#include "tokenizer/chat_template/builtins.h"

namespace gemmaserve::jinja {

const Value* Frame::lookup(const std::string& name) const {
  for (const Frame* f = this; f; f = f->parent_.get()) {
    auto it = f->vars_.find(name);
    if (it != f->vars_.end()) return &it->second;
  }
  return nullptr;
}

namespace {

constexpr int kMaxCallDepth = 200;  // Python's recursion limit stops Jinja near this depth
// Statements and expressions nested at run time (through macros, recursive loops, filters):
// stops a template before the C++ stack runs out, as Python's recursion limit stops Jinja.
constexpr int kMaxRenderNesting = 2000;

enum class Flow { kNormal, kBreak, kContinue };

class Interpreter {
 public:
  explicit Interpreter(const Value& context) {
    add_globals(globals_);
    root_ = std::make_shared<Frame>(nullptr);
    if (context.is_dict()) {
      for (const auto& [key, value] : context.dict_object().items()) root_->set(key, value);
    }
  }

  // A namespace may have been made to hold itself (`{% set ns.me = ns %}`): emptying every
  // namespace the template assigned to frees such cycles, which reference counts never would.
  ~Interpreter() {
    for (const auto& [address, assigned] : assigned_namespaces_) {
      if (std::shared_ptr<DictObject> attributes = assigned.lock()) attributes->clear();
    }
  }
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  std::string run(const Body& body) {
    std::string out;
    try {
      exec_body(body, root_, out);
    } catch (const TemplateError& e) {
      if (e.line() == 0) throw TemplateError(e.what(), line_);
      throw;
    }
    return out;
  }

 private:
  Flow exec_body(const Body& body, const FramePtr& frame, std::string& out) {
    for (const StmtPtr& s : body) {
      Flow flow = exec(*s, frame, out);
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  // Counts one unit of rendering work and one level of nesting for its lifetime.
  class Step {
   public:
    explicit Step(Interpreter& in) : in_(in) {
      if (++in_.nesting_ > kMaxRenderNesting) {
        throw TemplateError("maximum recursion depth exceeded while rendering");
      }
      if (++in_.steps_ > kMaxRenderSteps) {
        throw TemplateError("rendering took more than " + std::to_string(kMaxRenderSteps) +
                            " steps (a loop without end?)");
      }
    }
    ~Step() { --in_.nesting_; }
    Step(const Step&) = delete;
    Step& operator=(const Step&) = delete;

   private:
    Interpreter& in_;
  };

  Flow exec(const Stmt& s, const FramePtr& frame, std::string& out) {
    const Step step(*this);
    line_ = s.line;
    switch (s.kind) {
      case StmtKind::kOutput:
        charge_render_bytes(s.text.size());
        out += s.text;
        check_text_size(out.size());
        return Flow::kNormal;
      case StmtKind::kPrint:
        out += to_str(eval(*s.expr, frame));
        check_text_size(out.size());
        return Flow::kNormal;
      case StmtKind::kIf:
        for (size_t i = 0; i < s.conds.size(); ++i) {
          if (truthy(eval(*s.conds[i], frame))) return exec_body(s.bodies[i], frame, out);
        }
        if (s.bodies.size() > s.conds.size()) return exec_body(s.bodies.back(), frame, out);
        return Flow::kNormal;
      case StmtKind::kFor:
        run_loop(s, frame, eval(*s.expr, frame), 0, out);
        return Flow::kNormal;
      case StmtKind::kSet:
        exec_set(s, frame);
        return Flow::kNormal;
      case StmtKind::kSetBlock: {
        std::string text;
        exec_body(s.bodies[0], frame, text);
        Value v = Value::string(std::move(text));
        if (s.expr) v = eval_filter(*s.expr, frame, &v);
        frame->set(s.targets[0], v);
        return Flow::kNormal;
      }
      case StmtKind::kMacro:
        frame->set(s.text, make_macro(s, frame, s.text));
        return Flow::kNormal;
      case StmtKind::kCallBlock:
        out += to_str(exec_call_block(s, frame));
        check_text_size(out.size());
        return Flow::kNormal;
      case StmtKind::kFilterBlock: {
        std::string text;
        exec_body(s.bodies[0], frame, text);
        Value v = Value::string(std::move(text));
        out += to_str(eval_filter(*s.expr, frame, &v));
        check_text_size(out.size());
        return Flow::kNormal;
      }
      case StmtKind::kWith: {
        auto inner = std::make_shared<Frame>(frame);
        for (size_t i = 0; i < s.targets.size(); ++i) {
          inner->set(s.targets[i], eval(*s.values[i], frame));
        }
        return exec_body(s.bodies[0], inner, out);
      }
      case StmtKind::kScope:
        return exec_body(s.bodies[0], std::make_shared<Frame>(frame), out);
      case StmtKind::kBreak:
        return Flow::kBreak;
      case StmtKind::kContinue:
        return Flow::kContinue;
    }
    return Flow::kNormal;
  }

  void assign_targets(const Stmt& s, const FramePtr& frame, const Value& v) {
    if (!s.unpack) {
      frame->set(s.targets[0], v);
      return;
    }
    std::vector<Value> items = iterate(v);
    if (items.size() < s.targets.size()) {
      throw TemplateError("not enough values to unpack (expected " +
                          std::to_string(s.targets.size()) + ", got " +
                          std::to_string(items.size()) + ")");
    }
    if (items.size() > s.targets.size()) {
      throw TemplateError("too many values to unpack (expected " +
                          std::to_string(s.targets.size()) + ")");
    }
    for (size_t i = 0; i < items.size(); ++i) frame->set(s.targets[i], items[i]);
  }

  void exec_set(const Stmt& s, const FramePtr& frame) {
    Value v = eval(*s.expr, frame);
    if (!s.attr.empty()) {
      const Value* target = frame->lookup(s.targets[0]);
      if (!target || !target->is_namespace()) {
        throw TemplateError("cannot assign attribute on non-namespace object");
      }
      remember_assigned(target->dict_ptr());
      target->dict_object().set(s.attr, std::move(v));
      return;
    }
    assign_targets(s, frame, v);
  }

  void remember_assigned(const std::shared_ptr<DictObject>& attributes) {
    std::weak_ptr<DictObject>& slot = assigned_namespaces_[attributes.get()];
    if (slot.expired()) slot = attributes;  // a dead namespace's address may be reused
    if (assigned_namespaces_.size() < prune_assigned_at_) return;
    std::erase_if(assigned_namespaces_, [](const auto& entry) { return entry.second.expired(); });
    prune_assigned_at_ = std::max<size_t>(1024, 2 * assigned_namespaces_.size());
  }

  void run_loop(const Stmt& s, const FramePtr& frame, const Value& iterable, int depth,
                std::string& out) {
    if (depth > kMaxCallDepth) {
      throw TemplateError("maximum recursion depth exceeded in a recursive loop");
    }
    std::vector<Value> items = iterate(iterable);
    if (s.cond) {
      std::vector<Value> kept;
      for (Value& item : items) {
        auto probe = std::make_shared<Frame>(frame);
        assign_targets(s, probe, item);
        if (truthy(eval(*s.cond, probe))) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      if (s.bodies.size() > 1) exec_body(s.bodies[1], std::make_shared<Frame>(frame), out);
      return;
    }
    const int64_t n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      const Step step(*this);
      auto inner = std::make_shared<Frame>(frame);
      assign_targets(s, inner, items[static_cast<size_t>(i)]);
      Value loop = Value::make_namespace();
      DictObject& d = loop.dict_object();
      d.set("index", Value::integer(i + 1));
      d.set("index0", Value::integer(i));
      d.set("revindex", Value::integer(n - i));
      d.set("revindex0", Value::integer(n - i - 1));
      d.set("first", Value::boolean(i == 0));
      d.set("last", Value::boolean(i == n - 1));
      d.set("length", Value::integer(n));
      d.set("depth", Value::integer(depth + 1));
      d.set("depth0", Value::integer(depth));
      if (i > 0) d.set("previtem", items[static_cast<size_t>(i - 1)]);
      if (i + 1 < n) d.set("nextitem", items[static_cast<size_t>(i + 1)]);
      d.set("cycle", Value::callable("cycle", [i](CallArgs& args) {
              if (args.positional.empty()) throw TemplateError("no items for cycling given");
              return args.positional[static_cast<size_t>(i) % args.positional.size()];
            }));
      if (s.recursive) {
        d.set("__call__",
              Value::callable("loop", [this, &s, scope = pin(frame), depth](CallArgs& args) {
                if (args.positional.size() != 1)
                  throw TemplateError("loop() takes exactly 1 argument");
                std::string text;
                run_loop(s, lock(scope), args.positional[0], depth + 1, text);
                return Value::string(std::move(text));
              }));
      }
      inner->set("loop", loop);
      if (exec_body(s.bodies[0], inner, out) == Flow::kBreak) break;
    }
  }

  // Callables hold their scope weakly (a macro lives in the scope it closes over) while the
  // interpreter keeps every such scope alive until rendering ends.
  std::weak_ptr<Frame> pin(const FramePtr& frame) {
    pinned_.push_back(frame);
    return frame;
  }

  static FramePtr lock(const std::weak_ptr<Frame>& frame) {
    FramePtr f = frame.lock();
    if (!f) throw TemplateError("callable used after its template scope ended");
    return f;
  }

  Value make_macro(const Stmt& s, const FramePtr& closure, const std::string& name) {
    return Value::callable(name, [this, &s, scope = pin(closure), name](CallArgs& args) {
      return call_macro(s, lock(scope), name, args, nullptr);
    });
  }

  Value call_macro(const Stmt& s, const FramePtr& closure, const std::string& name, CallArgs& args,
                   const Value* caller) {
    if (++call_depth_ > kMaxCallDepth) {
      call_depth_ = 0;
      throw TemplateError("maximum recursion depth exceeded in macro '" + name + "'");
    }
    auto f = std::make_shared<Frame>(closure);
    std::vector<bool> given(s.params.size(), false);
    std::vector<Value> varargs;
    Value kwargs = Value::dict();
    if (!s.catch_kwargs) {
      for (const auto& [key, value] : args.keyword) {
        bool known = key == "caller";
        for (const Param& p : s.params) known = known || p.name == key;
        if (!known) {
          throw TemplateError("macro '" + name + "' takes no keyword argument '" + key + "'");
        }
      }
    }
    if (!s.catch_varargs && args.positional.size() > s.params.size()) {
      throw TemplateError("macro '" + name + "' takes not more than " +
                          std::to_string(s.params.size()) + " argument(s)");
    }
    for (size_t i = 0; i < args.positional.size(); ++i) {
      if (i < s.params.size()) {
        f->set(s.params[i].name, args.positional[i]);
        given[i] = true;
      } else {
        varargs.push_back(args.positional[i]);
      }
    }
    for (auto& [key, value] : args.keyword) {
      bool matched = false;
      for (size_t i = 0; i < s.params.size(); ++i) {
        if (s.params[i].name == key) {
          if (given[i]) {
            throw TemplateError("macro '" + name + "' got multiple values for argument '" + key +
                                "'");
          }
          f->set(key, value);
          given[i] = true;
          matched = true;
        }
      }
      if (matched) continue;
      if (key == "caller") {
        f->set("caller", value);
      } else {
        kwargs.dict_object().set(key, value);
      }
    }
    if (caller) f->set("caller", *caller);
    for (size_t i = 0; i < s.params.size(); ++i) {
      if (given[i]) continue;
      if (s.params[i].default_value) {
        f->set(s.params[i].name, eval(*s.params[i].default_value, f));
      } else {
        f->set(s.params[i].name,
               Value::undefined("parameter '" + s.params[i].name + "' was not provided"));
      }
    }
    f->set("varargs", Value::tuple(std::move(varargs)));
    f->set("kwargs", kwargs);
    std::string out;
    exec_body(s.bodies[0], f, out);
    --call_depth_;
    return Value::string(std::move(out));
  }

  Value exec_call_block(const Stmt& s, const FramePtr& frame) {
    Value caller = Value::callable("caller", [this, &s, scope = pin(frame)](CallArgs& args) {
      return call_macro(s, lock(scope), "caller", args, nullptr);
    });
    const Expr& call = *s.expr;
    Value callee = eval(*call.args[0], frame);
    CallArgs args = eval_args(call, frame, 1);
    args.keyword.emplace_back("caller", caller);
    return call_value(callee, args);
  }

  CallArgs eval_args(const Expr& e, const FramePtr& frame, size_t first) {
    CallArgs args;
    for (size_t i = first; i < e.args.size(); ++i)
      args.positional.push_back(eval(*e.args[i], frame));
    for (const auto& [key, value] : e.kwargs) args.keyword.emplace_back(key, eval(*value, frame));
    return args;
  }

  // A filter node; `input` replaces the missing operand of a filter block's chain.
  Value eval_filter(const Expr& e, const FramePtr& frame, const Value* input) {
    Value operand;
    if (e.args[0]) {
      operand = e.args[0]->kind == ExprKind::kFilter ? eval_filter(*e.args[0], frame, input)
                                                     : eval(*e.args[0], frame);
    } else if (input) {
      operand = *input;
    }
    CallArgs args = eval_args(e, frame, 1);
    line_ = e.line;
    return apply_filter(e.name, operand, args);
  }

  Value eval(const Expr& e, const FramePtr& frame) {
    const Step step(*this);
    line_ = e.line;
    switch (e.kind) {
      case ExprKind::kLiteral:
        return e.value;
      case ExprKind::kName: {
        if (const Value* v = frame->lookup(e.name)) return *v;
        if (const Value* v = globals_.find(e.name)) return *v;
        return Value::undefined("'" + e.name + "' is undefined");
      }
      case ExprKind::kList:
      case ExprKind::kTuple: {
        std::vector<Value> items;
        for (const ExprPtr& a : e.args) items.push_back(eval(*a, frame));
        return e.kind == ExprKind::kList ? Value::list(std::move(items))
                                         : Value::tuple(std::move(items));
      }
      case ExprKind::kDict: {
        Value d = Value::dict();
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          Value key = eval(*e.args[i], frame);
          if (!key.is_string()) {
            throw TemplateError("only string keys are supported in dict literals, got " +
                                type_name(key));
          }
          d.dict_object().set(key.as_string(), eval(*e.args[i + 1], frame));
        }
        return d;
      }
      case ExprKind::kGetAttr:
        return get_attr(eval(*e.args[0], frame), e.name);
      case ExprKind::kGetItem: {
        Value obj = eval(*e.args[0], frame);
        return get_item(obj, eval(*e.args[1], frame));
      }
      case ExprKind::kSlice: {
        Value obj = eval(*e.args[0], frame);
        auto part = [&](size_t i) { return e.args[i] ? eval(*e.args[i], frame) : Value::none(); };
        return slice_value(obj, part(1), part(2), part(3));
      }
      case ExprKind::kCall: {
        Value callee = eval(*e.args[0], frame);
        CallArgs args = eval_args(e, frame, 1);
        line_ = e.line;
        if (callee.is_namespace()) {
          if (const Value* fn = callee.dict_object().find("__call__")) callee = *fn;
        }
        Value result = call_value(callee, args);
        line_ = e.line;
        return result;
      }
      case ExprKind::kFilter:
        return eval_filter(e, frame, nullptr);
      case ExprKind::kTest: {
        Value operand = eval(*e.args[0], frame);
        CallArgs args = eval_args(e, frame, 1);
        line_ = e.line;
        return Value::boolean(apply_test(e.name, operand, args) != e.negated);
      }
      case ExprKind::kUnary:
        return unary_op(e.name, eval(*e.args[0], frame));
      case ExprKind::kBinary: {
        Value a = eval(*e.args[0], frame);
        Value b = eval(*e.args[1], frame);
        line_ = e.line;
        return binary_op(e.name, a, b);
      }
      case ExprKind::kAnd: {
        Value a = eval(*e.args[0], frame);
        return truthy(a) ? eval(*e.args[1], frame) : a;
      }
      case ExprKind::kOr: {
        Value a = eval(*e.args[0], frame);
        return truthy(a) ? a : eval(*e.args[1], frame);
      }
      case ExprKind::kCompare: {
        Value left = eval(*e.args[0], frame);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          Value right = eval(*e.args[i + 1], frame);
          line_ = e.line;
          if (!compare_op(e.ops[i], left, right)) return Value::boolean(false);
          left = std::move(right);
        }
        return Value::boolean(true);
      }
      case ExprKind::kCondition: {
        if (truthy(eval(*e.args[0], frame))) return eval(*e.args[1], frame);
        if (e.args[2]) return eval(*e.args[2], frame);
        return Value::undefined("the inline if-expression on line " + std::to_string(e.line) +
                                " evaluated to false and no else section was defined.");
      }
    }
    return Value();
  }

  static bool compare_op(const std::string& op, const Value& a, const Value& b) {
    if (op == "==") return equals(a, b);
    if (op == "!=") return !equals(a, b);
    if (op == "<") return compare(a, b) < 0;
    if (op == ">") return compare(a, b) > 0;
    if (op == "<=") return compare(a, b) <= 0;
    if (op == ">=") return compare(a, b) >= 0;
    if (op == "in") return contains(b, a);
    return !contains(b, a);  // "notin"
  }

  // First, so that it is open while anything below is built and still open while it is freed.
  RenderBytesBudget bytes_budget_;
  // Every namespace a `set ns.attr` wrote to, by address; emptied when the rendering ends.
  std::unordered_map<const DictObject*, std::weak_ptr<DictObject>> assigned_namespaces_;
  size_t prune_assigned_at_ = 1024;
  DictObject globals_;
  FramePtr root_;
  std::vector<FramePtr> pinned_;
  int line_ = 1;
  int call_depth_ = 0;
  int nesting_ = 0;
  int64_t steps_ = 0;
};

}  // namespace

std::string render_template(const Body& body, const Value& context) {
  return Interpreter(context).run(body);
}

}  // namespace gemmaserve::jinja
