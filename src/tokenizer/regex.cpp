// PCRE2 wrapper for the Split pre-tokenizer, ByteLevel's GPT-2 pattern and Replace normalizers.
// Patterns are compiled as written (so errors point into them), then with \s and \S rewritten to
// Oniguruma's meaning (without U+180E) when they use them.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex.h"

#include <pcre2.h>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace lt {

namespace {

constexpr uint32_t kOptions = PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF;

pcre2_code* compile(const std::string& pattern, const std::string& where) {
  int err = 0;
  PCRE2_SIZE erroff = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), kOptions, &err, &erroff, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    fail("{}: regex '{}' does not compile at offset {}: {}", where, excerpt(pattern), erroff, reinterpret_cast<char*>(msg));
  }
  return code;
}

// The character class starting at p[i] == '[': its end (one past ']') and whether it holds an
// unescaped \s / \S. POSIX names ([:alpha:]) are skipped; a ']' first in the class is literal.
struct ClassScan {
  size_t end = std::string::npos;
  bool negated = false, has_s = false, has_S = false;
};
ClassScan scan_class(const std::string& p, size_t i) {
  ClassScan c;
  size_t j = i + 1;
  if (j < p.size() && p[j] == '^') c.negated = true, ++j;
  if (j < p.size() && p[j] == ']') ++j;
  while (j < p.size()) {
    if (p[j] == '\\' && j + 1 < p.size()) {
      c.has_s |= p[j + 1] == 's';
      c.has_S |= p[j + 1] == 'S';
      j += 2;
    } else if (p.compare(j, 2, "[:") == 0) {
      size_t close = p.find(":]", j + 2);
      j = close == std::string::npos ? p.size() : close + 2;
    } else if (p[j] == ']') {
      c.end = j + 1;
      return c;
    } else {
      ++j;
    }
  }
  return c;  // unterminated: PCRE2 has rejected it already
}

}  // namespace

// PCRE2 counts U+180E MONGOLIAN VOWEL SEPARATOR as \s (its \h list predates Unicode 6.3);
// Oniguruma, which tokenizers uses, does not. Outside a class \s becomes [^\S\x{180E}] and \S
// [\S\x{180E}]; a class holding \s (or \S) is wrapped so that U+180E leaves it (or joins it).
// Exact unless another member of such a class also covers U+180E (\p{Cf}, a range over it).
std::string onig_whitespace_pattern(const std::string& p) {
  std::string out;
  for (size_t i = 0; i < p.size();) {
    if (p.compare(i, 2, "\\Q") == 0) {  // literal text up to \E
      size_t e = p.find("\\E", i + 2);
      size_t end = e == std::string::npos ? p.size() : e + 2;
      out.append(p, i, end - i);
      i = end;
    } else if (p[i] == '\\' && i + 1 < p.size()) {
      if (p[i + 1] == 's') out += "[^\\S\\x{180E}]";
      else if (p[i + 1] == 'S') out += "[\\S\\x{180E}]";
      else out.append(p, i, 2);
      i += 2;
    } else if (p[i] == '[') {
      ClassScan c = scan_class(p, i);
      if (c.end == std::string::npos) return p;
      std::string cls = p.substr(i, c.end - i);
      if (c.has_s == c.has_S) out += cls;  // neither (or both: the class is all or nothing anyway)
      else if (c.has_s != c.negated) out += "(?:(?!\\x{180E})" + cls + ")";  // U+180E leaves the set
      else out += "(?:" + cls + "|\\x{180E})";                               // U+180E joins the set
      i = c.end;
    } else {
      out += p[i++];
    }
  }
  return out;
}

Regex::Regex(const std::string& pattern, const std::string& where) {
  pcre2_code* code = compile(pattern, where);
  const std::string onig = onig_whitespace_pattern(pattern);
  if (onig != pattern) {
    pcre2_code_free(code);
    code = compile(onig, where + " (\\s rewritten as Oniguruma's)");
  }
  code_ = code;
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // optional speed-up
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view s) const {
  std::vector<std::pair<size_t, size_t>> out;
  auto* code = static_cast<pcre2_code*>(code_);
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
  LT_ASSERT(md != nullptr);
  size_t pos = 0;
  while (pos <= s.size()) {
    int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), pos, 0, md, nullptr);
    if (rc < 0) break;  // PCRE2_ERROR_NOMATCH or a match-limit error: no more matches
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    size_t a = ov[0], b = ov[1];
    if (b < a) break;  // \K tricks; not used by tokenizer patterns
    if (a == b) {
      if (a >= s.size()) break;
      size_t len = 1;
      utf8::decode(s, a, &len);
      pos = a + len;
      continue;  // empty matches split nothing
    }
    out.emplace_back(a, b);
    pos = b;
  }
  pcre2_match_data_free(md);
  return out;
}

std::string Regex::escape(std::string_view literal) {
  std::string out;
  for (char c : literal) {
    if (std::string_view("\\^$.|?*+()[]{}-/#&~ \t\n").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

}  // namespace lt
