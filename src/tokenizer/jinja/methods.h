// The Python methods a chat template may call on values: str (strip, split, startswith, title,
// replace, format, ...), dict (get, items, keys, values) and list (index, count). Methods that
// modify a value (list.append, dict.update, ...) are refused as jinja2's immutable sandbox does.
#pragma once
#include <string>
#include <string_view>

#include "tokenizer/jinja/value.h"

namespace lt::jinja {

// `obj.name` as a callable bound to obj. Undefined with an empty message when obj has no such
// method; undefined whose use raises "... is unsafe" for a method that modifies.
Value bound_method(const Value& obj, std::string_view name);

// Python str.format(*args, **kwargs) (fields {}, {0}, {name}, !r, and a format spec).
std::string str_format(std::string_view f, const Args& args);

}  // namespace lt::jinja
