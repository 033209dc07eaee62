// UTF-8 decoding/encoding and the lossy conversion rules of Rust's String::from_utf8_lossy
// (W3C/Unicode "maximal subpart" practice), which decides how many U+FFFD a broken byte run gives.
#include "tokenizer/utf8.h"

namespace lt::utf8 {

namespace {
// Range the second byte must fall in for lead byte b (continuation bytes 0x80..0xBF otherwise).
bool second_ok(uint8_t lead, uint8_t b) {
  switch (lead) {
    case 0xE0: return b >= 0xA0 && b <= 0xBF;
    case 0xED: return b >= 0x80 && b <= 0x9F;
    case 0xF0: return b >= 0x90 && b <= 0xBF;
    case 0xF4: return b >= 0x80 && b <= 0x8F;
    default: return b >= 0x80 && b <= 0xBF;
  }
}
size_t width(uint8_t b) {
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) return 2;
  if (b >= 0xE0 && b <= 0xEF) return 3;
  if (b >= 0xF0 && b <= 0xF4) return 4;
  return 0;
}
// Number of bytes at s[i] that form a valid prefix of a character (possibly complete).
size_t valid_prefix(std::string_view s, size_t i, size_t* w) {
  uint8_t lead = static_cast<uint8_t>(s[i]);
  *w = width(lead);
  if (*w <= 1) return *w;
  size_t n = 1;
  while (n < *w && i + n < s.size()) {
    uint8_t b = static_cast<uint8_t>(s[i + n]);
    bool ok = n == 1 ? second_ok(lead, b) : (b >= 0x80 && b <= 0xBF);
    if (!ok) break;
    ++n;
  }
  return n;
}
}  // namespace

size_t valid_char_len(std::string_view s, size_t i) {
  size_t w = 0;
  size_t n = valid_prefix(s, i, &w);
  return (w != 0 && n == w) ? w : 0;
}

size_t invalid_run_len(std::string_view s, size_t i) {
  size_t w = 0;
  size_t n = valid_prefix(s, i, &w);
  return n == 0 ? 1 : n;
}

size_t incomplete_tail_len(std::string_view s) {
  for (size_t back = 1; back <= 3 && back <= s.size(); ++back) {
    size_t i = s.size() - back;
    uint8_t b = static_cast<uint8_t>(s[i]);
    if ((b & 0xC0) == 0x80) continue;  // continuation: look further back
    size_t w = 0;
    size_t n = valid_prefix(s, i, &w);
    return (w > back && n == back) ? back : 0;
  }
  return 0;
}

uint32_t decode(std::string_view s, size_t i, size_t* len) {
  size_t n = valid_char_len(s, i);
  if (n == 0) {
    *len = 1;
    return 0xFFFD;
  }
  *len = n;
  const auto* p = reinterpret_cast<const uint8_t*>(s.data() + i);
  switch (n) {
    case 1: return p[0];
    case 2: return ((p[0] & 0x1Fu) << 6) | (p[1] & 0x3Fu);
    case 3: return ((p[0] & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu);
    default: return ((p[0] & 0x07u) << 18) | ((p[1] & 0x3Fu) << 12) | ((p[2] & 0x3Fu) << 6) | (p[3] & 0x3Fu);
  }
}

void append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  while (i < bytes.size()) {
    size_t n = valid_char_len(bytes, i);
    if (n > 0) {
      out.append(bytes.substr(i, n));
      i += n;
    } else {
      out += kReplacement;
      i += invalid_run_len(bytes, i);
    }
  }
  return out;
}

bool is_valid(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    size_t n = valid_char_len(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

bool is_whitespace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

}  // namespace lt::utf8
