// Regular expressions (the common subset of Python's re and xgrammar's regex: literals, '.',
// classes with ranges and negation, \d \w \s and their negations, escapes, groups (capturing,
// (?:) and named), alternation, * + ? {m} {m,} {m,n} with lazy forms read as greedy, ^ and $
// ignored as the match is always whole) compiled into a Grammar rule.
#pragma once

#include <string_view>

#include "engine/structured/grammar.h"

namespace gemmaserve::structured {

// A symbol matching exactly the strings `pattern` matches whole. With `inside_json_string`, the
// matched text is written as JSON string content: '"', '\' and control characters come out
// escaped. Throws InputError naming the unsupported or malformed construct.
Grammar::Symbol compile_regex(Grammar* g, std::string_view pattern,
                              bool inside_json_string = false);

// Sorted, merged ranges; the complement of `r` over all code points.
CodepointRanges normalize_ranges(CodepointRanges r);
CodepointRanges complement_ranges(const CodepointRanges& r);

}  // namespace gemmaserve::structured
