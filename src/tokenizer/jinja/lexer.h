// The Jinja lexer: template source to tokens, with jinja2's whitespace handling as transformers
// configures it (trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False):
//   - `{%-` / `{{-` / `{#-` strip all whitespace before the tag, `-%}` / `-}}` / `-#}` all after;
//   - a block or comment tag alone on its line loses the spaces before it (lstrip_blocks; `{%+`
//     keeps them) and the one newline after it (trim_blocks; `+%}` keeps it);
//   - \r\n and \r become \n, and one trailing newline of the template is dropped;
//   - comments vanish, {% raw %}...{% endraw %} is text.
// Inside tags: names, strings (Python escapes), integers, floats and operators; a tag ends only
// where its brackets are balanced (`{{ {'a': {}}}}`).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lt::jinja {

enum class TokKind { Text, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, Eof };

struct Token {
  TokKind kind;
  std::string text;  // Text: the data; Name / Op: the name or operator; String: the unescaped value
  int line = 1;
  int64_t ival = 0;  // Int
  double fval = 0;   // Float
};

// Throws jinja::Failure with the line on a malformed template (unclosed tag, string or comment).
std::vector<Token> lex(std::string_view source);

}  // namespace lt::jinja
