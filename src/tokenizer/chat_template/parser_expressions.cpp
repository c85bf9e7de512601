#include "tokenizer/chat_template/builtins.h"
#include "tokenizer/chat_template/parser_impl.h"

namespace gemmaserve::jinja {

ExprPtr Parser::make(ExprKind kind, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  return e;
}

bool Parser::at_tuple_end(const std::vector<std::string>& extra_end) const {
  const Token& t = cur();
  if (t.type == TokenType::kVariableEnd || t.type == TokenType::kBlockEnd ||
      t.type == TokenType::kEof) {
    return true;
  }
  if (t.type == TokenType::kOperator && t.text == ")") return true;
  if (t.type == TokenType::kName) {
    for (const auto& e : extra_end) {
      if (t.text == e) return true;
    }
  }
  return false;
}

ExprPtr Parser::parse_tuple(bool with_condexpr, const std::vector<std::string>& extra_end,
                            bool explicit_parentheses) {
  int line = cur().line;
  std::vector<ExprPtr> items;
  bool is_tuple = false;
  while (true) {
    if (!items.empty()) expect_op(",");
    if (at_tuple_end(extra_end)) break;
    items.push_back(with_condexpr ? parse_expression(true) : parse_or());
    if (is_op(","))
      is_tuple = true;
    else
      break;
  }
  if (!is_tuple) {
    if (!items.empty()) return std::move(items[0]);
    if (!explicit_parentheses) fail("Expected an expression, got '" + describe(cur()) + "'");
  }
  auto e = make(ExprKind::kTuple, line);
  e->args = std::move(items);
  return e;
}

ExprPtr Parser::parse_expression(bool with_condexpr) {
  return with_condexpr ? parse_condexpr() : parse_or();
}

ExprPtr Parser::parse_condexpr() {
  int line = cur().line;
  ExprPtr expr1 = parse_or();
  while (skip_name("if")) {
    auto e = make(ExprKind::kCondition, line);
    ExprPtr test = parse_or();
    ExprPtr otherwise;
    if (skip_name("else")) {
      const NestingGuard guard(*this);  // `a if b else c if d else ...` recurses here
      otherwise = parse_condexpr();
    }
    e->args.push_back(std::move(test));
    e->args.push_back(std::move(expr1));
    e->args.push_back(std::move(otherwise));
    expr1 = std::move(e);
  }
  return expr1;
}

ExprPtr Parser::parse_or() {
  int line = cur().line;
  ExprPtr left = parse_and();
  while (skip_name("or")) {
    auto e = make(ExprKind::kOr, line);
    e->args.push_back(std::move(left));
    e->args.push_back(parse_and());
    left = std::move(e);
  }
  return left;
}

ExprPtr Parser::parse_and() {
  int line = cur().line;
  ExprPtr left = parse_not();
  while (skip_name("and")) {
    auto e = make(ExprKind::kAnd, line);
    e->args.push_back(std::move(left));
    e->args.push_back(parse_not());
    left = std::move(e);
  }
  return left;
}

ExprPtr Parser::parse_not() {
  if (is_name("not")) {
    const NestingGuard guard(*this);
    int line = next().line;
    auto e = make(ExprKind::kUnary, line);
    e->name = "not";
    e->args.push_back(parse_not());
    return e;
  }
  return parse_compare();
}

ExprPtr Parser::parse_compare() {
  int line = cur().line;
  ExprPtr expr = parse_math1();
  std::vector<std::string> ops;
  std::vector<ExprPtr> operands;
  while (true) {
    std::string op;
    if (cur().type == TokenType::kOperator &&
        (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == ">" ||
         cur().text == "<=" || cur().text == ">=")) {
      op = next().text;
    } else if (skip_name("in")) {
      op = "in";
    } else if (is_name("not") && peek().type == TokenType::kName && peek().text == "in") {
      next();
      next();
      op = "notin";
    } else {
      break;
    }
    ops.push_back(op);
    operands.push_back(parse_math1());
  }
  if (ops.empty()) return expr;
  auto e = make(ExprKind::kCompare, line);
  e->args.push_back(std::move(expr));
  for (auto& operand : operands) e->args.push_back(std::move(operand));
  e->ops = std::move(ops);
  return e;
}

ExprPtr Parser::binary(const std::string& op, ExprPtr left, ExprPtr right, int line) {
  auto e = make(ExprKind::kBinary, line);
  e->name = op;
  e->args.push_back(std::move(left));
  e->args.push_back(std::move(right));
  return e;
}

ExprPtr Parser::parse_math1() {
  int line = cur().line;
  ExprPtr left = parse_concat();
  while (is_op("+") || is_op("-")) {
    std::string op = next().text;
    left = binary(op, std::move(left), parse_concat(), line);
  }
  return left;
}

ExprPtr Parser::parse_concat() {
  int line = cur().line;
  ExprPtr left = parse_math2();
  while (skip_op("~")) left = binary("~", std::move(left), parse_math2(), line);
  return left;
}

ExprPtr Parser::parse_math2() {
  int line = cur().line;
  ExprPtr left = parse_pow();
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    std::string op = next().text;
    left = binary(op, std::move(left), parse_pow(), line);
  }
  return left;
}

