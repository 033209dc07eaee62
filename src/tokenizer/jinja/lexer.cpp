// The Jinja lexer (see lexer.h). Follows jinja2's Lexer.tokeniter: the text before a tag is
// stripped by the tag's sign or by lstrip_blocks, the end of a block or comment tag eats one
// newline (trim_blocks) or, with '-', all whitespace after it.
#include "tokenizer/jinja/lexer.h"

#include <fmt/format.h>

#include <cstring>

#include "tokenizer/jinja/text.h"
#include "tokenizer/jinja/value.h"
#include "tokenizer/utf8.h"

namespace lt::jinja {

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

// Bytes of Python whitespace at s[i] (0 when the character there is not whitespace).
size_t space_len(std::string_view s, size_t i) {
  if (i >= s.size()) return 0;
  size_t len = 0;
  uint32_t c = utf8::decode(s, i, &len);
  return text::is_space(c) ? len : 0;
}

size_t skip_spaces(std::string_view s, size_t i) {
  for (size_t n; (n = space_len(s, i)) > 0;) i += n;
  return i;
}

// str.rstrip(): the length of s without its trailing whitespace.
size_t rstrip_len(std::string_view s) {
  size_t keep = 0;
  for (size_t i = 0, len = 0; i < s.size(); i += len) {
    uint32_t c = utf8::decode(s, i, &len);
    if (!text::is_space(c)) keep = i + len;
  }
  return keep;
}

int count_newlines(std::string_view s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

// Python string-literal escapes, as jinja2 decodes them ("unicode-escape").
std::string unescape(std::string_view body, int line) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    char c = body[i];
    if (c != '\\' || i + 1 == body.size()) {
      out += c;
      continue;
    }
    char e = body[++i];
    auto hex = [&](int n) {
      uint32_t v = 0;
      for (int k = 1; k <= n; ++k) {
        char h = i + k < body.size() ? body[i + k] : 0;
        int d = is_digit(h) ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10 : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
        if (d < 0) throw Failure("truncated \\x / \\u escape in a string", line);
        v = v * 16 + d;
      }
      i += n;
      utf8::append(out, v);
    };
    switch (e) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'v': out += '\v'; break;
      case '\n': break;  // line continuation
      case 'x': hex(2); break;
      case 'u': hex(4); break;
      case 'U': hex(8); break;
      default:
        if (e >= '0' && e <= '7') {
          uint32_t v = e - '0';
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7'; ++k) v = v * 8 + (body[++i] - '0');
          utf8::append(out, v);
        } else {
          out += '\\';
          out += e;
        }
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string_view source) {
    // newlines normalized, then one trailing newline dropped (keep_trailing_newline=False)
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        src_ += '\n';
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      } else {
        src_ += source[i];
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
  }

  std::vector<Token> run() {
    while (pos_ < src_.size()) {
      size_t p = src_.find('{', pos_);
      while (p != std::string::npos && (p + 1 >= src_.size() || std::strchr("{%#", src_[p + 1]) == nullptr))
        p = src_.find('{', p + 1);
      if (p == std::string::npos) {
        text(src_.substr(pos_), 0);
        pos_ = src_.size();
        break;
      }
      const char kind = src_[p + 1];
      const char sign = (p + 2 < src_.size() && (src_[p + 2] == '-' || src_[p + 2] == '+')) ? src_[p + 2] : 0;
      const bool raw = kind == '%' && is_raw_begin(p + 2 + (sign ? 1 : 0));
      before_tag(std::string_view(src_).substr(pos_, p - pos_), sign, kind != '{');
      pos_ = p + 2 + (sign ? 1 : 0);
      line_starting_ = false;
      if (raw) lex_raw();
      else if (kind == '#') lex_comment();
      else lex_tag(kind);
    }
    out_.push_back(Token{TokKind::Eof, "", line_});
    return std::move(out_);
  }

 private:
  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  size_t raw_end_ = 0;  // after `{% raw %}`: where its text starts
  std::vector<Token> out_;

  void text(std::string_view t, int stripped_newlines) {
    if (!t.empty()) out_.push_back(Token{TokKind::Text, std::string(t), line_});
    line_ += count_newlines(t) + stripped_newlines;
  }

