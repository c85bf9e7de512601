// Text exactly as Python prints it: repr() of floats and json.dumps() of strings. Templates,
// tool-call arguments and tokenizer.json files must match what Python-side tools write.
#pragma once

#include <string>
#include <string_view>

namespace gemmaserve {

// repr(float): shortest round-trip digits, "1e-05", "1e+16", "2.0", "-0.0", "nan", "inf".
std::string python_float_repr(double v);

// json.dumps(s)'s escaping without the quotes: \" \\ \n \r \t \b \f, other controls as \u00XX;
// with ensure_ascii every non-ASCII character (and DEL) as \uXXXX (surrogate pairs above the BMP).
// Bytes that are not UTF-8 become U+FFFD (Python strings cannot hold them).
void append_python_json_escaped(std::string& out, std::string_view s, bool ensure_ascii = false);

// The same with the surrounding quotes.
std::string python_json_quote(std::string_view s, bool ensure_ascii = false);

}  // namespace gemmaserve
