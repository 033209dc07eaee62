// Python str operations on UTF-8 (see text.h). Case mappings go through ICU's UnicodeString.
#include "tokenizer/jinja/text.h"

#include <unicode/locid.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <algorithm>

#include "tokenizer/jinja/value.h"
#include "tokenizer/utf8.h"

namespace lt::jinja::text {

namespace {

std::vector<uint32_t> decode_all(std::string_view s) {
  std::vector<uint32_t> cps;
  for (size_t i = 0, len = 0; i < s.size(); i += len) cps.push_back(utf8::decode(s, i, &len));
  return cps;
}

std::string encode_all(const std::vector<uint32_t>& cps) {
  std::string out;
  for (uint32_t c : cps) utf8::append(out, c);
  return out;
}

bool in_set(uint32_t c, const std::vector<uint32_t>& set) { return std::find(set.begin(), set.end(), c) != set.end(); }

bool cased(uint32_t c) { return u_hasBinaryProperty(UChar32(c), UCHAR_CASED); }

std::string case_map(std::string_view s, bool up) {
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(icu::StringPiece(s.data(), int32_t(s.size())));
  if (up) u.toUpper(icu::Locale::getRoot());
  else u.toLower(icu::Locale::getRoot());
  std::string out;
  u.toUTF8String(out);
  return out;
}

}  // namespace

bool is_space(uint32_t c) { return utf8::is_whitespace(c) || (c >= 0x1c && c <= 0x1f); }

size_t length(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0, len = 0; i < s.size(); i += len, ++n) utf8::decode(s, i, &len);
  return n;
}

std::vector<size_t> offsets(std::string_view s) {
  std::vector<size_t> o;
  size_t i = 0, len = 0;
  for (; i < s.size(); i += len) {
    o.push_back(i);
    utf8::decode(s, i, &len);
  }
  o.push_back(s.size());
  return o;
}

std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  std::vector<uint32_t> cps = decode_all(s), set;
  if (chars) set = decode_all(*chars);
  auto strip_it = [&](uint32_t c) { return chars ? in_set(c, set) : is_space(c); };
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && strip_it(cps[b])) ++b;
  if (right)
    while (e > b && strip_it(cps[e - 1])) --e;
  return encode_all(std::vector<uint32_t>(cps.begin() + b, cps.begin() + e));
}

std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty()) raise("empty separator");
    size_t start = 0;
    for (size_t p; (maxsplit < 0 || int64_t(out.size()) < maxsplit) && (p = s.find(*sep, start)) != s.npos;
         start = p + sep->size())
      out.emplace_back(s.substr(start, p - start));
    out.emplace_back(s.substr(start));
    return out;
  }
  std::vector<uint32_t> cps = decode_all(s);
  size_t i = 0;
  while (i < cps.size()) {
    while (i < cps.size() && is_space(cps[i])) ++i;
    if (i == cps.size()) break;
    if (maxsplit >= 0 && int64_t(out.size()) == maxsplit) {  // the rest, trailing whitespace kept
      out.push_back(encode_all(std::vector<uint32_t>(cps.begin() + i, cps.end())));
      break;
    }
    size_t j = i;
    while (j < cps.size() && !is_space(cps[j])) ++j;
    out.push_back(encode_all(std::vector<uint32_t>(cps.begin() + i, cps.begin() + j)));
    i = j;
  }
  return out;
}

std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  if (maxsplit < 0) return split(s, sep, maxsplit);
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty()) raise("empty separator");
    size_t end = s.size();
    while (int64_t(out.size()) < maxsplit) {
      size_t p = end >= sep->size() ? s.rfind(*sep, end - sep->size()) : s.npos;
      if (p == s.npos) break;
      out.emplace_back(s.substr(p + sep->size(), end - p - sep->size()));
      end = p;
    }
    out.emplace_back(s.substr(0, end));
    std::reverse(out.begin(), out.end());
    return out;
  }
  std::vector<uint32_t> cps = decode_all(s);
  size_t e = cps.size();
  while (e > 0) {
    while (e > 0 && is_space(cps[e - 1])) --e;
    if (e == 0) break;
    if (int64_t(out.size()) == maxsplit) {  // the rest, leading whitespace kept
      out.push_back(encode_all(std::vector<uint32_t>(cps.begin(), cps.begin() + e)));
      break;
    }
    size_t b = e;
    while (b > 0 && !is_space(cps[b - 1])) --b;
    out.push_back(encode_all(std::vector<uint32_t>(cps.begin() + b, cps.begin() + e)));
    e = b;
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> splitlines(std::string_view s, bool keepends) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i < s.size();) {
    size_t len = 0;
    uint32_t c = utf8::decode(s, i, &len);
    bool brk = c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || (c >= 0x1c && c <= 0x1e) || c == 0x85 ||
               c == 0x2028 || c == 0x2029;
    if (!brk) {
      i += len;
      continue;
    }
    size_t end = i + len;
    if (c == '\r' && end < s.size() && s[end] == '\n') ++end;
    out.emplace_back(s.substr(start, (keepends ? end : i) - start));
    start = i = end;
  }
  if (start < s.size()) out.emplace_back(s.substr(start));
  return out;
}

