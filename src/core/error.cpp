// Always-on internal assertion failure (prints the expression with file:line and aborts), and the
// excerpt() helper that cuts user-provided text to a short printable form for messages.
#include "core/error.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace lt {

namespace {

// Length of the valid UTF-8 sequence starting at s[i] (1-4), or 0 when it is not valid
// (overlong forms, surrogates and code points past U+10FFFF are invalid, as in RFC 3629).
size_t utf8_sequence_len(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t c = b(i);
  if (c < 0x80) return 1;
  size_t n = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k)
    if ((b(i + k) & 0xC0) != 0x80) return 0;
  const uint8_t c1 = b(i + 1);
  if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 > 0x9F) || (c == 0xF0 && c1 < 0x90) || (c == 0xF4 && c1 > 0x8F))
    return 0;
  return n;
}

}  // namespace

std::string excerpt(std::string_view text, size_t max_chars) {
  std::string out;
  size_t chars = 0, i = 0;
  while (i < text.size() && chars < max_chars) {
    const uint8_t c = static_cast<uint8_t>(text[i]);
    const size_t n = utf8_sequence_len(text, i);
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else if (c < 0x20 || c == 0x7F || n == 0) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    } else {
      out.append(text.substr(i, n));
      i += n;
      ++chars;
      continue;
    }
    ++i;
    ++chars;
  }
  if (i < text.size()) out += "\xE2\x80\xA6";  // …
  return out;
}

void assert_fail(const char* expr, const char* file, int line, const std::string& msg) {
  std::fprintf(stderr, "leantune: internal error: %s:%d: assertion '%s' failed %s\n", file, line, expr,
               msg.c_str());
  std::abort();
}

}  // namespace lt
