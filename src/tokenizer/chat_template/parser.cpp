#include "tokenizer/chat_template/parser.h"

#include <algorithm>
#include <set>

#include "tokenizer/chat_template/builtins.h"
#include "tokenizer/chat_template/lexer.h"
#include "tokenizer/chat_template/parser_impl.h"

namespace gemmaserve::jinja {

namespace {

bool expr_references(const Expr* root, const std::string& name) {
  // An explicit stack: expressions may be long chains (see Expr::~Expr).
  std::vector<const Expr*> pending{root};
  while (!pending.empty()) {
    const Expr* e = pending.back();
    pending.pop_back();
    if (!e) continue;
    if (e->kind == ExprKind::kName && e->name == name) return true;
    for (const ExprPtr& a : e->args) pending.push_back(a.get());
    for (const auto& kw : e->kwargs) pending.push_back(kw.second.get());
  }
  return false;
}

// Refuses expressions deeper than the interpreter's recursion may go.
void check_expr_depth(const Expr* e) {
  if (e && expr_depth(*e) > kMaxExprDepth) {
    throw TemplateError(
        "expression nested deeper than " + std::to_string(kMaxExprDepth) + " levels", e->line);
  }
}

void check_body_depth(const Body& body) {
  for (const StmtPtr& s : body) {
    check_expr_depth(s->expr.get());
    check_expr_depth(s->cond.get());
    for (const ExprPtr& e : s->conds) check_expr_depth(e.get());
    for (const ExprPtr& e : s->values) check_expr_depth(e.get());
    for (const Param& p : s->params) check_expr_depth(p.default_value.get());
    for (const Body& b : s->bodies) check_body_depth(b);  // statement nesting is bounded
  }
}

}  // namespace

Expr::~Expr() {
  std::vector<ExprPtr> pending;
  auto take_children = [&pending](Expr& e) {
    for (ExprPtr& a : e.args) {
      if (a) pending.push_back(std::move(a));
    }
    for (auto& kw : e.kwargs) {
      if (kw.second) pending.push_back(std::move(kw.second));
    }
  };
  take_children(*this);
  while (!pending.empty()) {
    ExprPtr e = std::move(pending.back());
    pending.pop_back();
    take_children(*e);
  }  // each node is destroyed childless here
}

int expr_depth(const Expr& root) {
  int deepest = 0;
  std::vector<std::pair<const Expr*, int>> pending{{&root, 1}};
  while (!pending.empty()) {
    const auto [e, depth] = pending.back();
    pending.pop_back();
    deepest = std::max(deepest, depth);
    for (const ExprPtr& a : e->args) {
      if (a) pending.emplace_back(a.get(), depth + 1);
    }
    for (const auto& kw : e->kwargs) {
      if (kw.second) pending.emplace_back(kw.second.get(), depth + 1);
    }
  }
  return deepest;
}

// Jinja gives a macro `varargs`/`kwargs` only when its body names them.
bool references_name(const Body& body, const std::string& name) {
  for (const StmtPtr& s : body) {
    if (expr_references(s->expr.get(), name) || expr_references(s->cond.get(), name)) return true;
    for (const ExprPtr& e : s->conds) {
      if (expr_references(e.get(), name)) return true;
    }
    for (const ExprPtr& e : s->values) {
      if (expr_references(e.get(), name)) return true;
    }
    for (const Param& p : s->params) {
      if (expr_references(p.default_value.get(), name)) return true;
    }
    for (const Body& b : s->bodies) {
      if (references_name(b, name)) return true;
    }
  }
  return false;
}

std::string describe(const Token& t) {
  switch (t.type) {
    case TokenType::kData:
      return "template data";
    case TokenType::kVariableBegin:
      return "begin of print statement";
    case TokenType::kVariableEnd:
      return "end of print statement";
    case TokenType::kBlockBegin:
      return "begin of statement block";
    case TokenType::kBlockEnd:
      return "end of statement block";
    case TokenType::kName:
      return t.text;
    case TokenType::kString:
      return "string";
    case TokenType::kInteger:
      return "integer";
    case TokenType::kFloat:
      return "float";
    case TokenType::kOperator:
      return t.text;
    case TokenType::kEof:
      return "end of template";
  }
  return "token";
}

void Parser::fail_unknown_tag(const std::string* name, int line) const {
  std::string message = name ? "Encountered unknown tag '" + *name + "'."
                             : std::string("Unexpected end of template.");
  if (!end_stack_.empty()) {
    std::set<std::string> expected;
    for (const auto& ends : end_stack_) expected.insert(ends.begin(), ends.end());
    std::string looking;
    for (size_t i = 0; i < end_stack_.back().size(); ++i) {
      if (i > 0) looking += " or ";
      looking += "'" + end_stack_.back()[i] + "'";
    }
    if (name && expected.count(*name)) {
      message +=
          " You probably made a nesting mistake. Jinja is expecting this tag, but "
          "currently looking for " +
          looking + ".";
    } else {
      message += " Jinja was looking for the following tags: " + looking + ".";
    }
  }
  if (!tag_stack_.empty()) {
    message += " The innermost block that needs to be closed is '" + tag_stack_.back() + "'.";
  }
  fail(message, line);
}

// Parses until one of `ends` (a tag name) opens a block; leaves the stream on that name.
Body Parser::subparse(const std::vector<std::string>& ends) {
  const NestingGuard guard(*this);
  Body body;
  if (!ends.empty()) end_stack_.push_back(ends);
  while (true) {
    const Token& t = cur();
    if (t.type == TokenType::kEof) {
      if (!ends.empty()) fail_unknown_tag(nullptr, t.line);
      break;
    }
    if (t.type == TokenType::kData) {
      auto s = std::make_unique<Stmt>();
      s->kind = StmtKind::kOutput;
      s->line = t.line;
      s->text = t.text;
      body.push_back(std::move(s));
      next();
    } else if (t.type == TokenType::kVariableBegin) {
      next();
      auto s = std::make_unique<Stmt>();
      s->kind = StmtKind::kPrint;
      s->line = cur().line;
      s->expr = parse_tuple(true, {});
      if (cur().type != TokenType::kVariableEnd) {
        fail("expected token 'end of print statement', got '" + describe(cur()) + "'");
      }
      next();
      body.push_back(std::move(s));
    } else if (t.type == TokenType::kBlockBegin) {
      next();
      if (cur().type == TokenType::kName && !ends.empty()) {
        bool is_end = false;
        for (const auto& e : ends) is_end = is_end || cur().text == e;
        if (is_end) {
          end_stack_.pop_back();
          return body;
        }
      }
      body.push_back(parse_statement());
    } else {
      fail("unexpected '" + describe(t) + "'");
    }
  }
  if (!ends.empty()) end_stack_.pop_back();
  return body;
}

StmtPtr Parser::parse_statement() {
  if (cur().type != TokenType::kName) fail("tag name expected");
  std::string tag = cur().text;
  int line = cur().line;
  static const std::set<std::string> kKnown = {"for",    "if",   "set",        "macro", "call",
                                               "filter", "with", "generation", "print"};
  if (tag == "break" || tag == "continue") {
    next();
    auto s = std::make_unique<Stmt>();
    s->kind = tag == "break" ? StmtKind::kBreak : StmtKind::kContinue;
    s->line = line;
    expect_block_end();
    return s;
  }
  if (!kKnown.count(tag)) {
    if (tag == "include" || tag == "import" || tag == "from" || tag == "extends" ||
        tag == "block" || tag == "autoescape" || tag == "do") {
      fail("the '" + tag + "' tag is not supported in chat templates", line);
    }
    fail_unknown_tag(&tag, line);
  }
  tag_stack_.push_back(tag);
  next();
  StmtPtr s;
  if (tag == "for")
    s = parse_for(line);
  else if (tag == "if")
    s = parse_if(line);
  else if (tag == "set")
    s = parse_set(line);
  else if (tag == "macro")
    s = parse_macro(line);
  else if (tag == "call")
    s = parse_call_block(line);
  else if (tag == "filter")
    s = parse_filter_block(line);
  else if (tag == "with")
    s = parse_with(line);
  else if (tag == "generation")
    s = parse_generation(line);
  else
    s = parse_print(line);
  tag_stack_.pop_back();
  return s;
}

// Consumes the end tag name the subparse stopped on and the block end.
void Parser::end_tag() {
  next();
  expect_block_end();
}

StmtPtr Parser::parse_for(int line) {
  auto s = std::make_unique<Stmt>();
  s->kind = StmtKind::kFor;
  s->line = line;
  parse_targets(s.get(), false);
  expect_name("in");
  s->expr = parse_tuple(false, {"recursive"});
  if (skip_name("if")) s->cond = parse_expression(true);
  if (skip_name("recursive")) s->recursive = true;
  expect_block_end();
  s->bodies.push_back(subparse({"endfor", "else"}));
  if (is_name("else")) {
    next();
    expect_block_end();
    s->bodies.push_back(subparse({"endfor"}));
  }
  end_tag();
  return s;
}

StmtPtr Parser::parse_if(int line) {
  auto s = std::make_unique<Stmt>();
  s->kind = StmtKind::kIf;
  s->line = line;
  s->conds.push_back(parse_tuple(false, {}));
  expect_block_end();
  while (true) {
    s->bodies.push_back(subparse({"elif", "else", "endif"}));
    if (is_name("elif")) {
      next();
      s->conds.push_back(parse_tuple(false, {}));
      expect_block_end();
      continue;
    }
    if (is_name("else")) {
      next();
      expect_block_end();
      s->bodies.push_back(subparse({"endif"}));
    }
    break;
  }
  end_tag();
  return s;
}

// `a`, `a, b`, `(a, b)` or (for set) `ns.attr`.
void Parser::parse_targets(Stmt* s, bool allow_namespace) {
  bool paren = skip_op("(");
  s->targets.push_back(expect_identifier());
  if (allow_namespace && !paren && is_op(".")) {
    next();
    s->attr = expect_identifier();
    return;
  }
  while (skip_op(",")) {
    s->unpack = true;
    if (cur().type != TokenType::kName) break;
    s->targets.push_back(expect_identifier());
  }
  if (paren) {
    s->unpack = true;
    expect_op(")");
  }
}

StmtPtr Parser::parse_set(int line) {
  auto s = std::make_unique<Stmt>();
  s->line = line;
  parse_targets(s.get(), true);
  if (skip_op("=")) {
    s->kind = StmtKind::kSet;
    s->expr = parse_tuple(true, {});
    expect_block_end();
    return s;
  }
  s->kind = StmtKind::kSetBlock;
  if (!s->attr.empty() || s->unpack) fail("expected token '=', got '" + describe(cur()) + "'");
  if (is_op("|")) s->expr = parse_filter_chain();
  expect_block_end();
  s->bodies.push_back(subparse({"endset"}));
  end_tag();
  return s;
}

void Parser::parse_signature(Stmt* s) {
  expect_op("(");
  while (!is_op(")")) {
    if (!s->params.empty()) expect_op(",");
    if (is_op(")")) break;
    Param p;
    p.name = expect_identifier();
    if (skip_op("="))
      p.default_value = parse_expression(true);
    else if (!s->params.empty() && s->params.back().default_value) {
      fail("non-default argument follows default argument");
    }
    s->params.push_back(std::move(p));
  }
  expect_op(")");
}

StmtPtr Parser::parse_macro(int line) {
  auto s = std::make_unique<Stmt>();
  s->kind = StmtKind::kMacro;
  s->line = line;
  s->text = expect_identifier();
  parse_signature(s.get());
  expect_block_end();
  s->bodies.push_back(subparse({"endmacro"}));
  end_tag();
  s->catch_varargs = references_name(s->bodies[0], "varargs");
  s->catch_kwargs = references_name(s->bodies[0], "kwargs");
  return s;
}

StmtPtr Parser::parse_call_block(int line) {
  auto s = std::make_unique<Stmt>();
  s->kind = StmtKind::kCallBlock;
  s->line = line;
  if (is_op("(")) parse_signature(s.get());
  s->expr = parse_expression(true);
  if (s->expr->kind != ExprKind::kCall) fail("expected call", line);
  expect_block_end();
  s->bodies.push_back(subparse({"endcall"}));
  end_tag();
  return s;
}

// `| name(args) | name2` applied to a null operand (filled in at run time).
ExprPtr Parser::parse_filter_chain() {
  ExprPtr node;
  bool first = true;
  while (first || is_op("|")) {
    if (!first || is_op("|")) expect_op("|");
    first = false;
    node = parse_filter(std::move(node));
  }
  return node;
}

StmtPtr Parser::parse_filter_block(int line) {
  auto s = std::make_unique<Stmt>();
  s->kind = StmtKind::kFilterBlock;
  s->line = line;
  s->expr = parse_filter(nullptr);
  while (is_op("|")) {
    next();
    s->expr = parse_filter(std::move(s->expr));
  }
  expect_block_end();
  s->bodies.push_back(subparse({"endfilter"}));
  end_tag();
  return s;
}

StmtPtr Parser::parse_with(int line) {
  auto s = std::make_unique<Stmt>();
  s->kind = StmtKind::kWith;
  s->line = line;
  while (cur().type != TokenType::kBlockEnd) {
    if (!s->targets.empty()) expect_op(",");
    s->targets.push_back(expect_identifier());
    expect_op("=");
    s->values.push_back(parse_expression(true));
  }
  expect_block_end();
  s->bodies.push_back(subparse({"endwith"}));
  end_tag();
  return s;
}

StmtPtr Parser::parse_generation(int line) {
  auto s = std::make_unique<Stmt>();
  s->kind = StmtKind::kScope;
  s->line = line;
  expect_block_end();
  s->bodies.push_back(subparse({"endgeneration"}));
  end_tag();
  return s;
}

StmtPtr Parser::parse_print(int line) {
  auto s = std::make_unique<Stmt>();
  s->kind = StmtKind::kPrint;
  s->line = line;
  s->expr = parse_tuple(true, {});
  expect_block_end();
  return s;
}

Body parse_template(std::string_view source) {
  Body body = Parser(tokenize(source)).parse();
  check_body_depth(body);
  return body;
}

}  // namespace gemmaserve::jinja
