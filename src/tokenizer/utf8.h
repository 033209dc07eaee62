// UTF-8 helpers shared by the tokenizers: decoding one code point, encoding, lossy conversion of
// arbitrary bytes (one U+FFFD per maximal invalid subsequence, as Rust's from_utf8_lossy, which
// the Hugging Face tokenizers library uses), and the length of an incomplete trailing character.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace lt::utf8 {

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Length of the valid UTF-8 sequence starting at s[i], or 0 when it is invalid or incomplete.
size_t valid_char_len(std::string_view s, size_t i);
// Length of the invalid bytes at s[i] that from_utf8_lossy replaces by one U+FFFD (>= 1).
size_t invalid_run_len(std::string_view s, size_t i);
// Number of bytes at the end of s that are a proper prefix of a valid multi-byte character.
size_t incomplete_tail_len(std::string_view s);

// Decodes the code point at s[i]; invalid bytes decode as U+FFFD with length 1.
uint32_t decode(std::string_view s, size_t i, size_t* len);
void append(std::string& out, uint32_t cp);
std::string lossy(std::string_view bytes);
bool is_valid(std::string_view s);

// Unicode White_Space (Rust's char::is_whitespace).
bool is_whitespace(uint32_t cp);

}  // namespace lt::utf8
