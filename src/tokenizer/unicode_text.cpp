// ICU-backed Unicode transforms for the tokenizer.json normalizers (see unicode_text.h). The
// character sets are built once from ICU property patterns restricted by Unicode age, and frozen
// (read-only, safe to share between threads).
#include "tokenizer/unicode_text.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/uniset.h>

#include <array>
#include <memory>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace lt::unicode {

namespace {

icu::UnicodeSet make_set(const char* pattern) {
  UErrorCode err = U_ZERO_ERROR;
  icu::UnicodeSet set(icu::UnicodeString(pattern, -1, US_INV), err);
  LT_CHECK(U_SUCCESS(err), "ICU cannot build the character set {}: {} (is the ICU data library installed?)", pattern,
           u_errorName(err));
  return set;
}

struct Tables {
  icu::UnicodeSet unicode9;     // characters assigned in Unicode 9.0 (tokenizers' normalization tables)
  icu::UnicodeSet marks9;       // General_Category M as of Unicode 9.0 (StripAccents)
  icu::UnicodeSet controls8;    // Cc, Cf, Co as of Unicode 8.0 (BertNormalizer clean_text)
  icu::UnicodeSet nonspacing8;  // Mn as of Unicode 8.0 (BertNormalizer strip_accents)
  std::array<std::unique_ptr<icu::FilteredNormalizer2>, 4> norm;

