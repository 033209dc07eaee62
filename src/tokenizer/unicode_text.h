// The Unicode text transforms behind tokenizer.json normalizers, computed with ICU and pinned to
// the Unicode data the Hugging Face `tokenizers` library (v0.2x) was built with, so that ids match
// it on every code point:
//   - NFC / NFD / NFKC / NFKD, StripAccents: tokenizers' unicode-normalization-alignments crate
//     carries Unicode 9.0 tables; characters assigned later pass through unchanged (ICU's
//     FilteredNormalizer2 over [:age=9.0:], which reproduces the crate on all 1,112,064 code
//     points, alone and in combining sequences);
//   - BertNormalizer's control and nonspacing-mark tests: the unicode_categories crate (Unicode 8.0);
//   - Lowercase: Rust's char::to_lowercase, one character at a time (no final-sigma context),
//     Unicode 17.0 (ICU 72 is Unicode 15.0; the few newer case pairs are listed in the .cpp).
// A handful of characters changed General_Category since those versions; unicode_text.cpp's
// sets carry their old values. Bytes that are not valid UTF-8 are not
// characters: every function passes them through unchanged and they end a normalization run.
#pragma once
#include <string>
#include <string_view>

namespace lt::unicode {

enum class NormForm { NFC, NFD, NFKC, NFKD };

std::string normalize(std::string_view s, NormForm form);
// Rust char::to_lowercase per character (full mapping: U+0130 -> "i\u0307").
std::string lowercase(std::string_view s);
// StripAccents: drops combining marks (General_Category M, Unicode 9.0).
std::string strip_accents(std::string_view s);
// Strip: drops leading and/or trailing White_Space characters.
std::string strip(std::string_view s, bool left, bool right);
// Nmt: drops control characters, maps tabs, line breaks, zero-width and a few others to ' '.
std::string nmt(std::string_view s);

// BertNormalizer's steps.
// clean_text: drops U+0000, U+FFFD and controls (Cc, Cf, Co other than \t \n \r), maps White_Space to ' '.
std::string bert_clean_text(std::string_view s);
// handle_chinese_chars: surrounds each CJK ideograph (BERT's ranges) with spaces.
std::string bert_pad_chinese(std::string_view s);
// strip_accents: NFD, then drops nonspacing marks (Mn).
std::string bert_strip_accents(std::string_view s);

}  // namespace lt::unicode