  // The data before a tag: '-' strips all whitespace; lstrip_blocks strips the spaces between the
  // line's start and a block or comment tag when nothing else is there.
  void before_tag(std::string_view t, char sign, bool block_or_comment) {
    if (sign == '-') {
      size_t keep = rstrip_len(t);
      text(t.substr(0, keep), count_newlines(t.substr(keep)));
      return;
    }
    if (sign != '+' && block_or_comment) {
      size_t nl = t.rfind('\n');
      size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting_) && l_pos < t.size() && skip_spaces(t, l_pos) == t.size()) t = t.substr(0, l_pos);
    }
    text(t, 0);
  }

  // `{%[-+]?\s*raw\s*(-%}\s*|%})` at p (after `{%` and the sign).
  bool is_raw_begin(size_t p) {
    p = skip_spaces(src_, p);
    if (src_.compare(p, 3, "raw") != 0 || (p + 3 < src_.size() && is_name_char(src_[p + 3]))) return false;
    p = skip_spaces(src_, p + 3);
    if (src_.compare(p, 3, "-%}") == 0) {
      raw_end_ = skip_spaces(src_, p + 3);
      return true;
    }
    if (src_.compare(p, 2, "%}") == 0) {
      raw_end_ = p + 2;
      return true;
    }
    return false;
  }

  void lex_raw() {
    line_ += count_newlines(std::string_view(src_).substr(pos_, raw_end_ - pos_));
    for (size_t p = src_.find("{%", raw_end_); p != std::string::npos; p = src_.find("{%", p + 2)) {
      size_t q = p + 2;
      char sign = (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) ? src_[q++] : 0;
      q = skip_spaces(src_, q);
      if (src_.compare(q, 6, "endraw") != 0) continue;
      q = skip_spaces(src_, q + 6);
      size_t end = end_of_block(q);
      if (end == std::string::npos) continue;
      before_tag(std::string_view(src_).substr(raw_end_, p - raw_end_), sign, true);
      line_ += count_newlines(std::string_view(src_).substr(p, end - p));
      line_starting_ = src_[end - 1] == '\n';
      pos_ = end;
      return;
    }
    throw Failure("missing end of raw directive ({% endraw %})", line_);
  }

  // `+%}`, `-%}\s*` or `%}\n?` at p: the position after it, or npos.
  size_t end_of_block(size_t p) {
    if (src_.compare(p, 3, "+%}") == 0) return p + 3;
    if (src_.compare(p, 3, "-%}") == 0) return skip_spaces(src_, p + 3);
    if (src_.compare(p, 2, "%}") == 0) return p + 2 + (p + 2 < src_.size() && src_[p + 2] == '\n');
    return std::string::npos;
  }

  void lex_comment() {
    for (size_t p = pos_; p < src_.size(); ++p) {
      size_t end = std::string::npos;
      if (src_.compare(p, 3, "+#}") == 0) end = p + 3;
      else if (src_.compare(p, 3, "-#}") == 0) end = skip_spaces(src_, p + 3);
      else if (src_.compare(p, 2, "#}") == 0) end = p + 2 + (p + 2 < src_.size() && src_[p + 2] == '\n');
      if (end == std::string::npos) continue;
      line_ += count_newlines(std::string_view(src_).substr(pos_, end - pos_));
      line_starting_ = src_[end - 1] == '\n';
      pos_ = end;
      return;
    }
    throw Failure("missing end of comment tag (#})", line_);
  }

  // The tokens of a `{{ }}` or `{% %}` tag through its end.
  void lex_tag(char kind) {
    const bool block = kind == '%';
    out_.push_back(Token{block ? TokKind::BlockBegin : TokKind::VarBegin, "", line_});
    std::string balance;
    while (true) {
      if (pos_ >= src_.size())
        throw Failure(block ? "unexpected end of template: a {% tag is not closed with %}"
                            : "unexpected end of template: a {{ tag is not closed with }}", line_);
      if (balance.empty() && try_end(block)) return;
      if (size_t n = space_len(src_, pos_)) {
        line_ += src_[pos_] == '\n';
        pos_ += n;
        continue;
      }
      lex_token(balance);
    }
  }

  bool try_end(bool block) {
    size_t end = std::string::npos;
    if (block) {
      end = end_of_block(pos_);
    } else if (src_.compare(pos_, 3, "-}}") == 0) {
      end = skip_spaces(src_, pos_ + 3);
    } else if (src_.compare(pos_, 2, "}}") == 0) {
      end = pos_ + 2;
    }
    if (end == std::string::npos) return false;
    out_.push_back(Token{block ? TokKind::BlockEnd : TokKind::VarEnd, "", line_});
    line_ += count_newlines(std::string_view(src_).substr(pos_, end - pos_));
    line_starting_ = src_[end - 1] == '\n';
    pos_ = end;
    return true;
  }

  void lex_token(std::string& balance) {
    const char c = src_[pos_];
    if (is_digit(c)) return lex_number();
    if (is_name_start(c)) {
      size_t e = pos_;
      while (e < src_.size() && is_name_char(src_[e])) ++e;
      out_.push_back(Token{TokKind::Name, src_.substr(pos_, e - pos_), line_});
      pos_ = e;
      return;
    }
    if (c == '\'' || c == '"') return lex_string(c);
    static const char* two[] = {"//", "**", "==", "!=", ">=", "<="};
    for (const char* op : two)
      if (src_.compare(pos_, 2, op) == 0) {
        out_.push_back(Token{TokKind::Op, op, line_});
        pos_ += 2;
        return;
      }
    if (std::strchr("+-/*%~[](){}><=.:|,;", c) == nullptr || c == 0)
      throw Failure(fmt::format("unexpected character '{}' in a tag", excerpt_char()), line_);
    if (c == '(' || c == '[' || c == '{') balance += c == '(' ? ')' : c == '[' ? ']' : '}';
    if (c == ')' || c == ']' || c == '}') {
      if (balance.empty()) throw Failure(fmt::format("unexpected '{}'", c), line_);
      if (balance.back() != c) throw Failure(fmt::format("unexpected '{}', expected '{}'", c, balance.back()), line_);
      balance.pop_back();
    }
    out_.push_back(Token{TokKind::Op, std::string(1, c), line_});
    ++pos_;
  }

  std::string excerpt_char() {
    size_t len = 0;
    utf8::decode(src_, pos_, &len);
    return src_.substr(pos_, len);
  }

  // Digits with '_' separators; a float has a fraction and/or an exponent (not after a '.').
  void lex_number() {
    auto digits = [&](size_t p) {
      size_t e = p;
      while (e < src_.size() && (is_digit(src_[e]) || (src_[e] == '_' && e > p && e + 1 < src_.size() && is_digit(src_[e + 1])))) ++e;
      return e;
    };
    size_t e = digits(pos_);
    bool is_float = false;
    const bool after_dot = pos_ > 0 && src_[pos_ - 1] == '.';
    if (!after_dot) {
      size_t f = e;
      if (f + 1 < src_.size() && src_[f] == '.' && is_digit(src_[f + 1])) {
        f = digits(f + 1);
        is_float = true;
      }
      if (f < src_.size() && (src_[f] == 'e' || src_[f] == 'E')) {
        size_t x = f + 1;
        if (x < src_.size() && (src_[x] == '+' || src_[x] == '-')) ++x;
        if (x < src_.size() && is_digit(src_[x])) {
          f = digits(x);
          is_float = true;
        }
      }
      if (is_float) e = f;
    }
    std::string lit;
    for (size_t i = pos_; i < e; ++i)
      if (src_[i] != '_') lit += src_[i];
    Token t{is_float ? TokKind::Float : TokKind::Int, lit, line_};
    try {
      if (is_float) t.fval = std::stod(lit);
      else t.ival = std::stoll(lit);
    } catch (const std::exception&) {
      throw Failure(fmt::format("number '{}' is out of range", lit), line_);
    }
    out_.push_back(std::move(t));
    pos_ = e;
  }

  void lex_string(char q) {
    size_t i = pos_ + 1;
    while (i < src_.size() && src_[i] != q) i += src_[i] == '\\' ? 2 : 1;
    if (i >= src_.size()) throw Failure("unterminated string literal", line_);
    std::string_view body = std::string_view(src_).substr(pos_ + 1, i - pos_ - 1);
    out_.push_back(Token{TokKind::String, unescape(body, line_), line_});
    line_ += count_newlines(body);
    pos_ = i + 1;
  }
};

}  // namespace

std::vector<Token> lex(std::string_view source) { return Lexer(source).run(); }

}  // namespace lt::jinja