  Tables()
      : unicode9(make_set("[:age=9.0:]")),
        marks9(make_set("[[:M:]&[:age=9.0:]]")),
        controls8(make_set("[[[:Cc:][:Cf:][:Co:]]&[:age=8.0:]]")),
        nonspacing8(make_set("[[:Mn:]&[:age=8.0:]]")) {
    // General_Category values that changed after those versions (ICU 72 carries Unicode 15.0):
    // U+1CF2..U+1CF3 VEDIC SIGN ARDHAVISARGA were Mc (now Lo); U+111C9 SHARADA SANDHI MARK was Po
    // (now Mn); U+1734 HANUNOO SIGN PAMUDPOD was Mn (now Mc); U+1885..U+1886 MONGOLIAN ALI GALI
    // BALUDA were Lo (now Mn); U+A9BD JAVANESE CONSONANT SIGN KERET was Mc (now Mn).
    marks9.add(0x1CF2, 0x1CF3).remove(0x111C9).freeze();
    nonspacing8.add(0x1734).remove(0x1885, 0x1886).remove(0xA9BD).remove(0x111C9).freeze();
    unicode9.freeze();
    controls8.freeze();
    UErrorCode err = U_ZERO_ERROR;
    const icu::Normalizer2* base[4] = {icu::Normalizer2::getNFCInstance(err), icu::Normalizer2::getNFDInstance(err),
                                       icu::Normalizer2::getNFKCInstance(err), icu::Normalizer2::getNFKDInstance(err)};
    LT_CHECK(U_SUCCESS(err), "ICU has no Unicode normalization data: {}", u_errorName(err));
    for (int i = 0; i < 4; ++i) norm[i] = std::make_unique<icu::FilteredNormalizer2>(*base[i], unicode9);
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

bool is_ascii(std::string_view s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

// Calls f(cp, out) for each valid character of s; invalid bytes are copied to out unchanged.
template <class F>
std::string map_chars(std::string_view s, F&& f) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t len = utf8::valid_char_len(s, i);
    if (len == 0) {
      size_t bad = utf8::invalid_run_len(s, i);
      out.append(s.substr(i, bad));
      i += bad;
      continue;
    }
    f(utf8::decode(s, i, &len), out);
    i += len;
  }
  return out;
}

// Length of the run of valid UTF-8 characters at s[i].
size_t valid_run(std::string_view s, size_t i) {
  size_t j = i;
  while (j < s.size()) {
    size_t len = utf8::valid_char_len(s, j);
    if (len == 0) break;
    j += len;
  }
  return j - i;
}

// Lowercase pairs of Unicode 16.0 and 17.0, which Rust's tables (tokenizers' Lowercase) carry and
// ICU 72 (Unicode 15.0) does not know: used only where ICU maps the character to itself.
uint32_t newer_lowercase(uint32_t c) {
  if (c >= 0x10D50 && c <= 0x10D65) return c + 0x20;  // Garay
  if (c >= 0x16EA0 && c <= 0x16EB8) return c + 0x1B;  // Beria Erfe
  switch (c) {
    case 0x1C89: return 0x1C8A;  // Cyrillic TJE
    case 0xA7CB: return 0x0264;
    case 0xA7CC: return 0xA7CD;
    case 0xA7CE: return 0xA7CF;
    case 0xA7D2: return 0xA7D3;
    case 0xA7D4: return 0xA7D5;
    case 0xA7DA: return 0xA7DB;
    case 0xA7DC: return 0x019B;
    default: return c;
  }
}

}  // namespace

std::string normalize(std::string_view s, NormForm form) {
  if (is_ascii(s)) return std::string(s);  // ASCII is invariant under all four forms
  const icu::Normalizer2& n = *tables().norm[static_cast<int>(form)];
  std::string out;
  out.reserve(s.size() + s.size() / 4);
  icu::StringByteSink<std::string> sink(&out);
  for (size_t i = 0; i < s.size();) {
    if (size_t run = valid_run(s, i)) {
      UErrorCode err = U_ZERO_ERROR;
      n.normalizeUTF8(0, icu::StringPiece(s.data() + i, int32_t(run)), sink, nullptr, err);
      LT_CHECK(U_SUCCESS(err), "Unicode normalization failed: {}", u_errorName(err));
      i += run;
    } else {
      size_t bad = utf8::invalid_run_len(s, i);
      out.append(s.substr(i, bad));
      i += bad;
    }
  }
  return out;
}

std::string lowercase(std::string_view s) {
  return map_chars(s, [](uint32_t cp, std::string& out) {
    if (cp < 0x80) {
      out += char(cp >= 'A' && cp <= 'Z' ? cp + 32 : cp);
    } else if (cp == 0x130) {  // the one unconditional SpecialCasing lowercase mapping
      out += "i\xCC\x87";
    } else {
      uint32_t lower = uint32_t(u_tolower(UChar32(cp)));
      utf8::append(out, lower != cp ? lower : newer_lowercase(cp));
    }
  });
}

std::string strip_accents(std::string_view s) {
  const auto& marks = tables().marks9;
  return map_chars(s, [&](uint32_t cp, std::string& out) {
    if (!marks.contains(UChar32(cp))) utf8::append(out, cp);
  });
}

std::string strip(std::string_view s, bool left, bool right) {
  size_t a = 0;
  while (left && a < s.size()) {
    size_t len = utf8::valid_char_len(s, a);
    if (len == 0 || !utf8::is_whitespace(utf8::decode(s, a, &len))) break;
    a += len;
  }
  size_t b = s.size();
  if (right) {  // the end of the last character that is not whitespace
    b = a;
    for (size_t i = a; i < s.size();) {
      size_t len = utf8::valid_char_len(s, i);
      bool ws = len > 0 && utf8::is_whitespace(utf8::decode(s, i, &len));
      i += len > 0 ? len : utf8::invalid_run_len(s, i);
      if (!ws) b = i;
    }
  }
  return std::string(s.substr(a, b - a));
}

std::string nmt(std::string_view s) {
  return map_chars(s, [](uint32_t c, std::string& out) {
    if ((c >= 0x1 && c <= 0x8) || c == 0xB || (c >= 0xE && c <= 0x1F) || c == 0x7F || c == 0x8F || c == 0x9F) return;
    bool space = c == 0x9 || c == 0xA || c == 0xC || c == 0xD || c == 0x1680 || (c >= 0x200B && c <= 0x200F) ||
                 c == 0x2028 || c == 0x2029 || c == 0x2581 || c == 0xFEFF || c == 0xFFFD;
    utf8::append(out, space ? uint32_t(' ') : c);
  });
}

std::string bert_clean_text(std::string_view s) {
  const auto& controls = tables().controls8;
  return map_chars(s, [&](uint32_t c, std::string& out) {
    const bool tab_or_break = c == '\t' || c == '\n' || c == '\r';
    if (c == 0 || c == 0xFFFD || (!tab_or_break && controls.contains(UChar32(c)))) return;
    utf8::append(out, tab_or_break || utf8::is_whitespace(c) ? uint32_t(' ') : c);
  });
}

std::string bert_pad_chinese(std::string_view s) {
  return map_chars(s, [](uint32_t c, std::string& out) {
    bool cjk = (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
               (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
               (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
    if (cjk) out += ' ';
    utf8::append(out, c);
    if (cjk) out += ' ';
  });
}

std::string bert_strip_accents(std::string_view s) {
  const auto& mn = tables().nonspacing8;
  return map_chars(normalize(s, NormForm::NFD), [&](uint32_t cp, std::string& out) {
    if (!mn.contains(UChar32(cp))) utf8::append(out, cp);
  });
}

}  // namespace lt::unicode