std::string replace(std::string_view s, std::string_view old, std::string_view with, int64_t count) {
  std::string out;
  int64_t n = 0;
  if (old.empty()) {  // Python inserts `with` before every character and at the end
    std::vector<size_t> o = offsets(s);
    for (size_t k = 0; k + 1 < o.size(); ++k) {
      if (count < 0 || n < count) { out += with; ++n; }
      out.append(s.substr(o[k], o[k + 1] - o[k]));
    }
    if (count < 0 || n < count) out += with;
    return out;
  }
  size_t start = 0;
  for (size_t p; (count < 0 || n < count) && (p = s.find(old, start)) != s.npos; start = p + old.size(), ++n) {
    out.append(s.substr(start, p - start));
    out.append(with);
  }
  out.append(s.substr(start));
  return out;
}

int64_t count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return int64_t(length(s)) + 1;
  int64_t n = 0;
  for (size_t p = s.find(sub); p != s.npos; p = s.find(sub, p + sub.size())) ++n;
  return n;
}

int64_t find(std::string_view s, std::string_view sub, bool reverse) {
  size_t p = reverse ? s.rfind(sub) : s.find(sub);
  return p == s.npos ? -1 : int64_t(length(s.substr(0, p)));
}

std::string upper(std::string_view s) { return case_map(s, true); }
std::string lower(std::string_view s) { return case_map(s, false); }

std::string py_title(std::string_view s) {
  std::string out;
  bool prev_cased = false;
  for (uint32_t c : decode_all(s)) {
    std::string one;
    utf8::append(one, c);
    if (prev_cased) out += lower(one);
    else utf8::append(out, uint32_t(u_totitle(UChar32(c))));
    prev_cased = cased(c);
  }
  return out;
}

std::string py_capitalize(std::string_view s) {
  std::vector<uint32_t> cps = decode_all(s);
  if (cps.empty()) return "";
  std::string out;
  utf8::append(out, uint32_t(u_totitle(UChar32(cps[0]))));
  return out + lower(encode_all(std::vector<uint32_t>(cps.begin() + 1, cps.end())));
}

std::string jinja_title(std::string_view s) {
  // jinja2: "".join(w[0].upper() + w[1:].lower() for w in re.split(r"([-\s({\[<]+)", s) if w)
  auto sep = [](uint32_t c) { return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || is_space(c); };
  std::vector<uint32_t> cps = decode_all(s);
  std::string out;
  for (size_t i = 0; i < cps.size();) {
    size_t j = i;
    bool is_sep = sep(cps[i]);
    while (j < cps.size() && sep(cps[j]) == is_sep) ++j;
    std::string first, rest;
    utf8::append(first, cps[i]);
    rest = encode_all(std::vector<uint32_t>(cps.begin() + i + 1, cps.begin() + j));
    out += upper(first) + lower(rest);
    i = j;
  }
  return out;
}

bool all_of(std::string_view s, bool (*pred)(uint32_t)) {
  if (s.empty()) return false;
  for (uint32_t c : decode_all(s))
    if (!pred(c)) return false;
  return true;
}

bool is_alpha(uint32_t c) { return u_isalpha(UChar32(c)); }
bool is_digit(uint32_t c) { return u_isdigit(UChar32(c)); }
bool is_alnum(uint32_t c) { return is_alpha(c) || u_isdigit(UChar32(c)) || u_getNumericValue(UChar32(c)) != U_NO_NUMERIC_VALUE; }

bool is_lower_cased(std::string_view s) {
  bool any = false;
  for (uint32_t c : decode_all(s)) {
    if (u_isUUppercase(UChar32(c)) || u_istitle(UChar32(c))) return false;
    any = any || u_isULowercase(UChar32(c));
  }
  return any;
}

bool is_upper_cased(std::string_view s) {
  bool any = false;
  for (uint32_t c : decode_all(s)) {
    if (u_isULowercase(UChar32(c)) || u_istitle(UChar32(c))) return false;
    any = any || u_isUUppercase(UChar32(c));
  }
  return any;
}

}  // namespace lt::jinja::text
