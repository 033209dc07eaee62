// Operations on template values with jinja2's (sandboxed) Python semantics: attribute and item
// access (obj.x tries a method first, obj['x'] the key first), slices, arithmetic, `in`,
// iteration, and printf-style `%` formatting. Errors are jinja::Failure.
#pragma once
#include <string_view>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace lt::jinja {

Value get_attr(const Value& obj, std::string_view name);
Value get_item(const Value& obj, const Value& key);
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
// + - * / // % ** ~ on two values.
Value binary_op(std::string_view op, const Value& a, const Value& b);
Value unary_minus(const Value& v, bool minus);  // -v, or +v when !minus
bool contains(const Value& container, const Value& item);  // item in container
std::vector<Value> iterate(const Value& v);  // list items, dict keys, str characters; undefined: none
// Python's `fmt % args` for strings (%s %r %d %i %f %e %g %x %o %c %%, flags, width, precision).
std::string percent_format(std::string_view fmt, const Value& args);
// An attribute of an item as jinja2's make_attrgetter reads it ("a.b" and "0" path parts).
Value attr_path(const Value& item, std::string_view path);

}  // namespace lt::jinja
