// Python's str operations on UTF-8 text, as chat templates call them (str methods and jinja2
// filters): lengths and indices count code points; whitespace is str.isspace(); upper / lower
// use Unicode's full case mappings (ICU, root locale) as Python does.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lt::jinja::text {

bool is_space(uint32_t cp);  // Python str.isspace() for one character
size_t length(std::string_view s);  // code points
// Byte offsets of each code point's start, with s.size() appended (n + 1 entries).
std::vector<size_t> offsets(std::string_view s);

// str.strip / lstrip / rstrip: `chars` absent strips whitespace, else any of its characters.
std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
// str.split / rsplit: `sep` absent splits on whitespace runs (no empty parts); maxsplit < 0: all.
std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> splitlines(std::string_view s, bool keepends);
// str.replace; count < 0: all.
std::string replace(std::string_view s, std::string_view old, std::string_view with, int64_t count);
int64_t count(std::string_view s, std::string_view sub);
int64_t find(std::string_view s, std::string_view sub, bool reverse);  // code point index, -1 if absent

std::string upper(std::string_view s);
std::string lower(std::string_view s);
std::string py_title(std::string_view s);       // str.title()
std::string py_capitalize(std::string_view s);  // str.capitalize()
std::string jinja_title(std::string_view s);    // the `title` filter (words split at -, space, ( { [ <)
bool all_of(std::string_view s, bool (*pred)(uint32_t));  // non-empty and pred holds for each
bool is_alpha(uint32_t cp);
bool is_digit(uint32_t cp);
bool is_alnum(uint32_t cp);
bool is_lower_cased(std::string_view s);  // str.islower()
bool is_upper_cased(std::string_view s);  // str.isupper()

}  // namespace lt::jinja::text
