// Jinja2's parser: statements (if/for/set/macro/call/filter/with/break/continue and HF's
// generation) and expressions with Jinja's precedence, over the lexer's tokens.
#pragma once

#include <string_view>

#include "tokenizer/chat_template/ast.h"

namespace gemmaserve::jinja {

// Throws TemplateError with the offending line for syntax errors and unknown filters/tests.
Body parse_template(std::string_view source);

}  // namespace gemmaserve::jinja