ExprPtr Parser::parse_pow() {
  int line = cur().line;
  ExprPtr left = parse_unary(true);
  while (skip_op("**")) left = binary("**", std::move(left), parse_unary(true), line);
  return left;
}

ExprPtr Parser::parse_unary(bool with_filter) {
  const NestingGuard guard(*this);
  int line = cur().line;
  ExprPtr node;
  if (is_op("-") || is_op("+")) {
    std::string op = next().text;
    node = make(ExprKind::kUnary, line);
    node->name = op;
    node->args.push_back(parse_unary(false));
  } else {
    node = parse_primary();
  }
  node = parse_postfix(std::move(node));
  if (with_filter) node = parse_filter_expr(std::move(node));
  return node;
}

ExprPtr Parser::parse_primary() {
  const Token& t = cur();
  int line = t.line;
  if (t.type == TokenType::kName) {
    const std::string& n = t.text;
    auto e = make(ExprKind::kLiteral, line);
    if (n == "true" || n == "True")
      e->value = Value::boolean(true);
    else if (n == "false" || n == "False")
      e->value = Value::boolean(false);
    else if (n == "none" || n == "None")
      e->value = Value::none();
    else {
      e->kind = ExprKind::kName;
      e->name = n;
    }
    next();
    return e;
  }
  if (t.type == TokenType::kString) {
    std::string s = next().text;
    while (cur().type == TokenType::kString) s += next().text;
    auto e = make(ExprKind::kLiteral, line);
    e->value = Value::string(std::move(s));
    return e;
  }
  if (t.type == TokenType::kInteger || t.type == TokenType::kFloat) {
    auto e = make(ExprKind::kLiteral, line);
    e->value =
        t.type == TokenType::kInteger ? Value::integer(t.int_value) : Value::number(t.float_value);
    next();
    return e;
  }
  if (is_op("(")) {
    next();
    ExprPtr e = parse_tuple(true, {}, true);
    expect_op(")");
    return e;
  }
  if (is_op("[")) {
    next();
    auto e = make(ExprKind::kList, line);
    while (!is_op("]")) {
      if (!e->args.empty()) expect_op(",");
      if (is_op("]")) break;
      e->args.push_back(parse_expression(true));
    }
    expect_op("]");
    return e;
  }
  if (is_op("{")) {
    next();
    auto e = make(ExprKind::kDict, line);
    while (!is_op("}")) {
      if (!e->args.empty()) expect_op(",");
      if (is_op("}")) break;
      e->args.push_back(parse_expression(true));
      expect_op(":");
      e->args.push_back(parse_expression(true));
    }
    expect_op("}");
    return e;
  }
  fail("unexpected '" + describe(t) + "'");
}

ExprPtr Parser::parse_postfix(ExprPtr node) {
  while (true) {
    if (is_op(".") || is_op("[")) {
      node = parse_subscript(std::move(node));
    } else if (is_op("(")) {
      node = parse_call(std::move(node));
    } else {
      return node;
    }
  }
}

ExprPtr Parser::parse_filter_expr(ExprPtr node) {
  while (true) {
    if (is_op("|")) {
      next();
      node = parse_filter(std::move(node));
    } else if (is_name("is")) {
      node = parse_test(std::move(node));
    } else if (is_op("(")) {
      node = parse_call(std::move(node));
    } else {
      return node;
    }
  }
}

