// xgrammar's EBNF (GBNF-like) -> Grammar: `name ::= alternatives` rules (newlines or ';' may
// separate them), "strings" and 'strings' with escapes, [character classes] (ranges, ^, escapes),
// '.', rule references, ( groups ), alternation |, postfix * + ? {m} {m,} {m,n}, # comments. The
// grammar starts at `root`. Lookahead assertions and other syntax are an InputError.
#pragma once

#include <string_view>

#include "engine/structured/grammar.h"

namespace gemmaserve::structured {

void compile_ebnf(Grammar* g, std::string_view text);

}  // namespace gemmaserve::structured
