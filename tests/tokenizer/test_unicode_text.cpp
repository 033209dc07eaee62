// The tokenizer.json normalizer functions (src/tokenizer/unicode_text.h) on hand-checked cases:
// the four Unicode forms (composition, canonical reordering, compatibility mappings, Hangul),
// the Unicode 9.0 pinning tokenizers has, invalid UTF-8 passing through, Lowercase as Rust does
// it, Strip, StripAccents, Nmt, BertNormalizer's steps; and normalizers built from JSON in a
// tokenizer (errors naming unsupported types). Parity with `tokenizers` on generated text is in
// tests/python/test_normalizer_parity.py.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/hf_components.h"
#include "tokenizer/unicode_text.h"

namespace {

using lt::unicode::NormForm;
using nlohmann::json;

std::string nfc(std::string_view s) { return lt::unicode::normalize(s, NormForm::NFC); }
std::string nfd(std::string_view s) { return lt::unicode::normalize(s, NormForm::NFD); }
std::string nfkc(std::string_view s) { return lt::unicode::normalize(s, NormForm::NFKC); }
std::string nfkd(std::string_view s) { return lt::unicode::normalize(s, NormForm::NFKD); }

TEST(UnicodeText, ComposesAndDecomposes) {
  EXPECT_EQ(nfc("cafe\u0301"), "caf\u00e9");
  EXPECT_EQ(nfd("caf\u00e9"), "cafe\u0301");
  EXPECT_EQ(nfc("\u212a"), "K");          // KELVIN SIGN: a singleton canonical decomposition
  EXPECT_EQ(nfc("\u2126"), "\u03a9");     // OHM SIGN -> GREEK CAPITAL OMEGA
  EXPECT_EQ(nfd("\uac01"), "\u1100\u1161\u11a8");  // Hangul syllable GAG, algorithmically
  EXPECT_EQ(nfc("\u1100\u1161\u11a8"), "\uac01");
  EXPECT_EQ(nfc("\u1100\u1161"), "\uac00");
  EXPECT_EQ(nfc("plain ascii"), "plain ascii");
  EXPECT_EQ(nfc(""), "");
}

TEST(UnicodeText, ReordersCombiningMarks) {
  // U+0301 (class 230) and U+0323 (class 220) in either order: NFD sorts them, NFC composes the
  // dot below first.
  EXPECT_EQ(nfd("a\u0301\u0323"), "a\u0323\u0301");
  EXPECT_EQ(nfc("a\u0301\u0323"), "\u1ea1\u0301");
  EXPECT_EQ(nfc("\u1e9b\u0323"), "\u1e9b\u0323");  // the UAX #15 example
  EXPECT_EQ(nfkc("\u1e9b\u0323"), "\u1e69");
  EXPECT_EQ(nfkd("\u1e9b\u0323"), "s\u0323\u0307");
}

TEST(UnicodeText, CompatibilityForms) {
  EXPECT_EQ(nfkc("\ufb01"), "fi");                 // ligature
  EXPECT_EQ(nfkc("\uff21\uff22\uff11"), "AB1");    // full-width
  EXPECT_EQ(nfkc("\u2460"), "1");                  // circled digit
  EXPECT_EQ(nfkc("x\u00b2"), "x2");
  EXPECT_EQ(nfkd("\u01c5"), "Dz\u030c");
  EXPECT_EQ(nfc("\ufb01"), "\ufb01");              // canonical forms keep it
  EXPECT_EQ(nfkc("\uff76\uff9e"), "\u30ac");       // half-width katakana KA + voiced mark
}

TEST(UnicodeText, PinnedToUnicode9AsTokenizers) {
  // DIVES AKURU VOWEL SIGN O (Unicode 13.0) = U+11935 U+11930 canonically; tokenizers' tables
  // predate it, so it neither composes nor decomposes.
  EXPECT_EQ(nfc("\U00011935\U00011930"), "\U00011935\U00011930");
  EXPECT_EQ(nfd("\U00011938"), "\U00011938");
  EXPECT_EQ(nfkc("\U0001F16C"), "\U0001F16C");  // RAISED MR SIGN (Unicode 12.0) stays
  EXPECT_EQ(nfkc("\U0001F16A"), "MC");          // RAISED MC SIGN (Unicode 6.1) maps
}

TEST(UnicodeText, InvalidBytesPassThrough) {
  EXPECT_EQ(nfc("e\xff\u0301"), "e\xff\u0301");  // the bad byte ends the run: nothing composes across it
  EXPECT_EQ(nfc("e\u0301\xc3"), "\u00e9\xc3");    // truncated trailing character kept as bytes
  EXPECT_EQ(lt::unicode::lowercase("A\x80Z"), "a\x80z");
  EXPECT_EQ(lt::unicode::strip(" \xff ", true, true), "\xff");
}

TEST(UnicodeText, LowercaseAsRustCharToLowercase) {
  EXPECT_EQ(lt::unicode::lowercase("HeLLo \u00c0\u00c9"), "hello \u00e0\u00e9");
  EXPECT_EQ(lt::unicode::lowercase("\u0130"), "i\u0307");     // full mapping
  EXPECT_EQ(lt::unicode::lowercase("\u039f\u03a3"), "\u03bf\u03c3");  // no final sigma
  EXPECT_EQ(lt::unicode::lowercase("\u212a"), "k");
  EXPECT_EQ(lt::unicode::lowercase("\U00010D50"), "\U00010D70");  // Garay (Unicode 16.0)
  EXPECT_EQ(lt::unicode::lowercase("\u00df\u4e2d"), "\u00df\u4e2d");
}

TEST(UnicodeText, StripAndAccents) {
  EXPECT_EQ(lt::unicode::strip("\t \u3000x y\u2003 \n", true, true), "x y");
  EXPECT_EQ(lt::unicode::strip("  x  ", true, false), "x  ");
  EXPECT_EQ(lt::unicode::strip("  x  ", false, true), "  x");
  EXPECT_EQ(lt::unicode::strip(" \u00a0 ", true, true), "");
  EXPECT_EQ(lt::unicode::strip_accents("e\u0301\u0304\u0304o"), "eo");
  EXPECT_EQ(lt::unicode::strip_accents("caf\u00e9"), "caf\u00e9");  // precomposed: nothing to strip
  EXPECT_EQ(lt::unicode::strip_accents("\u0915\u093f"), "\u0915");   // Devanagari vowel sign (Mc)
  EXPECT_EQ(lt::unicode::strip_accents("a\u1cf2"), "a");              // a mark in Unicode 9.0
  EXPECT_EQ(lt::unicode::strip_accents("a\U000111C9"), "a\U000111C9");  // not yet a mark then
}

TEST(UnicodeText, Nmt) {
  EXPECT_EQ(lt::unicode::nmt("\x01" "a\tb\u200bc\r\nd\x7f" "e\ufeff"), "a b c  de ");
}

TEST(UnicodeText, BertSteps) {
  EXPECT_EQ(lt::unicode::bert_clean_text(std::string("a\0b", 3) + "\ufffd\u200dc\td\u3000e\x1f"), "abc d e");
  EXPECT_EQ(lt::unicode::bert_clean_text("\ue000x"), "x");  // private use is a control here
  EXPECT_EQ(lt::unicode::bert_pad_chinese("a\u4e2db\U00020000"), "a \u4e2d b \U00020000 ");
  EXPECT_EQ(lt::unicode::bert_pad_chinese("\u3042"), "\u3042");  // hiragana is not padded
  EXPECT_EQ(lt::unicode::bert_strip_accents("\u00dcn\u00efc\u00f6d\u00e9"), "Unicode");
  EXPECT_EQ(lt::unicode::bert_strip_accents("\u0915\u093f"), "\u0915\u093f");  // Mc is kept
}

std::string normalized(const json& spec, std::string s) {
  auto n = lt::hf::make_normalizer(spec, "tok.json");
  n->normalize(s);
  return s;
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const lt::Error& e) {
    return e.what();
  }
  return "<no lt::Error>";
}

