// Jinja2's lexer as configured by Hugging Face (trim_blocks and lstrip_blocks on): data, tags,
// comments, raw blocks and the -/+ whitespace modifiers, producing tokens with line numbers.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gemmaserve::jinja {

enum class TokenType {
  kData,
  kVariableBegin,
  kVariableEnd,
  kBlockBegin,
  kBlockEnd,
  kName,
  kString,
  kInteger,
  kFloat,
  kOperator,
  kEof,
};

struct Token {
  TokenType type = TokenType::kEof;
  std::string text;  // data, name, unescaped string or operator
  int64_t int_value = 0;
  double float_value = 0;
  int line = 1;
};

struct LexerOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
  bool keep_trailing_newline = false;
};

// Throws TemplateError (with its line) for malformed input.
std::vector<Token> tokenize(std::string_view source, const LexerOptions& options = {});

}  // namespace gemmaserve::jinja
