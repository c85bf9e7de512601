// The syntax tree the parser builds and the interpreter walks.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/chat_template/value.h"

namespace gemmaserve::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class ExprKind {
  kLiteral,    // value
  kName,       // name
  kList,       // args
  kTuple,      // args
  kDict,       // args = key, value, key, value, ...
  kGetAttr,    // args[0].name
  kGetItem,    // args[0][args[1]]
  kSlice,      // args[0][args[1]:args[2]:args[3]] (null parts omitted)
  kCall,       // args[0](args[1:], kwargs)
  kFilter,     // args[0] | name(args[1:], kwargs); args[0] null inside a filter block
  kTest,       // args[0] is [not] name(args[1:], kwargs)
  kUnary,      // name ("-", "+", "not") args[0]
  kBinary,     // args[0] name args[1] for + - * / // % ** ~
  kAnd,        // args[0] and args[1]
  kOr,         // args[0] or args[1]
  kCompare,    // args[0] ops[0] args[1] ops[1] args[2] ...
  kCondition,  // args[1] if args[0] else args[2] (args[2] may be null)
};

struct Expr {
  Expr() = default;
  Expr(const Expr&) = delete;
  Expr& operator=(const Expr&) = delete;
  // Frees its subtree with an explicit stack: a long chain (a.b.c..., 1+1+1...) is a deep tree.
  ~Expr();

  ExprKind kind = ExprKind::kLiteral;
  int line = 1;
  std::string name;
  Value value;
  bool negated = false;  // `is not`
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
};

enum class StmtKind {
  kOutput,       // text
  kPrint,        // expr
  kIf,           // conds[i] -> bodies[i]; bodies.back() is else when bodies.size() > conds.size()
  kFor,          // targets in expr [if cond] bodies[0] [else bodies[1]]
  kSet,          // targets (or targets[0].attr) = expr
  kSetBlock,     // targets[0] = bodies[0] rendered, filtered by expr (filter chain) when set
  kMacro,        // name(params with defaults) bodies[0]
  kCallBlock,    // expr is the call; params are the caller's; bodies[0] is caller
  kFilterBlock,  // expr is the filter chain applied to bodies[0]
  kWith,         // targets = defaults; bodies[0]
  kScope,        // bodies[0] in place (HF's {% generation %})
  kBreak,
  kContinue,
};

struct Param {
  std::string name;
  ExprPtr default_value;  // null when required
};

struct Stmt {
  StmtKind kind = StmtKind::kOutput;
  int line = 1;
  std::string text;  // output text or macro name
  std::string attr;  // namespace attribute for `set ns.attr = ...`
  std::vector<std::string> targets;
  ExprPtr expr;
  ExprPtr cond;
  std::vector<ExprPtr> conds;
  std::vector<ExprPtr> values;  // `with` assignments, parallel to targets
  std::vector<Param> params;
  std::vector<Body> bodies;
  bool recursive = false;
  bool catch_varargs = false;  // a macro body naming `varargs` accepts extra positionals
  bool catch_kwargs = false;   // ...and naming `kwargs` accepts unknown keywords
  bool unpack = false;         // targets came as a tuple (`for a, b in ...`)
};

// The longest path from `e` to a leaf (1 for a leaf), walked with an explicit stack.
int expr_depth(const Expr& e);

}  // namespace gemmaserve::jinja
