// JSON parsing for every file leantune reads (config.json, safetensors headers, tokenizer.json,
// tokenizer_config.json, adapter_config.json, JSONL data lines, run state): nesting depth bounded
// before parsing, parse errors as lt::Error naming the file with the line, column and a short
// excerpt of the text there, and json_excerpt() to print a value back in a message.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace lt {

// Deepest nesting of arrays/objects accepted. The files leantune reads nest at most ~6 levels
// (a tokenizer.json normalizer Sequence inside "normalizer"; a chat JSONL line is 3), so 64 is
// ten times what a real file needs. Anything deeper is not one of them, and the code that walks
// or prints a value (nlohmann's dump(), copies and comparisons, the tokenizer's Sequence
// builders) recurses once per level: 100,000 levels overflow the stack. 64 levels cost a few KB.
inline constexpr int kMaxJsonDepth = 64;

// Parses `text` as one JSON value. `what` names the source in errors (a path, "path:line 3";
// empty: no prefix). lt::Error when the text is not JSON or nests deeper than kMaxJsonDepth.
nlohmann::json parse_json(std::string_view text, const std::string& what);

// read_text_file(path), then parse_json naming the path.
nlohmann::json load_json_file(const std::string& path);

// A value as compact JSON cut to a short excerpt (lt::excerpt), for messages that print it back.
std::string json_excerpt(const nlohmann::json& value, size_t max_chars = 80);

}  // namespace lt