TEST(HfNormalizers, BuiltFromJson) {
  EXPECT_EQ(normalized({{"type", "NFC"}}, "cafe\u0301"), "caf\u00e9");
  EXPECT_EQ(normalized({{"type", "NFKD"}}, "\ufb01"), "fi");
  json seq = {{"type", "Sequence"},
              {"normalizers", json::array({{{"type", "NFKD"}}, {{"type", "StripAccents"}}, {{"type", "Lowercase"}},
                                           {{"type", "Strip"}, {"strip_left", true}, {"strip_right", false}}})}};
  EXPECT_EQ(normalized(seq, "  R\u00c9SUM\u00c9  "), "resume  ");
  json bert = {{"type", "BertNormalizer"}, {"clean_text", true}, {"handle_chinese_chars", true},
               {"strip_accents", nullptr}, {"lowercase", true}};
  EXPECT_EQ(normalized(bert, "H\u00e9llo\t\u4e16"), "hello  \u4e16 ");
  json bert_keep = bert;
  bert_keep["strip_accents"] = false;
  EXPECT_EQ(normalized(bert_keep, "H\u00e9"), "h\u00e9");
  EXPECT_EQ(normalized({{"type", "ByteLevel"}}, "a \u00e9"), "a\u0120\u00c3\u00a9");
  EXPECT_EQ(normalized({{"type", "Prepend"}, {"prepend", "_"}}, "x"), "_x");
  EXPECT_EQ(normalized({{"type", "Prepend"}, {"prepend", "_"}}, ""), "");
  json repl = {{"type", "Replace"}, {"pattern", {{"Regex", "\\s+"}}}, {"content", "-"}};
  EXPECT_EQ(normalized(repl, "a  b\tc"), "a-b-c");
}

TEST(HfNormalizers, UnsupportedTypesAreNamed) {
  std::string e = error_of([] { lt::hf::make_normalizer({{"type", "Precompiled"}, {"precompiled_charsmap", ""}}, "t.json"); });
  EXPECT_NE(e.find("t.json"), std::string::npos) << e;
  EXPECT_NE(e.find("Precompiled"), std::string::npos) << e;
  EXPECT_NE(e.find("NFKC"), std::string::npos) << e;  // the supported list
  e = error_of([] { lt::hf::make_normalizer({{"type", "Sequence"}, {"normalizers", {{{"type", "Nope"}}}}}, "t.json"); });
  EXPECT_NE(e.find("unsupported normalizer type 'Nope'"), std::string::npos) << e;
  e = error_of([] { lt::hf::make_normalizer({{"type", "Strip"}, {"strip_left", "yes"}}, "t.json"); });
  EXPECT_NE(e.find("strip_left"), std::string::npos) << e;
}

}  // namespace
