// Python str methods over UTF-8 (code point indexing, Unicode whitespace, case mapping for Latin,
// Greek and Cyrillic) so templates see the strings Python would.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gemmaserve::jinja {

std::u32string decode_utf8(std::string_view s);
std::string encode_utf8(std::u32string_view s);
size_t code_point_count(std::string_view s);

// str.isspace() for one code point.
bool is_py_space(char32_t c);
char32_t to_upper(char32_t c);
char32_t to_lower(char32_t c);
bool is_cased_upper(char32_t c);
bool is_cased_lower(char32_t c);

// str.strip/lstrip/rstrip with `chars` (None: whitespace).
std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                     bool right);
std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
std::string py_title(std::string_view s);       // str.title()
std::string py_capitalize(std::string_view s);  // str.capitalize()
// str.split(sep, maxsplit) / str.rsplit(...); sep None splits on whitespace runs.
std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep,
                                  int64_t maxsplit, bool from_right);
std::vector<std::string> py_splitlines(std::string_view s, bool keepends);
std::string py_replace(std::string_view s, std::string_view old_text, std::string_view new_text,
                       int64_t count);
// Number of non-overlapping occurrences (str.count); "" occurs len+1 times.
int64_t py_count(std::string_view s, std::string_view sub);

}  // namespace gemmaserve::jinja
