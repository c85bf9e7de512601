// The parser's class, shared by parser.cpp (statements) and parser_expressions.cpp.
#pragma once

#include <string>
#include <vector>

#include "tokenizer/chat_template/ast.h"
#include "tokenizer/chat_template/lexer.h"

namespace gemmaserve::jinja {

std::string describe(const Token& t);
bool references_name(const Body& body, const std::string& name);

// Deeper templates are refused: parsing, evaluating and freeing them recurse (Jinja itself stops
// at Python's recursion limit).
inline constexpr int kMaxTemplateNesting = 128;
inline constexpr int kMaxExprDepth = 128;

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  Body parse() {
    Body body = subparse({});
    return body;
  }

 private:
  const Token& cur() const { return tokens_[pos_]; }
  const Token& peek(size_t n = 1) const { return tokens_[std::min(pos_ + n, tokens_.size() - 1)]; }
  const Token& next() {
    const Token& t = tokens_[pos_];
    if (pos_ + 1 < tokens_.size()) ++pos_;
    return t;
  }
  [[noreturn]] void fail(const std::string& message, int line = 0) const {
    throw TemplateError(message, line ? line : cur().line);
  }
  bool is_op(const char* op) const {
    return cur().type == TokenType::kOperator && cur().text == op;
  }
  bool is_name(const char* name) const {
    return cur().type == TokenType::kName && cur().text == name;
  }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(name)) return false;
    next();
    return true;
  }
  void expect_op(const char* op) {
    if (!skip_op(op))
      fail("expected token '" + std::string(op) + "', got '" + describe(cur()) + "'");
  }
  void expect_name(const char* name) {
    if (!skip_name(name)) {
      fail("expected token '" + std::string(name) + "', got '" + describe(cur()) + "'");
    }
  }
  std::string expect_identifier() {
    if (cur().type != TokenType::kName) {
      fail("expected token 'name', got '" + describe(cur()) + "'");
    }
    return next().text;
  }
  void expect_block_end() {
    if (cur().type != TokenType::kBlockEnd) {
      fail("expected token 'end of statement block', got '" + describe(cur()) + "'");
    }
    next();
  }

  // Statements (parser.cpp).
  [[noreturn]] void fail_unknown_tag(const std::string* name, int line) const;
  // Parses until one of `ends` (a tag name) opens a block; leaves the stream on that name.
  Body subparse(const std::vector<std::string>& ends);
  StmtPtr parse_statement();
  // Consumes the end tag name the subparse stopped on and the block end.
  void end_tag();
  StmtPtr parse_for(int line);
  StmtPtr parse_if(int line);
  // `a`, `a, b`, `(a, b)` or (for set) `ns.attr`.
  void parse_targets(Stmt* s, bool allow_namespace);
  StmtPtr parse_set(int line);
  void parse_signature(Stmt* s);
  StmtPtr parse_macro(int line);
  StmtPtr parse_call_block(int line);
  // `| name(args) | name2` applied to a null operand (filled in at run time).
  ExprPtr parse_filter_chain();
  StmtPtr parse_filter_block(int line);
  StmtPtr parse_with(int line);
  StmtPtr parse_generation(int line);
  StmtPtr parse_print(int line);

  // Expressions (parser_expressions.cpp).
  ExprPtr make(ExprKind kind, int line);
  bool at_tuple_end(const std::vector<std::string>& extra_end) const;
  ExprPtr parse_tuple(bool with_condexpr, const std::vector<std::string>& extra_end,
                      bool explicit_parentheses = false);
  ExprPtr parse_expression(bool with_condexpr);
  ExprPtr parse_condexpr();
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr binary(const std::string& op, ExprPtr left, ExprPtr right, int line);
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary();
  ExprPtr parse_postfix(ExprPtr node);
  ExprPtr parse_filter_expr(ExprPtr node);
  ExprPtr parse_subscript(ExprPtr node);
  ExprPtr parse_subscribed();
  void parse_call_args(Expr* e);
  ExprPtr parse_call(ExprPtr node);
  std::string dotted_name();
  ExprPtr parse_filter(ExprPtr node);
  ExprPtr parse_test(ExprPtr node);

  // Counts the parser's own recursion (blocks in blocks, parentheses, `not not`, `- -`).
  class NestingGuard {
   public:
    explicit NestingGuard(Parser& p) : p_(p) {
      if (++p_.nesting_ > kMaxTemplateNesting) {
        p_.fail("the template nests deeper than " + std::to_string(kMaxTemplateNesting) +
                " levels");
      }
    }
    ~NestingGuard() { --p_.nesting_; }
    NestingGuard(const NestingGuard&) = delete;
    NestingGuard& operator=(const NestingGuard&) = delete;

   private:
    Parser& p_;
  };

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int nesting_ = 0;
  std::vector<std::vector<std::string>> end_stack_;
  std::vector<std::string> tag_stack_;
};

}  // namespace gemmaserve::jinja
