// jinja2's built-in filters and tests as chat templates use them, transformers' tojson, and the
// global functions transformers adds (raise_exception, strftime_now, namespace, dict) plus range.
// The names each knows are what the parser accepts (parser.h: is_known_filter / is_known_test).
#pragma once
#include <string_view>

#include "tokenizer/jinja/value.h"

namespace lt::jinja {

Value apply_filter(std::string_view name, const Value& v, const Args& args);
bool apply_test(std::string_view name, const Value& v, const Args& args);

// The globals every template sees.
DictPtr make_globals();

}  // namespace lt::jinja
