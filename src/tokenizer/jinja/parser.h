// The Jinja parser: tokens to a syntax tree, with jinja2's grammar and operator precedence
// (conditional < or < and < not < comparison < + - < ~ < * / // % < ** < unary - + < filters,
// tests, attribute / item access and calls).
// Supported tags: if / elif / else, for (with `if` filter and else), set (also ns.attr and block
// set), macro, call, filter, with, break, continue, raw, and transformers' generation. Other tags
// (include, import, extends, block, ...) and unknown filters or tests are errors naming the line,
// raised when the template is parsed, not when the branch runs.
#pragma once
#include <string_view>

#include "tokenizer/jinja/ast.h"

namespace lt::jinja {

// Throws jinja::Failure with the line of the offending token.
Body parse(std::string_view source);

// Whether the renderer knows a filter / test of this name (the parser checks against these).
bool is_known_filter(std::string_view name);
bool is_known_test(std::string_view name);

}  // namespace lt::jinja