ExprPtr Parser::parse_subscript(ExprPtr node) {
  const Token& t = next();
  int line = t.line;
  if (t.text == ".") {
    const Token& attr = cur();
    if (attr.type == TokenType::kName) {
      auto e = make(ExprKind::kGetAttr, line);
      e->name = next().text;
      e->args.push_back(std::move(node));
      return e;
    }
    if (attr.type != TokenType::kInteger) fail("expected name or number");
    auto e = make(ExprKind::kGetItem, line);
    auto index = make(ExprKind::kLiteral, line);
    index->value = Value::integer(next().int_value);
    e->args.push_back(std::move(node));
    e->args.push_back(std::move(index));
    return e;
  }
  std::vector<ExprPtr> args;
  while (!is_op("]")) {
    if (!args.empty()) expect_op(",");
    args.push_back(parse_subscribed());
  }
  expect_op("]");
  if (args.size() == 1 && args[0]->kind == ExprKind::kSlice) {
    args[0]->args.insert(args[0]->args.begin(), std::move(node));
    return std::move(args[0]);
  }
  for (const ExprPtr& a : args) {
    // Python would pass a tuple of slice objects; values have no slice type (and no template
    // needs one).
    if (args.size() > 1 && a->kind == ExprKind::kSlice) fail("a slice inside a tuple subscript");
  }
  auto e = make(ExprKind::kGetItem, line);
  e->args.push_back(std::move(node));
  if (args.size() == 1) {
    e->args.push_back(std::move(args[0]));
  } else {
    auto tuple = make(ExprKind::kTuple, line);
    tuple->args = std::move(args);
    e->args.push_back(std::move(tuple));
  }
  return e;
}

ExprPtr Parser::parse_subscribed() {
  int line = cur().line;
  std::vector<ExprPtr> parts;
  if (is_op(":")) {
    next();
    parts.push_back(nullptr);
  } else {
    ExprPtr node = parse_expression(true);
    if (!is_op(":")) return node;
    next();
    parts.push_back(std::move(node));
  }
  if (is_op(":") || is_op("]") || is_op(","))
    parts.push_back(nullptr);
  else
    parts.push_back(parse_expression(true));
  if (skip_op(":")) {
    if (is_op("]") || is_op(","))
      parts.push_back(nullptr);
    else
      parts.push_back(parse_expression(true));
  } else {
    parts.push_back(nullptr);
  }
  auto e = make(ExprKind::kSlice, line);
  e->args = std::move(parts);
  return e;
}

void Parser::parse_call_args(Expr* e) {
  expect_op("(");
  bool need_comma = false;
  while (!is_op(")")) {
    if (need_comma) {
      expect_op(",");
      if (is_op(")")) break;
    }
    if (is_op("*") || is_op("**")) fail("*args and **kwargs are not supported in chat templates");
    if (cur().type == TokenType::kName && peek().type == TokenType::kOperator &&
        peek().text == "=") {
      std::string key = next().text;
      next();
      e->kwargs.emplace_back(key, parse_expression(true));
    } else {
      if (!e->kwargs.empty()) fail("invalid syntax for function call expression");
      e->args.push_back(parse_expression(true));
    }
    need_comma = true;
  }
  expect_op(")");
}

ExprPtr Parser::parse_call(ExprPtr node) {
  auto e = make(ExprKind::kCall, cur().line);
  e->args.push_back(std::move(node));
  parse_call_args(e.get());
  return e;
}

std::string Parser::dotted_name() {
  std::string name = expect_identifier();
  while (is_op(".")) {
    next();
    name += '.';
    name += expect_identifier();
  }
  return name;
}

ExprPtr Parser::parse_filter(ExprPtr node) {
  int line = cur().line;
  auto e = make(ExprKind::kFilter, line);
  e->name = dotted_name();
  if (!is_known_filter(e->name)) fail("No filter named '" + e->name + "'.", line);
  e->args.push_back(std::move(node));
  if (is_op("(")) parse_call_args(e.get());
  return e;
}

ExprPtr Parser::parse_test(ExprPtr node) {
  int line = next().line;  // "is"
  auto e = make(ExprKind::kTest, line);
  if (skip_name("not")) e->negated = true;
  e->name = dotted_name();
  if (!is_known_test(e->name)) fail("No test named '" + e->name + "'.", line);
  e->args.push_back(std::move(node));
  const Token& t = cur();
  if (is_op("(")) {
    parse_call_args(e.get());
  } else if ((t.type == TokenType::kName || t.type == TokenType::kString ||
              t.type == TokenType::kInteger || t.type == TokenType::kFloat || is_op("[") ||
              is_op("{")) &&
             !is_name("else") && !is_name("or") && !is_name("and")) {
    if (is_name("is")) fail("You cannot chain multiple tests with is");
    ExprPtr arg = parse_postfix(parse_primary());
    e->args.push_back(std::move(arg));
  }
  return e;
}

}  // namespace gemmaserve::jinja
