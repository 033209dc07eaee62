// parse_json: a linear pre-scan bounds the nesting depth (brackets outside strings; the scan is
// iterative, so any depth is safe to reject), then nlohmann parses. Errors name the source, the
// line and column, nlohmann's reason without its echo of the input, and a short excerpt.
#include "core/json_parse.h"

#include <algorithm>

#include "core/error.h"
#include "core/mapped_file.h"

namespace lt {

namespace {

std::string prefix(const std::string& what) { return what.empty() ? std::string() : what + ": "; }

struct Position {
  size_t line = 1, column = 1;
};

// 1-based line and column (in bytes) of byte offset `off`.
Position position_of(std::string_view text, size_t off) {
  Position p;
  off = std::min(off, text.size());
  for (size_t i = 0; i < off; ++i) {
    if (text[i] == '\n') {
      ++p.line;
      p.column = 1;
    } else {
      ++p.column;
    }
  }
  return p;
}

// The text from a little before `off`, for "near '...'".
std::string near(std::string_view text, size_t off) {
  off = std::min(off, text.size());
  size_t from = off > 20 ? off - 20 : 0;
  return excerpt(text.substr(from), 40);
}

// Throws when arrays/objects nest deeper than kMaxJsonDepth (brackets inside strings ignored).
void check_depth(std::string_view text, const std::string& what) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) {
        Position p = position_of(text, i);
        fail("{}JSON nests deeper than {} levels (line {}, column {}); no file leantune reads nests more than a "
             "few levels, so this is not a valid config, tokenizer, header or data line",
             prefix(what), kMaxJsonDepth, p.line, p.column);
      }
    } else if (c == ']' || c == '}') {
      depth = std::max(0, depth - 1);
    }
  }
}

// nlohmann's message without its "[json.exception...] " tag, "parse error at line L, column C: "
// and the "; last read: '...'" echo of the input (which can be a whole 10 MB string).
std::string reason_of(const std::string& msg) {
  std::string r = msg;
  if (!r.empty() && r[0] == '[') {
    size_t e = r.find("] ");
    if (e != std::string::npos) r = r.substr(e + 2);
  }
  if (r.rfind("parse error", 0) == 0) {
    size_t c = r.find(": ");
    if (c != std::string::npos) r = r.substr(c + 2);
  }
  size_t lr = r.find("; last read:");
  if (lr != std::string::npos) r = r.substr(0, lr);
  return excerpt(r, 160);
}

}  // namespace

nlohmann::json parse_json(std::string_view text, const std::string& what) {
  check_depth(text, what);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    size_t off = e.byte > 0 ? e.byte - 1 : 0;
    Position p = position_of(text, off);
    fail("{}malformed JSON at line {}, column {}: {}; near '{}'", prefix(what), p.line, p.column, reason_of(e.what()),
         near(text, off));
  } catch (const nlohmann::json::exception& e) {
    fail("{}malformed JSON: {}", prefix(what), reason_of(e.what()));
  }
}

nlohmann::json load_json_file(const std::string& path) { return parse_json(read_text_file(path), path); }

std::string json_excerpt(const nlohmann::json& value, size_t max_chars) {
  // Invalid UTF-8 in a string is replaced, not thrown (dump's default would throw type_error 316).
  return excerpt(value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), max_chars);
}

}  // namespace lt
