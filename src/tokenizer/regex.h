// A compiled PCRE2 regular expression (UTF + UCP, so \p{L}, \s etc. are Unicode-aware, as the
// Oniguruma patterns in tokenizer.json expect). Subjects may hold invalid UTF-8 (matched as
// PCRE2_MATCH_INVALID_UTF allows); nothing in a bad subject crashes.
//
// Why PCRE2 and not Oniguruma, the engine tokenizers itself uses (measured for issue #18):
// tokenizers 0.23 bundles an Oniguruma with Unicode 16 tables; Debian 12 has PCRE2 10.42 and
// Oniguruma 6.9.8 (libonig-dev), both with Unicode 14 tables. Over all 1,112,064 code points,
// against tokenizers' own Split pre-tokenizer (one code point per subject):
//   \p{L}: PCRE2 9,272 code points differ, Oniguruma 6.9.8 the same 9,272 (letters of Unicode
//          15.0-16.0: CJK extensions H and I, Garay, Kawi, ...);
//   \p{N}: PCRE2 120 differ, Oniguruma 6.9.8 the same 120 (Unicode 15-16 digits);
//   \s, \S: PCRE2 1 (U+180E), Oniguruma 6.9.8 none.
// Speed on one thread, 4.0 MB of English + CJK / Cyrillic / Arabic / Devanagari / emoji text,
// thread CPU seconds, best of 5, identical splits from both engines (standalone programs on
// libpcre2-8 and libonig; for the whole encode, lt_tokenizer linked with an Oniguruma lt::Regex):
//   find_all alone: Llama 3 pattern PCRE2-JIT 0.055 s, Oniguruma 0.166 s (3.0x); GPT-2 0.055 s
//   vs 0.167 s (3.0x); Qwen2 0.056 s vs 0.160 s (2.9x). PCRE2 with \s rewritten: 0.050-0.054 s;
//   whole encode (byte-level BPE of 8,000 tokens, Llama 3 split, 36,829 lines): PCRE2 0.30 s,
//   Oniguruma 0.42-0.49 s (1.4-1.6x slower); tokenizers 0.23.3 encode() per line, one thread:
//   1.34 s.
// So Oniguruma from Debian closes only the U+180E difference and costs 40-60% of the tokenizer's
// speed: leantune keeps PCRE2 and closes the U+180E difference by rewriting \s / \S
// (onig_whitespace_pattern below). Letters and digits newer than Unicode 14 still split
// differently until Debian's PCRE2 carries newer tables.
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

// `pattern` with \s and \S meaning what they mean in Oniguruma: U+180E is not whitespace (PCRE2
// counts it). Exact unless a class holding \s or \S has another member covering U+180E.
std::string onig_whitespace_pattern(const std::string& pattern);

}  // namespace lt
