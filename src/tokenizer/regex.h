// A compiled PCRE2 regular expression (UTF + UCP, so \p{L}, \s etc. are Unicode-aware, as the
// Oniguruma patterns in tokenizer.json expect). Subjects may hold invalid UTF-8 (matched as
// PCRE2_MATCH_INVALID_UTF allows); nothing in a bad subject crashes.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace lt {

class Regex {
 public:
  // Throws lt::Error naming `where` (file and field) when `pattern` does not compile.
  Regex(const std::string& pattern, const std::string& where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Non-overlapping matches [start, end) left to right; an empty match advances one character.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view s) const;

  // Escapes a literal string for use as a pattern.
  static std::string escape(std::string_view literal);

 private:
  void* code_ = nullptr;  // pcre2_code_8*
};

}  // namespace lt
