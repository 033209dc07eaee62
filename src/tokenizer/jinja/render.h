// The Jinja renderer: runs a parsed template against a context with jinja2's scoping — `set` in
// a for-loop body or a macro stays there (each iteration starts from the enclosing scope; a
// namespace() carries values out), `if` opens no scope, macros see their defining scope as it is
// when they are called.
// Errors are jinja::Failure carrying the line of the statement or expression that failed.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja/ast.h"

namespace lt::jinja {

struct Rendered {
  std::string text;
  // Byte ranges of text written by {% generation %} blocks at the top level (not inside a macro,
  // set block or filter block), as transformers' AssistantTracker records them.
  std::vector<std::pair<size_t, size_t>> generation;
};

// `context` holds the variables (messages, tools, add_generation_prompt, bos_token, ...); the
// globals (range, namespace, dict, raise_exception, strftime_now) are beneath them.
Rendered render(const Body& body, const DictObj& context);

}  // namespace lt::jinja
